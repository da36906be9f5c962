"""Aggregator noise (seed 001, Section 6.1.2) and the multi-hot weight bound (Section 6.1.1)."""

from __future__ import annotations

import math
import os

import numpy as np
import pytest

from privacy.aggregator_noise import AggregatorGaussian
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
