"""Seeded statistical proof that every local randomizer's estimator is unbiased and its variance right.

Tolerances come from the stated variance: the mean of R independent estimates has standard error
sqrt(Var/R), and we allow 4 of them in every bucket; the sample variance of R normal estimates has
relative standard error sqrt(2/(R - 1)), and we allow 4 of those.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt
import pytest

from privacy.mechanisms import MECHANISMS, mechanism_get
from privacy.one_bit_mean import MemoizedOneBitMean, OneBitMean

HISTOGRAM_COUNTS = np.array([3_000, 8_000, 5_000, 2_500, 1_000, 400, 100, 0])  # 20,000 devices
BINARY_COUNTS = np.array([14_000, 6_000])
NEW_MECHANISMS = sorted(set(MECHANISMS) - {"asymmetric_ohe"})  # asymmetric OHE: test_asymmetric_ohe.py
EPSILONS = [0.5, 2.0, 4.0]
BIAS_REPETITIONS = 200
VARIANCE_REPETITIONS = 1_000


def true_counts(name: str) -> npt.NDArray[np.int64]:
    return BINARY_COUNTS if name == "binary_rr" else HISTOGRAM_COUNTS


def histogram_estimates(name: str, epsilon0: float, repetitions: int, seed: int) -> npt.NDArray[np.float64]:
    mechanism = mechanism_get(name, epsilon0)
    counts = true_counts(name)
    n, k = int(counts.sum()), counts.size
    values = np.repeat(np.arange(k), counts)
    rng = np.random.default_rng(seed)
    return np.array([mechanism.debias(mechanism.privatize_sum(values, k, rng), n, k) for _ in range(repetitions)])


@pytest.mark.parametrize("epsilon0", EPSILONS)
@pytest.mark.parametrize("name", NEW_MECHANISMS)
def test_histogram_estimate_is_unbiased_within_four_standard_errors_in_every_bucket(name: str, epsilon0: float) -> None:
    counts = true_counts(name)
    estimates = histogram_estimates(name, epsilon0, BIAS_REPETITIONS, seed=20261123)
    variance = mechanism_get(name, epsilon0).variance(counts.astype(float), int(counts.sum()), counts.size)
    standard_error_of_mean = np.sqrt(variance / BIAS_REPETITIONS)
    bias = estimates.mean(axis=0) - counts
    assert np.all(np.abs(bias) <= 4 * standard_error_of_mean), (bias, standard_error_of_mean)


@pytest.mark.parametrize("epsilon0", EPSILONS)
@pytest.mark.parametrize("name", NEW_MECHANISMS)
def test_histogram_stated_variance_matches_the_empirical_variance(name: str, epsilon0: float) -> None:
    counts = true_counts(name)
    estimates = histogram_estimates(name, epsilon0, VARIANCE_REPETITIONS, seed=7)
    stated = mechanism_get(name, epsilon0).variance(counts.astype(float), int(counts.sum()), counts.size)
    empirical = estimates.var(axis=0, ddof=1)
    relative_standard_error = math.sqrt(2 / (VARIANCE_REPETITIONS - 1))
    assert np.all(np.abs(empirical / stated - 1) <= 4 * relative_standard_error), empirical / stated


@pytest.mark.parametrize("name", sorted(MECHANISMS))
def test_privatize_sum_equals_the_sum_of_single_reports_under_the_same_coins(name: str) -> None:
    mechanism = mechanism_get(name, 1.0)
    k = 2 if name == "binary_rr" else 5
    values = np.random.default_rng(1).integers(0, k, size=1_000)
    summed = mechanism.privatize_sum(values, k, np.random.default_rng(3))
    single = mechanism.privatize(values, k, np.random.default_rng(3)).sum(axis=0)
    assert summed.shape == (mechanism.report_length(k),)
    np.testing.assert_array_equal(summed, single)


# 1-bit mean: 20,000 devices with values in [0, 24] (hours), a skewed spread with mass at both ends.
UPPER = 24.0
_spread = np.random.default_rng(99).beta(0.7, 1.6, size=20_000) * UPPER
DAY_ONE = np.concatenate([np.zeros(1_000), np.full(500, UPPER), _spread[1_500:]])
DAY_TWO = np.clip(DAY_ONE + np.random.default_rng(98).normal(0.0, 1.5, size=DAY_ONE.size), 0.0, UPPER)


def exact_variance(mechanism: OneBitMean | MemoizedOneBitMean, values: npt.NDArray[np.float64]) -> float:
    return mechanism.variance(values.size, float(values.mean()), float(np.mean(values**2)))


def fresh_estimates(epsilon0: float, repetitions: int, seed: int) -> npt.NDArray[np.float64]:
    mechanism = OneBitMean(epsilon0=epsilon0, upper=UPPER)
    rng = np.random.default_rng(seed)
    n = DAY_ONE.size
    return np.array([mechanism.estimate_mean(mechanism.privatize_sum(DAY_ONE, rng), n) for _ in range(repetitions)])


def memoized_estimates(epsilon0: float, repetitions: int, seed: int) -> npt.NDArray[np.float64]:
    """(repetitions, 2): the two days' estimates, each repetition with a fresh fleet of memos."""
    mechanism = MemoizedOneBitMean(epsilon0=epsilon0, upper=UPPER)
    rng = np.random.default_rng(seed)
    n = DAY_ONE.size
    estimates = []
    for _ in range(repetitions):
        memo = mechanism.memoize(n, rng)
        estimates.append([mechanism.estimate_mean(mechanism.privatize_sum(day, memo), n) for day in (DAY_ONE, DAY_TWO)])
    return np.array(estimates)


