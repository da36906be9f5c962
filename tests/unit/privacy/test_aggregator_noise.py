"""Aggregator noise (seed 001, Section 6.1.2) and the multi-hot weight bound (Section 6.1.1)."""

from __future__ import annotations

import math
import os
from fractions import Fraction

import numpy as np
import pytest

from privacy.aggregator_noise import (
    AggregatorGaussian,
    AggregatorLaplace,
    aggregator_noise,
    discrete_laplace_variance,
)
from privacy.discrete_gaussian import discrete_gaussian_delta
from privacy.gaussian import analytic_gaussian_sigma
from privacy.mechanisms import mechanism_get, report_weight_bound

# seed 001 Table 2: per-aggregator sigma (OAOC column) and the standard deviation of the sum of
# both aggregators' noise; the draft rounds up to 4 decimals. The draft calibrates the continuous
# Gaussian (Balle-Wang); the aggregators calibrate the discrete one for itself.
TABLE_2 = [(0.317, 23.3903, 33.0788), (0.906, 8.5402, 12.0777), (1.528, 5.1904, 7.3403)]


@pytest.mark.parametrize(("epsilon", "sigma", "both"), TABLE_2)
def test_noise_is_calibrated_for_the_discrete_gaussian_near_seed_001_table_2(
    epsilon: float, sigma: float, both: float
) -> None:
    assert analytic_gaussian_sigma(epsilon, 1e-9, math.sqrt(2)) == pytest.approx(sigma, rel=1e-4)
    assert analytic_gaussian_sigma(epsilon, 1e-9, math.sqrt(2)) * math.sqrt(2) == pytest.approx(both, rel=1e-4)
    noise = AggregatorGaussian(epsilon, 1e-9)
    # The discrete mechanism's exact delta holds at its sigma and fails just below it.
    assert discrete_gaussian_delta(noise.sigma, epsilon) <= 1e-9
    assert discrete_gaussian_delta(noise.sigma * (1 - 1e-7), epsilon) > 1e-9
    # Within 0.1% of the continuous calibration (below it for small sigma: CKS20, Figure 1).
    assert noise.sigma == pytest.approx(sigma, rel=1e-3)
    assert noise.standard_error() == noise.sigma * math.sqrt(2)


def test_noise_comes_from_the_os_csprng_unless_a_test_replays_a_seed(monkeypatch) -> None:
    noise = AggregatorGaussian(1.0, 1e-6)
    assert (noise.noise(200, np.random.default_rng(3)) == noise.noise(200, np.random.default_rng(3))).all()
    calls = []
    real = os.urandom
    monkeypatch.setattr(os, "urandom", lambda n: calls.append(n) or real(n))
    first, second = noise.noise(200), noise.noise(200)
    assert calls and (first != second).any()


def test_a_calibration_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="below 1"):
        AggregatorGaussian(40.0, 0.1).check()
    AggregatorGaussian(1.0, 1e-6).check()


def test_each_aggregator_draws_discrete_gaussian_noise_of_its_sigma() -> None:
    noise = AggregatorGaussian(1.0, 1e-6)
    samples = noise.noise(20_000, np.random.default_rng(8))
    assert samples.dtype == np.int64
    # Var of N_Z(0, s^2) is just below s^2 for s >= 1; the sample variance's standard error is
    # about s^2 sqrt(2 / n). 4 standard errors.
    s2 = noise.sigma**2
    assert abs(samples.var() - s2) < 4 * s2 * math.sqrt(2 / samples.size)
    assert abs(samples.mean()) < 4 * noise.sigma / math.sqrt(samples.size)


def _binomial_tail(trials: int, p: float, at_least: int) -> float:
    return sum(math.comb(trials, c) * p**c * (1 - p) ** (trials - c) for c in range(at_least, trials + 1))


@pytest.mark.parametrize(("name", "epsilon0", "domain"), [("symmetric_rappor", 2.0, 32), ("asymmetric_ohe", 1.0, 16)])
@pytest.mark.parametrize("false_rejection", [1e-3, 1e-9])
def test_weight_bound_is_the_smallest_meeting_the_false_rejection_rate(
    name: str, epsilon0: float, domain: int, false_rejection: float
) -> None:
    oracle = mechanism_get(name, epsilon0)
    p0 = 1 / (math.exp(epsilon0) + 1)
    m = report_weight_bound(oracle, domain, false_rejection)
    # P(1 + C > m) = P(C >= m), C ~ Binomial(d - 1, p0), summed exactly.
    assert _binomial_tail(domain - 1, p0, m) <= false_rejection
    assert _binomial_tail(domain - 1, p0, m - 1) > false_rejection


def test_honest_reports_stay_within_the_weight_bound() -> None:
    oracle = mechanism_get("symmetric_rappor", 1.0)
    m = report_weight_bound(oracle, 64, 1e-6)
    reports = oracle.privatize(np.random.default_rng(4).integers(0, 64, 50_000), 64, np.random.default_rng(5))
    # Expected rejections 50,000 * 1e-6 = 0.05: none in this seeded run.
    assert int(reports.sum(axis=1).max()) <= m


@pytest.mark.parametrize("name", ["kary_rr", "hadamard_response", "binary_rr"])
def test_one_hot_mechanisms_have_weight_bound_one(name: str) -> None:
    assert report_weight_bound(mechanism_get(name, 2.0), 2, 1e-9) == 1


