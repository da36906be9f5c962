"""Rate validation's arithmetic (seed 003, Section 4.8; issue 29, requirement 1): a tail bound on the
arrivals of the devices the issuer gave tokens to, without a fixed floor."""

from __future__ import annotations

import math
import random
from fractions import Fraction

import numpy as np
import pytest

from aggregation.batch_rules import (
    ARRIVAL_GRAIN,
    P_FALSE,
    UPLOAD_SHARE,
    WINDOW,
    busiest_window,
    rate_allowance,
    rate_refusal,
)
from pfs_device.sdk.pacing import MIN_SPREAD, plan_draw


def test_busiest_window_counts_arrivals_in_half_open_windows() -> None:
    assert busiest_window([], 10) == 0
    assert busiest_window([0, 1, 2, 10, 11], 10) == 3  # [0, 10) holds 0, 1, 2; [1, 11) holds 1, 2, 10
    assert busiest_window([5, 5, 5], 1) == 3


@pytest.mark.parametrize(
    ("devices", "spread", "span", "allowance"),
    [
        (1, 600.0, 0.0, 1),
        (14, 600.0, 600.0, 14),  # too few devices for any burst to be told from chance
        (116, 600.0, 600.0, 62),
        (116, 600.0, 36_000.0, 65),  # more windows, a little more room
        (1000, 600.0, 3600.0, 349),
        (1000, 3600.0, 3600.0, 91),
        (206, 10.0, 100.0, 206),  # devices that pace over 10 s may all land in one minute
    ],
)
def test_the_allowance_matches_reference_values(devices, spread, span, allowance) -> None:
    assert rate_allowance(devices=devices, spread=spread, span=span) == allowance


def test_the_allowance_is_the_smallest_count_whose_union_bound_is_within_the_false_refusal_probability() -> None:
    """Checked against the binomial tail in exact rational arithmetic (math.comb, Fraction)."""
    devices, spread, span = 116, 600.0, 600.0
    p = min(Fraction(1), Fraction(2 * WINDOW + ARRIVAL_GRAIN) / (Fraction(UPLOAD_SHARE) * Fraction(spread)))
    intervals = math.ceil(span / WINDOW) + 2

    def bound(k: int) -> float:
        return float(
            intervals * sum(math.comb(devices, i) * p**i * (1 - p) ** (devices - i) for i in range(k + 1, devices + 1))
        )

    allowance = rate_allowance(devices=devices, spread=spread, span=span)
    assert bound(allowance) <= P_FALSE < bound(allowance - 1)


def _honest(devices: int, spread: float, rng: random.Random) -> np.ndarray:
    """Arrival times as the aggregators record them: each device decides within a minute of the
    collection opening (its poll), uploads when pfs_device.sdk.pacing.plan_draw says, floored to the grain."""
    times = np.array([rng.uniform(0, 60) + plan_draw(spread, rng).upload_delay for _ in range(devices)])
    return times - times % ARRIVAL_GRAIN


@pytest.mark.parametrize(("devices", "spread"), [(116, MIN_SPREAD), (1000, MIN_SPREAD), (300, 3600.0)])
def test_honest_devices_pacing_over_their_spread_are_never_refused(devices, spread) -> None:
    rng = random.Random(29)  # fixed coins: 200 collections of honest devices
    refused = sum(
        rate_refusal(_honest(devices, spread, rng), devices=devices, spread=MIN_SPREAD) is not None for _ in range(200)
    )
    assert refused == 0


def test_a_three_second_burst_of_116_devices_is_refused_and_the_same_devices_paced_are_not() -> None:
    burst = np.full(116, 1_700_000_000.0)  # 3 seconds fall in one 10-second grain
    reason = rate_refusal(burst, devices=116, spread=MIN_SPREAD)
    assert reason is not None and "rate validation" in reason and "more than 60 in a 60-second window" in reason
    assert rate_refusal(_honest(116, MIN_SPREAD, random.Random(3)), devices=116, spread=MIN_SPREAD) is None


def test_a_burst_packing_the_batch_into_a_minute_is_refused_whatever_the_fleet_table_says() -> None:
    # 116 tokens issued: 80 reports in one minute exceed what their pacing allows (62), whatever the
    # leader's fleet table claims; the same 80 over ten minutes pass.
    assert rate_refusal(np.linspace(0, 50, 80), devices=116, spread=MIN_SPREAD) is not None
    assert rate_refusal(np.linspace(0, 600, 80), devices=116, spread=MIN_SPREAD) is None


def test_the_allowance_refuses_bad_arguments() -> None:
    for arguments in ({"devices": -1, "spread": 600, "span": 0}, {"devices": 1, "spread": 0, "span": 0}):
        with pytest.raises(ValueError):
            rate_allowance(**arguments)
    assert rate_refusal([], devices=0, spread=600) is None
