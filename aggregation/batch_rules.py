"""Batch rules the aggregators apply to individually uploaded reports (pure functions).

Rate validation (seed 003, Section 4.8): the leader and the helper each know from the recipe the
rate at which reports should arrive; a batch that arrived faster than twice that rate in some
window may be a sybil flood, and is refused whole. At the expected rate at least half the batch
then comes from devices an attacker does not control.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

RATE_FACTOR = 2.0


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
