"""Seeded coverage of the release intervals: per-bucket at 95% each, simultaneous at 95% together."""

from __future__ import annotations

import math

import numpy as np
import pytest

from privacy.intervals import present, z_value
from privacy.mechanisms import AsymmetricOHE

K = 16
TRUE = np.array([4000, 3000, 2500, 2000, 1500, 1200, 1000, 800, 600, 500, 400, 300, 200, 100, 50, 0])
N = int(TRUE.sum())
VALUES = np.repeat(np.arange(K), TRUE)
REPETITIONS = 400


@pytest.fixture(scope="module")
def releases():
    mechanism = AsymmetricOHE(epsilon0=2.0)
    rng = np.random.default_rng(99)
    out = []
    for _ in range(REPETITIONS):
        estimates = mechanism.debias(mechanism.privatize_sum(VALUES, K, rng), N, K)
        out.append((estimates, np.sqrt(mechanism.variance(estimates, N, K))))
    return out


def coverage(releases, intervals: str):
    z = z_value(level=0.95, cells=K, intervals=intervals)
    cells, families = [], []
    for estimates, errors in releases:
        shown = present(estimates, errors, z=z, view="raw")
        covered = (shown.ci_low <= TRUE) & (TRUE <= shown.ci_high)
        cells.append(covered)
        families.append(covered.all())
    return np.mean(cells), np.mean(families)


def test_per_bucket_intervals_cover_each_bucket_95_percent_of_the_time(releases) -> None:
    per_cell, _ = coverage(releases, "per-bucket")
    # R*K cell-coverages; 4 standard errors of a proportion of 0.95 (cells within a release are
    # nearly independent for OHE).
    assert abs(per_cell - 0.95) <= 4 * math.sqrt(0.95 * 0.05 / (REPETITIONS * K))


def test_simultaneous_intervals_cover_every_bucket_at_once_at_least_95_percent(releases) -> None:
    _, family = coverage(releases, "simultaneous")
    _, family_per_bucket = coverage(releases, "per-bucket")
    assert family >= 0.95 - 4 * math.sqrt(0.95 * 0.05 / REPETITIONS)
    # Per-bucket intervals do not: with 16 nearly independent cells about 0.95^16 ≈ 0.44 cover together.
    assert family_per_bucket < 0.6


def test_views_state_and_apply_their_rule() -> None:
    shown = present([-30.0, 10.0, 500.0], [20.0, 20.0, 20.0], z=1.96, view="clipped")
    assert shown.estimates.tolist() == [0.0, 10.0, 500.0] and shown.ci_low.min() >= 0
    shown = present([-30.0, 10.0, 500.0], [20.0, 20.0, 20.0], z=1.96, view="thresholded")
    assert shown.estimates.tolist() == [0.0, 0.0, 500.0]
    # Each zeroed bucket's interval holds the 0 shown: [0, max(high, 0)]; a kept one is unchanged.
    assert shown.ci_low.tolist() == [0.0, 0.0, pytest.approx(500 - 1.96 * 20)]
    assert shown.ci_high.tolist() == [
        pytest.approx(-30 + 1.96 * 20),
        pytest.approx(10 + 1.96 * 20),
        pytest.approx(500 + 1.96 * 20),
    ]
    shown = present([-80.0], [20.0], z=1.96, view="thresholded")
    assert (shown.estimates[0], shown.ci_low[0], shown.ci_high[0]) == (0.0, 0.0, 0.0)
    shown = present([-30.0], [20.0], z=1.96, view="raw")
    assert shown.estimates.tolist() == [-30.0]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"level": 1.0, "cells": 3, "intervals": "per-bucket"}, "level"),
        ({"level": 0.95, "cells": 3, "intervals": "joint"}, "intervals"),
    ],
)
def test_bad_interval_options_are_refused(kwargs, message) -> None:
    with pytest.raises(ValueError, match=message):
        z_value(**kwargs)
