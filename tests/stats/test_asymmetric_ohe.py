"""Seeded statistical proof that the asymmetric OHE estimator is unbiased and its variance right.

Tolerances come from the known variance: with R independent repetitions, the mean of R
estimates has standard error sqrt(Var/R), and we allow 4 of them in every bucket.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from privacy.mechanisms import AsymmetricOHE

TRUE_COUNTS = np.array([30_000, 80_000, 50_000, 25_000, 10_000, 4_000, 1_000, 0])  # 200,000 devices
N = int(TRUE_COUNTS.sum())
K = TRUE_COUNTS.size
VALUES = np.repeat(np.arange(K), TRUE_COUNTS)


@pytest.mark.parametrize("epsilon0", [0.5, 2.0, 4.0])
def test_estimate_is_unbiased_within_four_standard_errors_in_every_bucket(epsilon0: float) -> None:
    mechanism = AsymmetricOHE(epsilon0=epsilon0)
    rng = np.random.default_rng(20261123)
    repetitions = 40
    estimates = np.array([mechanism.debias(mechanism.privatize_sum(VALUES, K, rng), N, K) for _ in range(repetitions)])
    variance = mechanism.variance(TRUE_COUNTS.astype(float), N, K)
    standard_error_of_mean = np.sqrt(variance / repetitions)
    bias = estimates.mean(axis=0) - TRUE_COUNTS
    assert np.all(np.abs(bias) <= 4 * standard_error_of_mean), (bias, standard_error_of_mean)


@pytest.mark.parametrize("epsilon0", [0.5, 2.0, 4.0])
def test_stated_variance_matches_the_empirical_variance(epsilon0: float) -> None:
    mechanism = AsymmetricOHE(epsilon0=epsilon0)
    rng = np.random.default_rng(7)
    repetitions = 200
    estimates = np.array([mechanism.debias(mechanism.privatize_sum(VALUES, K, rng), N, K) for _ in range(repetitions)])
    stated = mechanism.variance(TRUE_COUNTS.astype(float), N, K)
    empirical = estimates.var(axis=0, ddof=1)
    # For normal estimates the sample variance has relative standard error sqrt(2/(R-1)).
    relative_standard_error = math.sqrt(2 / (repetitions - 1))
    assert np.all(np.abs(empirical / stated - 1) <= 4 * relative_standard_error), empirical / stated


def test_privatize_sum_equals_the_sum_of_single_reports_under_the_same_coins() -> None:
    mechanism = AsymmetricOHE(epsilon0=1.0)
    values = np.random.default_rng(1).integers(0, 5, size=1_000)
    summed = mechanism.privatize_sum(values, 5, np.random.default_rng(3))
    single = mechanism.privatize(values, 5, np.random.default_rng(3)).sum(axis=0)
    np.testing.assert_array_equal(summed, single)
