"""Confidence intervals and views of a released histogram: how estimates are shown, with the rule stated.

Intervals (normal approximation, the estimates being sums of many independent reports; with discrete
Laplace aggregator noise the exact quantile of that noise instead, privacy.aggregator_noise):
- "per-bucket": each interval covers its bucket's true count with probability `level`;
- "simultaneous": Bonferroni over every released cell, z = Phi^-1(1 - (1 - level) / (2 m)), so all m
  intervals cover together with probability at least `level`, whatever the correlation between cells.

Views (post-processing of released numbers: they cost no privacy):
- "raw": the unbiased estimates, negative ones included: a small true count plus noise can be < 0;
- "clipped": max(estimate, 0), intervals clipped at 0: no longer unbiased, never negative;
- "thresholded": estimates whose interval includes 0 (or lies below it) are shown as 0 (not
  distinguishable from zero), with their interval clipped at 0 so that it holds the 0 shown.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy.stats import norm

INTERVALS = ("per-bucket", "simultaneous")
VIEWS = ("raw", "clipped", "thresholded")

_VIEW_RULES = {
    "raw": "unbiased estimates as released; negative values are noise around a small true count",
    "clipped": "estimates and interval bounds below 0 are shown as 0 (biased upwards for small counts)",
    "thresholded": "estimates whose interval includes 0 are shown as 0, their interval clipped at 0",
}


def z_value(*, level: float, cells: int, intervals: str) -> float:
    """The normal quantile for two-sided intervals at ``level``, Bonferroni-adjusted if simultaneous."""
    return float(norm.ppf(1 - miss_probability(level=level, cells=cells, intervals=intervals) / 2))


def miss_probability(*, level: float, cells: int, intervals: str) -> float:
    """The probability each two-sided interval may miss its true count: 1 - level, divided by the
    number of released cells if simultaneous (Bonferroni)."""
    if not 0 < level < 1:
        raise ValueError("level must lie strictly between 0 and 1")
    if intervals not in INTERVALS:
        raise ValueError(f"intervals must be one of {', '.join(INTERVALS)}")
    alpha = 1 - level
    if intervals == "simultaneous":
        alpha /= max(cells, 1)
    return alpha


@dataclass(frozen=True)
class Presented:
    estimates: npt.NDArray[np.float64]
    ci_low: npt.NDArray[np.float64]
    ci_high: npt.NDArray[np.float64]


def present(estimates: npt.ArrayLike, standard_errors: npt.ArrayLike, *, z: float, view: str) -> Presented:
    """Intervals estimate ± z·se, then the view's rule applied to estimates and bounds."""
    if view not in VIEWS:
        raise ValueError(f"view must be one of {', '.join(VIEWS)}")
    estimates = np.asarray(estimates, dtype=np.float64)
    errors = np.asarray(standard_errors, dtype=np.float64)
    low, high = estimates - z * errors, estimates + z * errors
    if view == "clipped":
        estimates, low, high = np.maximum(estimates, 0), np.maximum(low, 0), np.maximum(high, 0)
    elif view == "thresholded":
        # A zeroed bucket keeps an interval around its 0: an interval wholly below 0 beside a 0
        # (estimate -50, interval [-69, -31]) drew a point outside its own whiskers (issue 31, item 12).
        zeroed = low <= 0
        estimates = np.where(zeroed, 0.0, estimates)
        low, high = np.where(zeroed, 0.0, low), np.where(zeroed, np.maximum(high, 0.0), high)
    return Presented(estimates=estimates, ci_low=low, ci_high=high)


def view_rule(view: str) -> str:
    return _VIEW_RULES[view]
