"""Seeded proof that the exact sampler of a sum of reports has the distribution of the per-device sum.

Asymmetric OHE and symmetric RAPPOR report every coordinate with its own coin, so above
``EXACT_SUM_ABOVE`` coins their ``privatize_sum`` draws S_d = Binomial(c_d, p_own) + Binomial(n - c_d,
p_other) instead of n x k coins. These tests force that path (the constant patched to 0) and check it
against the known distribution and against the per-device path (``privatize(...).sum(axis=0)``).

Tolerances come from the exact binomial variance: 4 standard errors for a single estimate and for a
sample mean over R draws; for a sample variance over R draws, the two-sided chi-square (one path
against the known variance) or F (the two paths against each other) quantiles at the probability
of a 4-standard-error normal deviation.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt
import pytest
from scipy import stats

from privacy import randomizer_support
from privacy.mechanisms import AsymmetricOHE
from privacy.randomized_response import SymmetricRappor

K = 50
# A few thousand devices (5,640) over 50 buckets, skewed like a Zipf law, with two empty buckets.
COUNTS = np.floor(4_000 / np.arange(1, K + 1) ** 0.8 / 4.5).astype(np.int64)
COUNTS[[17, K - 1]] = 0
N = int(COUNTS.sum())
VALUES = np.random.default_rng(11).permutation(np.repeat(np.arange(K), COUNTS))
EPSILONS = [0.5, 2.0, 4.0]
MECHANISMS = [AsymmetricOHE, SymmetricRappor]
REPETITIONS = 400
# Two-sided probability of a normal deviation beyond 4 standard errors: the level of every
# chi-square and F bound below, matching the 4-SE tolerance of the mean checks.
ALPHA = 2 * stats.norm.sf(4.0)

Mechanism = AsymmetricOHE | SymmetricRappor


def bit_probabilities(mechanism: Mechanism) -> tuple[float, float]:
    """(P[bit d = 1 | device in bucket d], P[bit d = 1 | device elsewhere]), from the docstrings."""
    p0 = 1.0 / (math.exp(mechanism.epsilon0) + 1.0)
    if isinstance(mechanism, AsymmetricOHE):
        return 0.5, p0
    return 1.0 - p0, p0  # symmetric RAPPOR: the own bit is kept, every other bit set, w.p. 1 - p0 and p0


def exact_moments(
    mechanism: Mechanism, counts: npt.NDArray[np.int64]
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Mean and variance of S_d = Binomial(c_d, p_own) + Binomial(n - c_d, p_other)."""
    p_own, p_other = bit_probabilities(mechanism)
    n = counts.sum()
    mean = counts * p_own + (n - counts) * p_other
    variance = counts * p_own * (1 - p_own) + (n - counts) * p_other * (1 - p_other)
    return mean, variance


@pytest.fixture
def exact_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(randomizer_support, "EXACT_SUM_ABOVE", 0)


def forbid_per_device_coins(monkeypatch: pytest.MonkeyPatch, cls: type[Mechanism]) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the exact-sum path must not draw per-device coins")

    monkeypatch.setattr(cls, "privatize", refuse)