@pytest.mark.parametrize("epsilon0", EPSILONS)
def test_one_bit_mean_is_unbiased_within_four_standard_errors(epsilon0: float) -> None:
    mechanism = OneBitMean(epsilon0=epsilon0, upper=UPPER)
    repetitions = 1_000
    estimates = fresh_estimates(epsilon0, repetitions, seed=31)
    standard_error_of_mean = math.sqrt(exact_variance(mechanism, DAY_ONE) / repetitions)
    assert abs(estimates.mean() - DAY_ONE.mean()) <= 4 * standard_error_of_mean


@pytest.mark.parametrize("epsilon0", EPSILONS)
def test_one_bit_mean_stated_variance_matches_the_empirical_variance(epsilon0: float) -> None:
    mechanism = OneBitMean(epsilon0=epsilon0, upper=UPPER)
    repetitions = 1_000
    empirical = fresh_estimates(epsilon0, repetitions, seed=32).var(ddof=1)
    ratio = empirical / exact_variance(mechanism, DAY_ONE)
    assert abs(ratio - 1) <= 4 * math.sqrt(2 / (repetitions - 1)), ratio


@pytest.mark.parametrize("epsilon0", EPSILONS)
def test_memoized_one_bit_mean_is_unbiased_on_every_day(epsilon0: float) -> None:
    mechanism = MemoizedOneBitMean(epsilon0=epsilon0, upper=UPPER)
    repetitions = 1_000
    estimates = memoized_estimates(epsilon0, repetitions, seed=33)
    for day, values in enumerate((DAY_ONE, DAY_TWO)):
        standard_error_of_mean = math.sqrt(exact_variance(mechanism, values) / repetitions)
        assert abs(estimates[:, day].mean() - values.mean()) <= 4 * standard_error_of_mean, day


@pytest.mark.parametrize("epsilon0", EPSILONS)
def test_memoized_one_bit_mean_stated_variance_matches_the_empirical_variance(epsilon0: float) -> None:
    mechanism = MemoizedOneBitMean(epsilon0=epsilon0, upper=UPPER)
    repetitions = 1_000
    estimates = memoized_estimates(epsilon0, repetitions, seed=34)
    for day, values in enumerate((DAY_ONE, DAY_TWO)):
        ratio = estimates[:, day].var(ddof=1) / exact_variance(mechanism, values)
        assert abs(ratio - 1) <= 4 * math.sqrt(2 / (repetitions - 1)), (day, ratio)


def test_seed_004_integer_offset_rounding_would_be_biased() -> None:
    # Seed 004 rounds up when x + alpha > m with alpha uniform on {0, ..., m - 1}: for integer x >= 1
    # that happens for x - 1 of the m offsets, so the rounded value has mean x - 1, not x.
    upper = 24
    offsets = np.arange(upper)
    for x in range(1, upper + 1):
        assert np.mean(x + offsets > upper) * upper == pytest.approx(x - 1)
        # The rule used here, x + alpha >= m, rounds up for exactly x of the m offsets.
        assert np.mean(x + offsets >= upper) * upper == pytest.approx(x)


def test_one_bit_mean_variance_without_mean_square_is_an_upper_bound_exact_for_a_constant_fleet() -> None:
    mechanism = OneBitMean(epsilon0=1.0, upper=UPPER)
    n, mean = DAY_ONE.size, float(DAY_ONE.mean())
    assert mechanism.variance(n, mean) >= exact_variance(mechanism, DAY_ONE)
    constant = np.full(1_000, 7.0)
    assert mechanism.variance(constant.size, 7.0) == pytest.approx(exact_variance(mechanism, constant), rel=1e-12)
