"""One histogram from every round of a bucket refinement: numpy only, no database.

Each round of a refinement measures the whole domain over a partition that refines the one before
(it adds the midpoints of the buckets it splits), so a bucket of the last round lies inside one
bucket of every earlier round. With every device answering every round (sampling rate 1, the same
reports), every round's estimate is unbiased for the same counts: round l's estimates are A_l x plus
independent noise, where x holds the counts of the last round's buckets and A_l sums them into
round l's buckets. The generalised least-squares estimate pools them all:

    x̂ = (Aᵀ W A)⁻¹ Aᵀ W y,   Cov(x̂) = (Aᵀ W A)⁻¹,   W = diag(1 / standard error²),

unbiased, and with a standard error no larger than the last round's alone for any bucket (it adds
information, never noise). The release's standard errors are taken as known, as the level charts
do. Proven by a seeded simulation in tests/stats/test_refinement_combined.py.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from privacy.encoding import BucketedType


def refinement_combined(levels: list[dict[str, Any]], sampling_rates: list[float]) -> dict[str, Any]:
    """The pooled histogram over the last round's buckets: {available, reason, rounds, boundaries,
    buckets: [{bucket, estimate, standard_error}]}. Unavailable, with the reason, when the rounds did not count
    the same devices (a sampling rate below 1, or different numbers of reports)."""
    if not levels:
        return {"available": False, "reason": "No round is released yet.", "buckets": [], "rounds": 0}
    if any(rate != 1.0 for rate in sampling_rates[: len(levels)]):
        return _unavailable(levels, "its rounds sampled devices (a sampling rate below 1): each counted other devices.")
    if len({level["reports"] for level in levels}) != 1:
        return _unavailable(levels, "its rounds counted different numbers of reports, so not the same devices.")
    finest = levels[-1]["boundaries"]
    rows = [_aggregation(level["boundaries"], finest) for level in levels]
    a = np.vstack(rows)
    y = np.concatenate([[b["estimate"] for b in level["histogram"]] for level in levels])
    se = np.concatenate([[b["standard_error"] for b in level["histogram"]] for level in levels])
    usable = np.isfinite(y) & np.isfinite(se) & (se > 0)
    try:
        estimates, errors = _gls(a[usable], y[usable], se[usable])
    except np.linalg.LinAlgError:  # a bucket of the last round no round measured with a known error
        return _unavailable(levels, "a bucket of the last round has no usable standard error.")
    labels = BucketedType(tuple(finest)).labels
    return {
        "available": True,
        "reason": "",
        "rounds": len(levels),
        "boundaries": finest,
        "buckets": [
            {"bucket": label, "estimate": float(e), "standard_error": float(s)}
            for label, e, s in zip(labels, estimates, errors, strict=True)
        ],
    }


def _unavailable(levels: list[dict[str, Any]], why: str) -> dict[str, Any]:
    return {"available": False, "reason": f"Not pooled: {why}", "buckets": [], "rounds": len(levels)}


def _aggregation(coarse: list[float], fine: list[float]) -> npt.NDArray[np.float64]:
    """The 0/1 matrix summing the buckets of ``fine`` into those of ``coarse`` (which it refines).

    Bucket 0 is OOV (below the first boundary, or missing) in both; fine bucket j >= 1 starts at
    fine[j - 1] and lies in the coarse bucket of the coarse boundaries at or below that start."""
    coarse_arr = np.asarray(coarse, dtype=np.float64)
    starts = np.asarray(fine, dtype=np.float64)
    into = np.concatenate([[0], np.searchsorted(coarse_arr, starts, side="right")])
    matrix = np.zeros((len(coarse) + 1, len(fine) + 1))
    matrix[into, np.arange(len(fine) + 1)] = 1.0
    return matrix


def _gls(
    a: npt.NDArray[np.float64], y: npt.NDArray[np.float64], se: npt.NDArray[np.float64]
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    weights = 1.0 / np.square(se)
    normal = a.T @ (a * weights[:, None])
    covariance = np.linalg.inv(normal)
    estimates = covariance @ (a.T @ (weights * y))
    return estimates, np.sqrt(np.diag(covariance))