@pytest.mark.usefixtures("exact_path")
@pytest.mark.parametrize("epsilon0", EPSILONS)
@pytest.mark.parametrize("cls", MECHANISMS)
def test_exact_sum_debiases_to_the_true_counts_within_four_standard_errors(
    cls: type[Mechanism], epsilon0: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    mechanism = cls(epsilon0=epsilon0)
    forbid_per_device_coins(monkeypatch, cls)
    report_sum = mechanism.privatize_sum(VALUES, K, np.random.default_rng(20261124))
    estimates = mechanism.debias(report_sum, N, K)
    standard_error = np.sqrt(mechanism.variance(COUNTS.astype(float), N, K))
    _, variance = exact_moments(mechanism, COUNTS)
    p_own, p_other = bit_probabilities(mechanism)
    # The class's variance of the estimate is the exact binomial variance of S_d, rescaled.
    np.testing.assert_allclose(standard_error, np.sqrt(variance) / (p_own - p_other), rtol=1e-12)
    assert np.all(np.abs(estimates - COUNTS) <= 4 * standard_error), (estimates - COUNTS) / standard_error


@pytest.mark.parametrize("epsilon0", [0.5, 4.0])
@pytest.mark.parametrize("cls", MECHANISMS)
def test_exact_sum_has_the_per_bucket_mean_and_variance_of_the_per_device_sum(
    cls: type[Mechanism], epsilon0: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    mechanism = cls(epsilon0=epsilon0)
    device_rng = np.random.default_rng(5)
    per_device = np.array(
        [mechanism.privatize(VALUES, K, device_rng).sum(axis=0, dtype=np.int64) for _ in range(REPETITIONS)]
    )
    monkeypatch.setattr(randomizer_support, "EXACT_SUM_ABOVE", 0)
    forbid_per_device_coins(monkeypatch, cls)
    exact_rng = np.random.default_rng(6)
    exact = np.array([mechanism.privatize_sum(VALUES, K, exact_rng) for _ in range(REPETITIONS)])

    mean, variance = exact_moments(mechanism, COUNTS)
    standard_error_of_mean = np.sqrt(variance / REPETITIONS)
    for sums in (exact, per_device):
        assert np.all(np.abs(sums.mean(axis=0) - mean) <= 4 * standard_error_of_mean)
    difference = exact.mean(axis=0) - per_device.mean(axis=0)
    assert np.all(np.abs(difference) <= 4 * math.sqrt(2) * standard_error_of_mean), difference

    # Sample variances: (R - 1) s^2 / sigma^2 ~ chi-square(R - 1) per bucket, and the ratio of the two
    # paths' sample variances ~ F(R - 1, R - 1). Pooled over the k buckets: chi-square(k (R - 1)).
    dof = REPETITIONS - 1
    low, high = stats.chi2.ppf([ALPHA / 2, 1 - ALPHA / 2], dof) / dof
    pooled_low, pooled_high = stats.chi2.ppf([ALPHA / 2, 1 - ALPHA / 2], K * dof) / (K * dof)
    exact_ratio = exact.var(axis=0, ddof=1) / variance
    device_ratio = per_device.var(axis=0, ddof=1) / variance
    for ratio in (exact_ratio, device_ratio):
        assert np.all((low <= ratio) & (ratio <= high)), ratio
        assert pooled_low <= ratio.mean() <= pooled_high, ratio.mean()
    f_low, f_high = stats.f.ppf([ALPHA / 2, 1 - ALPHA / 2], dof, dof)
    between = exact_ratio / device_ratio
    assert np.all((f_low <= between) & (between <= f_high)), between


@pytest.mark.parametrize("cls", MECHANISMS)
def test_a_fleet_of_a_million_devices_over_twenty_thousand_buckets_is_summed_exactly(
    cls: type[Mechanism], monkeypatch: pytest.MonkeyPatch
) -> None:
    # 2e10 coins: far above the default EXACT_SUM_ABOVE, so no per-device coin may be drawn.
    n, k = 1_000_000, 20_000
    mechanism = cls(epsilon0=2.0)
    forbid_per_device_coins(monkeypatch, cls)
    values = np.random.default_rng(8).integers(0, k, size=n)
    report_sum = mechanism.privatize_sum(values, k, np.random.default_rng(9))
    assert report_sum.shape == (k,)
    assert np.issubdtype(report_sum.dtype, np.integer)
    assert report_sum.min() >= 0 and report_sum.max() <= n
    mean, variance = exact_moments(mechanism, np.bincount(values, minlength=k))
    assert abs(report_sum.sum() - mean.sum()) <= 4 * math.sqrt(variance.sum())


@pytest.mark.parametrize("cls", MECHANISMS)
def test_the_threshold_keeps_per_device_coins_up_to_it_and_samples_exactly_above_it(
    cls: type[Mechanism], monkeypatch: pytest.MonkeyPatch
) -> None:
    mechanism = cls(epsilon0=1.0)
    monkeypatch.setattr(randomizer_support, "EXACT_SUM_ABOVE", N * K)
    summed = mechanism.privatize_sum(VALUES, K, np.random.default_rng(3))
    single = mechanism.privatize(VALUES, K, np.random.default_rng(3)).sum(axis=0)
    np.testing.assert_array_equal(summed, single)

    monkeypatch.setattr(randomizer_support, "EXACT_SUM_ABOVE", N * K - 1)
    forbid_per_device_coins(monkeypatch, cls)
    assert mechanism.privatize_sum(VALUES, K, np.random.default_rng(3)).shape == (K,)


@pytest.mark.usefixtures("exact_path")
@pytest.mark.parametrize("cls", MECHANISMS)
def test_exact_sum_still_validates_the_values(cls: type[Mechanism]) -> None:
    mechanism = cls(epsilon0=1.0)
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="bucket indices"):
        mechanism.privatize_sum(np.array([0, K]), K, rng)
    with pytest.raises(ValueError, match="bucket indices"):
        mechanism.privatize_sum(np.array([-1, 0]), K, rng)
