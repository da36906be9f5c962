"""Batch rules the aggregators apply to individually uploaded reports (pure functions).

Rate validation (seed 003, Section 4.8; issue 29, requirement 1), without a fixed floor. The count
it starts from is the token issuer's, signed (aggregation.statements): N, the devices it issued a
token to for the collection, each an attested device (pfs_device.attestation). Neither the leader's
fleet table nor a rate the leader provisions enters it.

Honest devices pace their uploads (pfs_device.sdk.pacing): each draws its upload uniformly over the
last UPLOAD_SHARE of a spread of at least its own floor S, whatever the server sends, after a
decision time independent of its coins. So at any moment a device's upload has a density of at most
1 / (UPLOAD_SHARE x S), and the count of the N devices' uploads landing in any fixed interval of L
seconds is dominated by Binomial(N, min(1, L / (UPLOAD_SHARE x S))).

The check looks at every window of WINDOW seconds, sliding, through arrival times floored to
ARRIVAL_GRAIN. A sliding window seen through floored times covers at most WINDOW + ARRIVAL_GRAIN
seconds of true time, and any interval that long lies inside one of the grid intervals
[j x WINDOW, (j + 2) x WINDOW + ARRIVAL_GRAIN). With J such grid intervals spanning the arrivals,
the union bound gives

    P[some window holds more than k honest reports] <= J x P[Binomial(N, p) > k],
    p = min(1, (2 x WINDOW + ARRIVAL_GRAIN) / (UPLOAD_SHARE x S)),

and the allowance is the smallest k that makes the right-hand side at most P_FALSE (1e-9): an
honest batch is refused with probability at most 1e-9. A batch whose busiest window holds more
than the allowance (a burst packing the batch faster than the devices' own pacing allows) is refused
whole. Example: N = 116, S = 600 s: p = 0.255, the allowance about 60 in any minute, so 116 reports
in 3 seconds are refused; 116 honest devices have about 12 in their busiest minute.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime

import numpy as np
import numpy.typing as npt
from scipy.stats import binom

from pfs_device.sdk.pacing import GAP_SHARE, TOKEN_SHARE

# The aggregators keep arrival times no finer than this (seconds, floored since the epoch): a finer
# time could be joined with when a device got its token (issue 17).
ARRIVAL_GRAIN = 10.0
# The sliding window rate validation counts reports in: six arrival grains.
WINDOW = 60.0
# The share of its spread over which a device draws its upload (pfs_device.sdk.pacing.plan_draw).
UPLOAD_SHARE = 1.0 - TOKEN_SHARE - GAP_SHARE
# The probability that rate validation refuses an honest batch, at most.
P_FALSE = 1e-9


def arrival_coarse(moment: datetime | None = None) -> datetime:
    """``moment`` (now when None) floored to ARRIVAL_GRAIN: what an aggregator records of an arrival."""
    seconds = (moment or datetime.now(UTC)).timestamp()
    return datetime.fromtimestamp(seconds - seconds % ARRIVAL_GRAIN, UTC)


def rate_allowance(*, devices: int, spread: float, span: float, p_false: float = P_FALSE) -> int:
    """The most reports of ``devices`` honest devices, pacing over at least ``spread`` seconds, that
    any WINDOW may hold when the arrivals span ``span`` seconds: the smallest k with
    J x P[Binomial(devices, p) > k] <= p_false (module docstring; J = ceil(span / WINDOW) + 2 grid
    intervals, p = min(1, (2 x WINDOW + ARRIVAL_GRAIN) / (UPLOAD_SHARE x spread)))."""
    if devices < 0 or not spread > 0 or span < 0 or not 0 < p_false < 1:
        raise ValueError("devices and span must be 0 or more, spread positive, p_false in (0, 1)")
    p = min(1.0, (2 * WINDOW + ARRIVAL_GRAIN) / (UPLOAD_SHARE * spread))
    intervals = math.ceil(span / WINDOW) + 2
    # binom.sf(k, n, p) = P[X > k], exact, for every k at once: the first k within the budget.
    tails = binom.sf(np.arange(devices + 1), devices, p)
    return int(np.argmax(intervals * tails <= p_false))


def busiest_window(arrivals: npt.ArrayLike, window: float = WINDOW) -> int:
    """Most arrivals (timestamps in seconds) inside any half-open window [t, t + window)."""
    times = np.sort(np.asarray(arrivals, dtype=np.float64))
    if not times.size:
        return 0
    # The busiest window can be taken to start at an arrival: count arrivals in [t_i, t_i + window).
    ends = np.searchsorted(times, times + window, side="left")
    return int((ends - np.arange(times.size)).max())


def rate_refusal(arrivals: npt.ArrayLike, *, devices: int, spread: float) -> str | None:
    """Why the batch of reports that arrived at ``arrivals`` is refused, or None: its busiest WINDOW
    holds more than rate_allowance for ``devices`` issued tokens and devices pacing over ``spread``."""
    times = np.asarray(arrivals, dtype=np.float64)
    if not times.size:
        return None
    allowance = rate_allowance(devices=devices, spread=spread, span=float(times.max() - times.min()))
    if busiest_window(times) <= allowance:
        return None
    return (
        f"reports arrived faster than the {devices:,} devices given tokens allow when each paces its upload "
        f"over {spread:g} s or more: more than {allowance:,} in a {WINDOW:g}-second window "
        f"(rate validation; an honest batch is refused with probability below {P_FALSE:g})"
    )
