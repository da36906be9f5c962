"""What ``run_analysis --json`` prints and the API returns for an adaptive run (docs/adaptive.md)."""

from __future__ import annotations

from typing import Any

from analyses.adaptive.combined import refinement_combined
from analyses.adaptive.spec import (
    adaptive_rounds_started,
)
from analyses.models import AdaptiveRun


def adaptive_output(run: AdaptiveRun) -> dict[str, Any]:
    """What ``run_analysis --json`` prints and the API returns (docs/adaptive.md)."""
    output: dict[str, Any] = {
        "id": run.pk,
        "analysis": run.analysis.identifier,
        "kind": run.kind,
        "status": run.status,
        "stop_reason": run.stop_reason,
        "plan": run.plan,
        "epsilon_spent": sum(p["epsilon"] for p in run.plan[: adaptive_rounds_started(run)[0]]),
        "levels": [_level_output(run, level) for level in run.levels],
    }
    if run.kind == AdaptiveRun.Kind.BUCKET_REFINEMENT:
        output["combined"] = run_combined(run)
    if run.next_recipe is not None:
        output["next_recipe"] = run.next_recipe
    if run.comparison is not None:
        output["comparison"] = run.comparison
    return output


def _level_output(run: AdaptiveRun, level: dict) -> dict[str, Any]:
    if run.kind == AdaptiveRun.Kind.BUCKET_REFINEMENT:
        keys = ("round", "boundaries", "histogram", "split", "buckets", "reports", "epsilon0", "epsilon", "delta")
    elif run.kind == AdaptiveRun.Kind.HEAVY_HITTERS:  # epsilon and delta: the whole walk's, every level within
        keys = ("length", "round", "buckets", "leaves", "reports", "threshold", "epsilon", "delta", "kept")
    else:
        keys = ("length", "round", "buckets", "leaves", "reports", "epsilon0", "epsilon", "delta", "kept")
    entry = {k: level[k] for k in keys}
    if "kept" in entry:
        entry["kept"] = [{k: v for k, v in kept.items() if k != "tokens"} for kept in entry["kept"]]
    return entry


def run_combined(run: AdaptiveRun) -> dict[str, Any]:
    """A refinement's rounds pooled into one histogram over its last round's buckets (analyses.adaptive.combined)."""
    return refinement_combined(run.levels, [planned.get("sampling_rate", 1.0) for planned in run.plan])