def laplace_log_pmf(scale: Fraction, x: int) -> Fraction:
    """log P[X = x] of the discrete Laplace of scale b, up to its normalising constant (which cancels)."""
    return -abs(x) / scale


@pytest.mark.parametrize("epsilon", [0.1, 0.3, 1.0, 2.0])
def test_laplace_noise_is_pure_epsilon_dp_for_a_report_moving_between_buckets(epsilon: float) -> None:
    scale = AggregatorLaplace(epsilon).scale
    # Neighbouring histograms: one report moves from bucket 1 to bucket 2 (counts c and c' = c - e1 + e2).
    # The privacy loss of an output z, exactly in rationals, over every z near the counts (beyond them it
    # is constant: each |z_i - c_i| - |z_i - c'_i| is then +-1).
    losses = [
        laplace_log_pmf(scale, z1)
        + laplace_log_pmf(scale, z2)
        - laplace_log_pmf(scale, z1 + 1)
        - laplace_log_pmf(scale, z2 - 1)
        for z1 in range(-4, 5)
        for z2 in range(-4, 5)
    ]
    assert max(losses) == Fraction(epsilon) == 2 / scale
    assert min(losses) == -Fraction(epsilon)  # the pair in the other order


@pytest.mark.parametrize("scale", [Fraction(1, 3), Fraction(1), Fraction(7, 3), Fraction(20), Fraction(2000)])
def test_laplace_variance_formula_matches_the_exact_sum(scale: Fraction) -> None:
    q, gap = math.exp(-1 / float(scale)), -math.expm1(-1 / float(scale))  # gap = 1 - q, accurately
    reach = math.ceil(120 * float(scale)) + 10
    # The sum of x^2 P[X = x] over |x| <= reach; the rest, 2 (1 - q) / (1 + q) sum_{x > reach} x^2 q^x,
    # is at most tail (x^2 <= (reach + 1)^2 (1 + j)^2 for x = reach + 1 + j, and sum (1 + j)^2 q^j <= 2 / (1 - q)^3).
    total = math.fsum(2 * x * x * gap / (1 + q) * q**x for x in range(1, reach + 1))
    tail = 4 * gap / (1 + q) * (reach + 1) ** 2 * q ** (reach + 1) / gap**3
    assert tail < 1e-15 * total
    assert discrete_laplace_variance(scale) == pytest.approx(total, rel=1e-12)
    assert discrete_laplace_variance(scale) == pytest.approx(2 * q / gap**2, rel=1e-12)


def test_laplace_standard_error_counts_both_aggregators() -> None:
    noise = AggregatorLaplace(1.0)
    assert noise.scale == 2 and noise.delta == 0
    assert noise.standard_error() == pytest.approx(math.sqrt(2 * discrete_laplace_variance(2)), rel=1e-15)


def test_delta_zero_selects_the_discrete_laplace() -> None:
    assert aggregator_noise(1.0, 0.0) == AggregatorLaplace(1.0)
    assert aggregator_noise(1.0, 1e-6) == AggregatorGaussian(1.0, 1e-6)
    with pytest.raises(ValueError, match="delta is 0"):
        AggregatorLaplace(1.0, 1e-6)


def test_laplace_noise_below_a_standard_deviation_of_one_is_refused() -> None:
    with pytest.raises(ValueError, match="below 1"):
        AggregatorLaplace(3.0).check()
    AggregatorLaplace(2.5).check()


def test_laplace_noise_comes_from_the_os_csprng_unless_a_test_replays_a_seed(monkeypatch) -> None:
    noise = AggregatorLaplace(0.5)
    assert (noise.noise(200, np.random.default_rng(3)) == noise.noise(200, np.random.default_rng(3))).all()
    calls = []
    real = os.urandom
    monkeypatch.setattr(os, "urandom", lambda n: calls.append(n) or real(n))
    first, second = noise.noise(200), noise.noise(200)
    assert first.dtype == np.int64 and calls and (first != second).any()


def laplace_sum_pmf(scale: Fraction) -> tuple[np.ndarray, np.ndarray]:
    """Support and pmf of the sum of two independent discrete Laplace of scale b, by convolution of the
    pmf truncated where its mass is below e^-40 (4e-18)."""
    q = math.exp(-1 / float(scale))
    reach = math.ceil(40 * float(scale)) + 20
    pmf = (1 - q) / (1 + q) * q ** np.abs(np.arange(-reach, reach + 1)).astype(float)
    return np.arange(-2 * reach, 2 * reach + 1), np.convolve(pmf, pmf)


@pytest.mark.parametrize("epsilon", [2.5, 1.0, 6 / 7, 0.05])
def test_laplace_intervals_take_the_exact_quantile_of_both_noises(epsilon: float) -> None:
    noise = AggregatorLaplace(epsilon)
    support, pmf = laplace_sum_pmf(noise.scale)
    for miss in (0.05, 0.05 / 8, 1e-6):
        m = noise.interval_half_width(miss)
        # The smallest half-width that misses with probability at most `miss`.
        assert pmf[np.abs(support) > m].sum() <= miss * (1 + 1e-12)
        assert pmf[np.abs(support) > m - 1].sum() > miss


def test_a_normal_quantile_would_under_cover_laplace_noise() -> None:
    noise = AggregatorLaplace(0.01)  # b = 200: nearly continuous
    support, pmf = laplace_sum_pmf(noise.scale)
    normal = math.floor(1.96 * noise.standard_error())
    assert pmf[np.abs(support) > normal].sum() > 0.058
    assert noise.interval_half_width(0.05) > normal
