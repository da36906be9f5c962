"""Seeded statistical proof that a recipe's expected error per bucket (privacy.accuracy) is the error
releases have: simulated with the devices' randomizers and the release's estimators, fixed seeds.

Each repetition releases every bucket once; its statistic is the mean over buckets of the squared
error (whose expectation is the predicted variance, every bucket holding reports / buckets) and
the share of buckets within the predicted 95% half-width. Repetitions are independent, so the
tolerance is 4 standard errors of the mean over repetitions, estimated from the repetitions
themselves (correlation between buckets of one release is allowed for).
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt
import pytest

from privacy.accuracy import LEVEL, expected_error
from privacy.aggregator_noise import aggregator_noise
from privacy.mechanisms import MECHANISMS, mechanism_get
from privacy.parameters import PrivacyParameters


def client(mechanism: str, epsilon0: float) -> PrivacyParameters:
    return PrivacyParameters(
        noise="client", mechanism=mechanism, epsilon0=epsilon0, epsilon=1.0, delta=1e-6, sampling_rate=1.0, min_cohort=1
    )


def aggregator(epsilon: float, delta: float) -> PrivacyParameters:
    return PrivacyParameters(
        noise="aggregator", mechanism="", epsilon0=None, epsilon=epsilon, delta=delta, sampling_rate=1.0, min_cohort=1
    )


def within_four_standard_errors(per_repetition: npt.NDArray[np.float64], predicted: float) -> tuple[bool, str]:
    mean = float(per_repetition.mean())
    error = float(per_repetition.std(ddof=1)) / math.sqrt(per_repetition.size)
    return abs(mean - predicted) <= 4 * error, f"empirical {mean:.6g}, predicted {predicted:.6g}, se {error:.3g}"


def client_errors(privacy: PrivacyParameters, buckets: int, reports: int, repetitions: int, seed: int):
    """(repetitions, buckets) errors of debiased counts, every bucket holding reports / buckets devices."""
    oracle = mechanism_get(privacy.mechanism, privacy.epsilon0)
    values = np.repeat(np.arange(buckets), reports // buckets)
    truth = np.bincount(values, minlength=buckets)
    rng = np.random.default_rng(seed)
    return np.array(
        [
            oracle.debias(oracle.privatize_sum(values, buckets, rng), reports, buckets) - truth
            for _ in range(repetitions)
        ]
    )


CLIENT_CASES = [
    *[(name, 2.0, 10, 20_000, 400) for name in sorted(set(MECHANISMS) - {"binary_rr"})],
    ("binary_rr", 1.0, 2, 20_000, 400),
    ("kary_rr", 4.0, 16, 32_000, 400),
    # The case: 100,000 devices over 20,000 buckets (one release holds 20,000 independent buckets).
    ("asymmetric_ohe", 2.0, 20_000, 100_000, 40),
]


@pytest.mark.parametrize(("mechanism", "epsilon0", "buckets", "reports", "repetitions"), CLIENT_CASES)
def test_client_noise_expected_error_matches_simulated_releases(
    mechanism: str, epsilon0: float, buckets: int, reports: int, repetitions: int
) -> None:
    privacy = client(mechanism, epsilon0)
    predicted = expected_error(privacy, buckets=buckets, reports=reports)
    errors = client_errors(privacy, buckets, reports, repetitions, seed=20261126)
    ok, detail = within_four_standard_errors((errors**2).mean(axis=1), predicted.standard_error**2)
    assert ok, f"variance: {detail}"
    covered = (np.abs(errors) <= predicted.half_width).mean(axis=1)
    ok, detail = within_four_standard_errors(covered, LEVEL)
    assert ok, f"95% coverage: {detail}"


@pytest.mark.parametrize(("epsilon", "delta"), [(1.0, 1e-6), (0.3, 1e-8), (1.0, 0.0), (0.2, 0.0)])
def test_aggregator_noise_expected_error_matches_both_aggregators_noise(epsilon: float, delta: float) -> None:
    privacy = aggregator(epsilon, delta)
    predicted = expected_error(privacy, buckets=50, reports=100_000)
    noise = aggregator_noise(epsilon, delta)
    rng = np.random.default_rng(77)
    repetitions = 400
    errors = np.array([noise.noise(50, rng) + noise.noise(50, rng) for _ in range(repetitions)], dtype=np.float64)
    ok, detail = within_four_standard_errors((errors**2).mean(axis=1), predicted.standard_error**2)
    assert ok, f"variance: {detail}"
    covered = (np.abs(errors) <= predicted.half_width).mean(axis=1)
    # The discrete Laplace's half-width is its exact quantile: at least 95%, and for these scales
    # the integer step keeps it within a few tenths of a percent of it.
    ok, detail = within_four_standard_errors(covered, LEVEL)
    assert ok or covered.mean() >= LEVEL, f"95% coverage: {detail}"
