"""Seeded statistical proof that a refinement's combined histogram (analyses.adaptive.combined) is
unbiased and has the standard errors it states, and never more error than the last round alone.

Two rounds as a refinement makes them: [0, 25, 50, 75, 100], then [0, 25) and [25, 50) halved.
Each repetition draws both rounds' estimates around the true counts with the standard errors the
releases state (independent noise: each round is a fresh randomization of the same devices), and
pools them. Tolerances are 4 standard errors of the mean over the repetitions, estimated from the
repetitions themselves.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from analyses.adaptive.combined import refinement_combined
from privacy.encoding import BucketedType

FIRST = [0.0, 25.0, 50.0, 75.0, 100.0]
SECOND = [0.0, 12.5, 25.0, 37.5, 50.0, 75.0, 100.0]
# True counts of the second round's 8 buckets: OOV, [0, 12.5), ..., [100, inf).
TRUTH = np.array([40.0, 300.0, 900.0, 2500.0, 3100.0, 1800.0, 600.0, 260.0])
SE_FIRST, SE_SECOND = 55.0, 40.0
REPETITIONS = 4000


def level(boundaries: list[float], estimates: np.ndarray, se: float) -> dict:
    labels = BucketedType(tuple(boundaries)).labels
    return {
        "boundaries": boundaries,
        "reports": 10_000,
        "histogram": [{"bucket": b, "estimate": float(e), "standard_error": se} for b, e in zip(labels, estimates)],
    }


def first_round_truth() -> np.ndarray:
    # OOV; [0, 25) = [0, 12.5) + [12.5, 25); [25, 50) = its two halves; the rest as they are.
    return np.array([TRUTH[0], TRUTH[1] + TRUTH[2], TRUTH[3] + TRUTH[4], TRUTH[5], TRUTH[6], TRUTH[7]])


def simulate(seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    first = first_round_truth() + rng.normal(0.0, SE_FIRST, size=(REPETITIONS, 6))
    second = TRUTH + rng.normal(0.0, SE_SECOND, size=(REPETITIONS, 8))
    estimates, errors = [], []
    for one, two in zip(first, second):
        pooled = refinement_combined([level(FIRST, one, SE_FIRST), level(SECOND, two, SE_SECOND)], [1.0, 1.0])
        estimates.append([b["estimate"] for b in pooled["buckets"]])
        errors.append([b["standard_error"] for b in pooled["buckets"]])
    return np.array(estimates), np.array(errors)


def test_the_combined_histogram_is_unbiased_and_its_standard_errors_are_right() -> None:
    estimates, errors = simulate(seed=31)
    assert np.allclose(errors, errors[0])  # known errors: the same in every repetition
    stated = errors[0]
    deviation = estimates - TRUTH
    mean_error = deviation.std(axis=0, ddof=1) / math.sqrt(REPETITIONS)
    assert np.all(np.abs(deviation.mean(axis=0)) <= 4 * mean_error), deviation.mean(axis=0)
    # Standardised squared errors average 1 when the stated standard errors are right.
    squared = np.square(deviation / stated)
    tolerance = 4 * squared.std(axis=0, ddof=1) / math.sqrt(REPETITIONS)
    assert np.all(np.abs(squared.mean(axis=0) - 1.0) <= tolerance), squared.mean(axis=0)


def test_pooling_never_adds_error_and_narrows_the_buckets_an_earlier_round_measured() -> None:
    _, errors = simulate(seed=5)
    stated = errors[0]
    assert np.all(stated <= SE_SECOND + 1e-9)
    # Every bucket's parent was measured in round 1: each is strictly narrower than round 2 alone.
    assert np.all(stated < SE_SECOND)
    # A bucket the first round measured as it is (OOV, [50, 75), ...): two independent measurements,
    # inverse-variance pooled.
    both = 1.0 / math.sqrt(1.0 / SE_FIRST**2 + 1.0 / SE_SECOND**2)
    assert stated[0] == pytest.approx(both, rel=1e-12) and stated[5] == pytest.approx(both, rel=1e-12)


def test_rounds_that_counted_other_devices_are_not_pooled() -> None:
    one = level(FIRST, first_round_truth(), SE_FIRST)
    two = level(SECOND, TRUTH, SE_SECOND)
    sampled = refinement_combined([one, two], [1.0, 0.5])
    assert not sampled["available"] and "sampling rate below 1" in sampled["reason"]
    fewer = refinement_combined([one, {**two, "reports": 9_000}], [1.0, 1.0])
    assert not fewer["available"] and "different numbers of reports" in fewer["reason"]
    single = refinement_combined([two], [1.0])
    assert single["available"] and [b["estimate"] for b in single["buckets"]] == pytest.approx(TRUTH)
