"""Batch rules the aggregators apply to individually uploaded reports (pure functions).

Rate validation (seed 003, Section 4.8): the leader and the helper each know from the recipe the
rate at which reports should arrive; a batch that arrived faster than twice that rate in some
window may be a sybil flood, and is refused whole. At the expected rate at least half the batch
then comes from devices an attacker does not control.
"""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import numpy.typing as npt

RATE_FACTOR = 2.0
# Honest reports expected in one window of rate validation, at least: with fewer, an honest batch's
# chance variation could pass twice its mean (Poisson(100) exceeds 200 with probability < 1e-15).
HONEST_PER_WINDOW = 100
MIN_WINDOW = 60.0
# The aggregators keep arrival times no finer than this (seconds, floored since the epoch): a finer
# time could be joined with when a device got its token (issue 17). Rate validation needs no more:
# every window is at least MIN_WINDOW, six grains, so the busiest window seen through coarse times
# misses at most the reports of one grain.
ARRIVAL_GRAIN = MIN_WINDOW / 6


def arrival_coarse(moment: datetime | None = None) -> datetime:
    """``moment`` (now when None) floored to ARRIVAL_GRAIN: what an aggregator records of an arrival."""
    seconds = (moment or datetime.now(UTC)).timestamp()
    return datetime.fromtimestamp(seconds - seconds % ARRIVAL_GRAIN, UTC)


def rate_rules(*, devices: int, sampling_rate: float, spread: float) -> tuple[float, float]:
    """(expected reports per second, seconds per window) of a collection on ``devices`` devices
    sampled at ``sampling_rate`` that spread their uploads over ``spread`` seconds (seed 003, 4.8).
    """
    if devices < 1 or not 0 < sampling_rate <= 1 or spread <= 0:
        raise ValueError("devices, sampling_rate and spread must be positive")
    rate = devices * sampling_rate / spread
    return rate, rate_window(rate)


def rate_window(rate: float) -> float:
    """Seconds per window of rate validation at ``rate`` expected reports a second: long enough to
    expect HONEST_PER_WINDOW honest reports, so that a window holding more than RATE_FACTOR times
    its expectation is a flood, not chance."""
    return max(MIN_WINDOW, HONEST_PER_WINDOW / rate)


def busiest_window(arrivals: npt.ArrayLike, window: float) -> int:
    """Most arrivals (timestamps in seconds) inside any half-open window [t, t + window)."""
    times = np.sort(np.asarray(arrivals, dtype=np.float64))
    if not times.size:
        return 0
    # The busiest window can be taken to start at an arrival: count arrivals in [t_i, t_i + window).
    ends = np.searchsorted(times, times + window, side="left")
    return int((ends - np.arange(times.size)).max())


def rate_exceeded(arrivals: npt.ArrayLike, *, expected_rate: float, window: float) -> bool:
    """True when some window holds more than RATE_FACTOR times the reports expected in it."""
    if expected_rate <= 0 or window <= 0:
        raise ValueError("expected_rate and window must be positive")
    return busiest_window(arrivals, window) > RATE_FACTOR * expected_rate * window
