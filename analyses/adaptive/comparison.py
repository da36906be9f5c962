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
from analyses.models import AdaptiveRun, Release, Round
from devices.ground_truth import NoGroundTruth, ngram_truth, prefix_tree_estimand, word_truth
from privacy.ngrams import END_LABEL, PrefixTreeType, ngram_text


def adaptive_compare(*, run_id: int) -> None:
    """Store the comparison of a finished run with its static baseline (a heavy-hitters walk: with the
    local-DP discovery it names, and that one's baseline). Idempotent."""
    run = AdaptiveRun.objects.select_related("analysis__fleet").filter(pk=run_id).first()
    if run is None or run.status != AdaptiveRun.Status.FINISHED or run.comparison:
        return
    if run.kind == AdaptiveRun.Kind.HEAVY_HITTERS and run.spec.get("comparison"):
        computed = walk_comparison(run)
    elif run.baseline:
        computed = comparison_compute(run)
    else:
        return
    AdaptiveRun.objects.filter(pk=run_id, comparison__isnull=True).update(comparison=computed)


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


# ---------------------------------------------------------------- a heavy-hitters walk against local DP


def walk_comparison(run: AdaptiveRun) -> dict[str, Any]:
    """A heavy-hitters walk (no local noise) beside the local-DP character discovery its spec names
    (``comparison.run``), and that discovery's static baseline when it ran one, on the fleet's ground
    truth: the true top-K words (cut to the walk's bytes), precision and recall of each method's K
    largest words, and each one's estimate of every true top word. The start checked that both spent
    the same total epsilon on the same fleet (analyses.adaptive.spec.walk_comparison_refusal)."""
    top_k = run.spec["comparison"].get("topK", 20)
    cut = run.spec["maxLength"]
    fleet = run.analysis.fleet
    other = AdaptiveRun.objects.select_related("analysis").filter(pk=run.spec["comparison"]["run"]).first()
    if other is None:
        return {"available": False, "reason": "the local-DP discovery it names no longer exists."}
    now = time.time()
    try:
        truth = word_truth(fleet, cut=cut, now=now)
        ngrams = ngram_truth(fleet, length=cut, unit="character", now=now) if other.baseline else None
    except NoGroundTruth as missing:
        return {"available": False, "reason": str(missing)}
    true_top = truth.top(top_k)
    methods = {
        "poplar1": _walk_found(run, truth),
        "local": _discovery_words(other, cut),
        "static": _static_words(other, top_k, ngrams) if ngrams is not None else None,
    }
    rows = []
    for word in true_top:
        devices, _ = truth.of(word)
        row = {"word": word, "devices": devices}
        for name, found in methods.items():
            row[name] = None if found is None else found.get(word)
        rows.append(row)
    return {
        "available": True,
        "kind": "heavy_hitters",
        "top_k": top_k,
        "max_length": cut,
        "epsilon": sum(p["epsilon"] for p in run.plan),
        "local_run": other.pk,
        "methods": {
            name: None if found is None else _word_metrics(found, true_top, top_k) for name, found in methods.items()
        },
        "rows": rows,
    }


def _walk_found(run: AdaptiveRun, truth: Any) -> dict[str, dict[str, Any]]:
    """The walk's words, largest first, with their noisy counts and the estimand each is about."""
    round_id = run.levels[0]["round"] if run.levels else None
    content = Release.objects.filter(round_id=round_id).values_list("content", flat=True).first()
    if content is None:
        return {}
    rate = content["reports"] / run.analysis.fleet.size  # the devices that reported (sampling rate)
    # About the estimand, a count varies by both aggregators' noise and by the devices' own choice of
    # which word to report: the interval holds both.
    return {
        w["word"]: {
            "estimate": float(w["count"]),
            "standard_error": math.sqrt(w["standard_error"] ** 2 + truth.choice_variance(w["word"], rate)),
            "estimand": truth.of(w["word"])[1] * rate,
        }
        for w in content["walk"]["words"]
    }


def _discovery_words(run: AdaptiveRun, cut: int) -> dict[str, dict[str, Any]]:
    """A character discovery's words: every kept n-gram that ends a word, and every one kept at its
    last planned length (a word cut there), largest estimate first."""
    found: dict[str, dict[str, Any]] = {}
    for level in run.levels:
        for kept in level["kept"]:
            tokens = list(kept["tokens"])
            if kept["end"]:
                word = "".join(tokens[:-1])
            elif level["length"] == cut:
                word = "".join(tokens)
            else:
                continue
            entry = {"estimate": kept["estimate"], "standard_error": kept["standard_error"], "estimand": None}
            if word not in found or found[word]["estimate"] < entry["estimate"]:
                found[word] = entry
    return dict(sorted(found.items(), key=lambda item: -item[1]["estimate"]))


def _static_words(run: AdaptiveRun, top_k: int, ngrams: Any) -> dict[str, dict[str, Any]]:
    """The discovery's static baseline, read as words: its decoded n-grams of the target length (a
    word ending in END, or a word cut there)."""
    found = _static_found(spec_of(run), run, top_k, ngrams)
    words = {}
    for ngram in found["ngrams"]:
        word = "".join(ngram[:-1]) if ngram[-1] == END_LABEL else "".join(ngram)
        words.setdefault(word, {**found["by_ngram"][ngram], "estimand": None})
    return words


def _word_metrics(found: dict[str, dict[str, Any]], true_top: list[str], top_k: int) -> dict[str, Any]:
    chosen = list(found)[:top_k]
    hits = [w for w in chosen if w in set(true_top)]
    return {
        "found": len(chosen),
        "hits": len(hits),
        "precision": len(hits) / len(chosen) if chosen else 0.0,
        "recall": len(hits) / len(true_top) if true_top else 0.0,
    }
