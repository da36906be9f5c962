"""Interactive against static: the run's n-grams and the baseline's, scored on the fleet's ground truth."""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

from analyses.adaptive import levels
from analyses.adaptive.spec import (
    Spec,
    baseline_encoding,
    spec_of,
)
from analyses.models import AdaptiveRun, Round
from devices.ground_truth import NoGroundTruth, ngram_truth, prefix_tree_estimand
from privacy.ngrams import END_LABEL, PrefixTreeType, ngram_text


def adaptive_compare(*, run_id: int) -> None:
    """Store the comparison of a finished run with its static baseline. Idempotent."""
    run = AdaptiveRun.objects.select_related("analysis__fleet").filter(pk=run_id).first()
    if run is None or run.status != AdaptiveRun.Status.FINISHED or not run.baseline or run.comparison:
        return
    AdaptiveRun.objects.filter(pk=run_id, comparison__isnull=True).update(comparison=comparison_compute(run))


def comparison_compute(run: AdaptiveRun) -> dict[str, Any]:
    """Interactive against static on the fleet's ground truth: precision and recall of the true
    top-K n-grams of the target length, and the relative error of their counts."""
    spec = spec_of(run)
    top_k = spec.raw["baseline"].get("topK", 20)
    length, unit = spec.rounds, spec.raw.get("unit", "word")
    fleet = run.analysis.fleet
    try:
        truth = ngram_truth(fleet, length=length, unit=unit, now=time.time())
    except NoGroundTruth as missing:
        return {"available": False, "reason": str(missing)}
    true_top = truth.top(top_k)
    interactive = _interactive_found(spec, run, top_k)
    static = _static_found(spec, run, top_k, truth)
    rows = []
    for ngram in true_top:
        devices = int(truth.devices[(truth.ngrams == _symbols(truth, ngram)).all(axis=1)][0])
        rows.append(
            {
                "ngram": ngram_text(unit, ngram),
                "devices": devices,
                "interactive": interactive["by_ngram"].get(ngram),
                "static": static["by_ngram"].get(ngram),
            }
        )
    return {
        "available": True,
        "top_k": top_k,
        "length": length,
        "epsilon_per_method": sum(p["epsilon"] for p in run.plan),
        "interactive": _metrics(interactive, true_top),
        "static": _metrics(static, true_top),
        "rows": rows,
    }


def _symbols(truth: Any, ngram: tuple[str, ...]) -> np.ndarray:
    index = {t: i for i, t in enumerate(truth.tokens)}
    return np.array([-2 if t == END_LABEL else index[t] for t in ngram])


def _metrics(found: dict, true_top: list[tuple[str, ...]]) -> dict[str, Any]:
    hits = [n for n in found["ngrams"] if n in set(true_top)]
    errors = [
        abs(found["by_ngram"][n]["estimate"] - found["by_ngram"][n]["estimand"]) / found["by_ngram"][n]["estimand"]
        for n in hits
        if found["by_ngram"][n]["estimand"] > 0
    ]
    return {
        "rounds": found["rounds"],
        "found": len(found["ngrams"]),
        "hits": len(hits),
        "precision": len(hits) / len(found["ngrams"]) if found["ngrams"] else 0.0,
        "recall": len(hits) / len(true_top) if true_top else 0.0,
        "mean_relative_error": float(np.mean(errors)) if errors else None,
    }


def _interactive_found(spec: Spec, run: AdaptiveRun, top_k: int) -> dict[str, Any]:
    """The interactive top-K at the target length: the last level's estimates that clear the threshold."""
    last = run.levels[-1] if run.levels else None
    found: dict[str, Any] = {"rounds": len(run.levels), "ngrams": [], "by_ngram": {}}
    if last is None or last["length"] != spec.rounds:
        return found
    round_ = Round.objects.select_related("recipe", "release").get(pk=last["round"])
    estimates, variances, reports = levels.pooled(round_.release.content)
    tree = PrefixTreeType.from_json(round_.recipe.content["dataTypeContent"][spec.field])
    candidates = levels.ngram_candidates(tree)
    chosen = levels.clears(estimates, np.sqrt(variances), candidates, z_score=spec.z_score, max_per_level=top_k)
    estimand = prefix_tree_estimand(run.analysis.fleet, tree, now=time.time()) * reports / run.analysis.fleet.size
    for i in chosen:
        prefix, extension = tree.bucket_ngram(int(i))
        ngram = (*prefix, extension)
        found["ngrams"].append(ngram)
        found["by_ngram"][ngram] = {
            "estimate": float(estimates[i]),
            "standard_error": float(math.sqrt(variances[i])),
            "estimand": float(estimand[i]),
        }
    return found


def _static_found(spec: Spec, run: AdaptiveRun, top_k: int, truth: Any) -> dict[str, Any]:
    """The static top-K: the sketch averaged over its rounds, decoded over every candidate n-gram."""
    rounds = Round.objects.filter(pk__in=[b["round"] for b in run.baseline]).select_related("release")
    pooled = [levels.pooled(r.release.content) for r in rounds]
    found: dict[str, Any] = {"rounds": len(pooled), "ngrams": [], "by_ngram": {}}
    if not pooled:
        return found
    estimates = np.mean([p[0] for p in pooled], axis=0)
    variances = np.sum([p[1] for p in pooled], axis=0) / len(pooled) ** 2
    reports = np.mean([p[2] for p in pooled])
    encoding = baseline_encoding(spec)
    top = encoding.top(estimates, variances, 4 * top_k)
    top_estimates = np.array([t[1] for t in top])
    top_errors = np.array([t[2] for t in top])
    candidates = np.arange(len(top), dtype=np.int64)
    chosen = levels.clears(top_estimates, top_errors, candidates, z_score=spec.z_score, max_per_level=top_k)
    for i in chosen:
        ngram, estimate, error = top[i]
        found["ngrams"].append(ngram)
        estimand = truth.uniform_reports_of(ngram) * reports / run.analysis.fleet.size
        found["by_ngram"][ngram] = {"estimate": estimate, "standard_error": error, "estimand": estimand}
    return found
