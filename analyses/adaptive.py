"""Interactive analyses: chains of rounds where each round is built from the last release.

Two kinds (docs/adaptive.md):

- ``ngram_discovery`` (seed 000, Section 1): round 1 is a histogram over the vocabulary; round r
  asks for the extensions of the frequent (r-1)-grams (a PrefixTree recipe) and keeps those whose
  estimate clears the threshold. It stops at the maximum length, when nothing clears the
  threshold, or when the next round would exceed the budget. A static baseline (every r-gram of
  the target length, hashed into a count-mean sketch, the same per-round privacy over as many
  rounds) can run on a second analysis of the same fleet, and is compared on ground truth.
- ``bucket_refinement``: coarse buckets of a numeric field; every bucket whose estimate clears
  the threshold is split in two, down to the smallest width allowed.

The budget plan (epsilon0, epsilon, delta of every round) is fixed and checked against the policy
at start: a plan that would exceed it is refused and nothing is sent. The chain lives in the
database: each finished round enqueues ``advance_adaptive_run``, which records the level and
starts the next round in one transaction, so a worker restart resumes where it stopped.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from analyses.audit_log import refusal_log
from analyses.errors import Conflict, NotAllowed, ValidationFailed
from analyses.models import AdaptiveRun, Analysis, Release, Round
from analyses.services import (
    budget_plan_refusal,
    parsed_budget_request,
    recipe_create,
    recipe_validate,
    round_start,
)
from analyses.validation import Problems
from devices.ground_truth import NoGroundTruth, ngram_truth, prefix_tree_estimand
from devices.streams import field_kind
from pfs_web.task_queue import enqueue
from privacy.encoding import BucketedType, encoding_from_json
from privacy.ngrams import END_LABEL, OOV_LABEL, UNITS, HashedNgramType, PrefixTreeType, ngram_text

# The static baseline's sketch when the spec does not say: 4 rows of 4,096 cells (Apple's
# count-mean sketch shape, seed 004, at a size comparable to a discovery round).
BASELINE_ROWS, BASELINE_COLUMNS = 4, 4096

# ---------------------------------------------------------------- the spec


@dataclass(frozen=True)
class Spec:
    analysis: Analysis
    kind: str
    field: str
    rounds: int  # planned rounds: maxLength, or maxRounds for refinement
    plan: list[dict[str, float]]
    privacy: dict[str, Any]
    z_score: float | None
    max_per_level: int | None
    cohorts: list[str]
    raw: dict[str, Any]


def adaptive_validate(*, spec: Any) -> Spec:
    """Check an adaptive analysis spec: its shape, its first round, and its whole budget plan."""
    if not isinstance(spec, dict):
        raise ValidationFailed({"spec": ["Must be a JSON object."]})
    problems = Problems()
    identifier = problems.string(spec, "analysis", "analysis")
    analysis = Analysis.objects.filter(identifier=identifier).select_related("fleet").first() if identifier else None
    if identifier and analysis is None:
        problems.add("analysis", f"No analysis {identifier!r}.")
    kind = spec.get("kind")
    if kind not in AdaptiveRun.Kind.values:
        problems.add("kind", f"Must be one of {', '.join(AdaptiveRun.Kind.values)}.")
    field = problems.string(spec, "field", "field")
    cohorts = problems.string_list(spec, "cohorts", "cohorts", default=[]) or []
    rounds_key = "maxLength" if kind == AdaptiveRun.Kind.NGRAM_DISCOVERY else "maxRounds"
    rounds = problems.integer(spec, rounds_key, rounds_key, minimum=1)
    if isinstance(spec.get(rounds_key), int) and spec[rounds_key] > 12:
        problems.add(rounds_key, "At most 12 rounds.")
        rounds = None
    privacy = problems.obj(spec, "privacy", "privacy") or {}
    plan = _budget_plan(problems, privacy, rounds)
    threshold = problems.obj(spec, "threshold", "threshold") or {}
    z_score = max_per_level = None
    if "zScore" in threshold:
        z_score = problems.number(threshold, "zScore", "threshold.zScore", positive=True)
    per_level_key = "maxPerLevel" if kind == AdaptiveRun.Kind.NGRAM_DISCOVERY else "maxBuckets"
    if per_level_key in threshold:
        max_per_level = problems.integer(threshold, per_level_key, f"threshold.{per_level_key}", minimum=1)
    if isinstance(spec.get("threshold"), dict) and not ({"zScore", per_level_key} & set(threshold)):
        problems.add("threshold", f"Give zScore (> 0), {per_level_key} (>= 1), or both.")
    if kind == AdaptiveRun.Kind.NGRAM_DISCOVERY:
        _check_ngram_spec(problems, spec)
    elif kind == AdaptiveRun.Kind.BUCKET_REFINEMENT:
        _check_refinement_spec(problems, spec)
    if analysis is not None and field:
        kind_of_field = field_kind(analysis.query_class.get("stream", ""), field)
        wanted = "text" if kind == AdaptiveRun.Kind.NGRAM_DISCOVERY else "number"
        if kind_of_field != wanted:
            problems.add("field", f"Must be a {wanted} field of the analysis's stream.")
    if problems:
        raise ValidationFailed(problems.errors)

    parsed = Spec(analysis, kind, field, rounds, plan, privacy, z_score, max_per_level, cohorts, spec)
    rounds_parsed = _check_plan(analysis, _round_recipes(parsed, analysis, _first_recipe(parsed)), field, "")
    for planned, round_parsed in zip(plan, rounds_parsed, strict=True):
        # What each round will charge a device, so that later runs can reserve it (_reserved_requests).
        planned.update({k: round_parsed[k] for k in ("noise", "mechanism", "epsilon0", "min_cohort")})
    baseline = spec.get("baseline")
    if baseline is not None:
        _check_baseline(parsed, baseline)
    return parsed


def _budget_plan(problems: Problems, privacy: dict, rounds: int | None) -> list[dict[str, float]]:
    per_round = privacy.get("epsilonPerRound")
    if isinstance(per_round, list):
        if rounds is not None and len(per_round) != rounds:
            problems.add("privacy.epsilonPerRound", f"A list must give one epsilon per round ({rounds}).")
            return []
        epsilons = [problems.number({"e": e}, "e", "privacy.epsilonPerRound", positive=True) for e in per_round]
    else:
        epsilons = [problems.number(privacy, "epsilonPerRound", "privacy.epsilonPerRound", positive=True)]
        epsilons = epsilons * (rounds or 1)
    delta = problems.number(privacy, "delta", "privacy.delta", open_unit=True)
    if None in epsilons or delta is None or rounds is None:
        return []
    return [{"round": i + 1, "epsilon": e, "delta": delta} for i, e in enumerate(epsilons)]


def _check_ngram_spec(problems: Problems, spec: dict) -> None:
    unit = spec.get("unit", "word")
    if unit not in UNITS:
        problems.add("unit", f"Must be one of {', '.join(UNITS)}.")
    vocabulary = problems.string_list(spec, "vocabulary", "vocabulary")
    if vocabulary is not None:
        try:
            PrefixTreeType(tokens=tuple(vocabulary), unit=unit if unit in UNITS else "word")
        except ValueError as error:
            problems.add("vocabulary", f"{str(error)[:1].upper()}{str(error)[1:]}.")


def _check_refinement_spec(problems: Problems, spec: dict) -> None:
    boundaries = spec.get("boundaries")
    try:
        encoding_from_json({"dataType": "BucketedType", "boundaries": boundaries})
    except ValueError as error:
        problems.add("boundaries", f"{str(error)[:1].upper()}{str(error)[1:]}.")
        return
    if len(boundaries) < 2:
        problems.add("boundaries", "Give at least two boundaries: a bucket to refine lies between two.")
    problems.number(spec, "minWidth", "minWidth", positive=True)


def _check_baseline(spec: Spec, baseline: Any) -> None:
    if spec.kind != AdaptiveRun.Kind.NGRAM_DISCOVERY:
        raise ValidationFailed({"baseline": ["Only n-gram discovery has a static baseline."]})
    problems = Problems()
    if not isinstance(baseline, dict):
        raise ValidationFailed({"baseline": ["Must be an object."]})
    identifier = problems.string(baseline, "analysis", "baseline.analysis")
    other = Analysis.objects.filter(identifier=identifier).first() if identifier else None
    if identifier and other is None:
        problems.add("baseline.analysis", f"No analysis {identifier!r}.")
    elif other is not None and (other.pk == spec.analysis.pk or other.fleet_id != spec.analysis.fleet_id):
        problems.add(
            "baseline.analysis", "Must be another analysis of the same fleet: the baseline spends its own budget."
        )
    elif other is not None and other.owner_id != spec.analysis.owner_id:
        problems.add("baseline.analysis", "Must belong to the same analyst: the baseline spends its budget.")
    problems.integer(baseline, "topK", "baseline.topK", minimum=1, required=False)
    if problems:
        raise ValidationFailed(problems.errors)
    try:
        _baseline_encoding(spec)
    except ValueError as error:
        raise ValidationFailed({"baseline": [f"{error}."]}) from error
    _check_plan(other, _round_recipes(spec, other, _baseline_recipe(spec, other, 0)), spec.field, "baseline ")


def _round_recipes(spec: Spec, analysis: Analysis, first: dict) -> list[dict]:
    """The recipe of every planned round, with round 1's schema: what the plan will ask of devices."""
    return [{**first, "privacy": {**first["privacy"], **_round_privacy(spec, i)}} for i in range(spec.rounds)]


def _check_plan(analysis: Analysis, recipes: list[dict], field: str, label: str) -> list[dict]:
    """Each planned round must be valid, and all of them together must fit the policy's budget,
    after the rounds other running analyses have planned but not sent yet. Returns the parsed rounds."""
    parsed = []
    for i, recipe in enumerate(recipes):
        try:
            parsed.append(recipe_validate(analysis=analysis, content=recipe))
        except ValidationFailed as failed:
            raise ValidationFailed({f"{label}round {i + 1}: {k}": v for k, v in failed.errors.items()}) from failed
    requests = [parsed_budget_request(p) for p in parsed]
    refusal = budget_plan_refusal(analysis, field, requests, reserved=_reserved_requests(analysis))
    if refusal:
        index, errors = refusal
        raise ValidationFailed(
            {
                f"{label}privacy.epsilonPerRound": [
                    f"The budget plan exceeds the policy of {analysis.identifier} at round {index + 1} of "
                    f"{len(recipes)}: {message}"
                    for message in errors
                ]
            }
        )
    return parsed


def _reserved_requests(analysis: Analysis) -> list:
    """The rounds that running or paused runs have planned on ``analysis`` and not started yet."""
    reserved = []
    active = AdaptiveRun.objects.filter(status__in=[AdaptiveRun.Status.RUNNING, AdaptiveRun.Status.PAUSED])
    for run in active:
        interactive_started, baseline_started = adaptive_rounds_started(run)
        field = run.spec["field"]
        if run.analysis_id == analysis.pk and not run.stop_reason:
            reserved += [_planned_request(p, field) for p in run.plan[interactive_started:]]
        if (run.spec.get("baseline") or {}).get("analysis") == analysis.identifier:
            reserved += [_planned_request(p, field) for p in run.plan[baseline_started:]]
    return reserved


def adaptive_rounds_started(run: AdaptiveRun) -> tuple[int, int]:
    """Rounds started, so charged to devices' budgets: (interactive, static baseline), the current
    (or failed) round included."""
    current = run.current_round
    in_baseline = current is not None and current.recipe.analysis_id != run.analysis_id
    interactive = len(run.levels) + (1 if current is not None and not in_baseline else 0)
    return interactive, len(run.baseline) + (1 if in_baseline else 0)


def _planned_request(planned: dict, field: str):
    return parsed_budget_request({**planned, "field": field})


# ---------------------------------------------------------------- recipes of each round


def _round_privacy(spec: Spec, index: int) -> dict[str, Any]:
    planned = spec.plan[index]
    return {"epsilon": planned["epsilon"], "delta": planned["delta"]}


def _recipe(spec: Spec, analysis: Analysis, index: int, schema: dict, label: str) -> dict[str, Any]:
    privacy = {k: v for k, v in spec.privacy.items() if k != "epsilonPerRound"}
    privacy.update(_round_privacy(spec, index))
    stream = analysis.query_class["stream"]
    return {
        "recipeIdentifier": f"{label}-{timezone.now():%Y%m%d%H%M%S%f}",
        "AnalysisIdentifier": analysis.identifier,
        "query": f"select {spec.field} from {stream}",  # noqa: S608 - a recipe query the devices verify, not SQL
        "cohorts": spec.cohorts,
        "dataTypeContent": {spec.field: schema},
        "privacy": privacy,
    }


def _first_recipe(spec: Spec) -> dict[str, Any]:
    if spec.kind == AdaptiveRun.Kind.NGRAM_DISCOVERY:
        tree = PrefixTreeType(tokens=tuple(spec.raw["vocabulary"]), unit=spec.raw.get("unit", "word"))
        return _recipe(spec, spec.analysis, 0, tree.to_json(), "level1")
    schema = {"dataType": "BucketedType", "boundaries": spec.raw["boundaries"]}
    return _recipe(spec, spec.analysis, 0, schema, "round1")


def _baseline_encoding(spec: Spec) -> HashedNgramType:
    baseline = spec.raw["baseline"]
    return HashedNgramType(
        tokens=tuple(spec.raw["vocabulary"]),
        length=spec.rounds,
        rows=baseline.get("rows", BASELINE_ROWS),
        columns=baseline.get("columns", BASELINE_COLUMNS),
        unit=spec.raw.get("unit", "word"),
    )


def _baseline_recipe(spec: Spec, analysis: Analysis, index: int) -> dict[str, Any]:
    return _recipe(spec, analysis, index, _baseline_encoding(spec).to_json(), f"static{index + 1}")


def _spec_of(run: AdaptiveRun) -> Spec:
    """The run's spec as parsed at start (the plan stored then, not recomputed)."""
    raw = run.spec
    threshold = raw.get("threshold", {})
    rounds = raw.get("maxLength") if run.kind == AdaptiveRun.Kind.NGRAM_DISCOVERY else raw.get("maxRounds")
    per_level = threshold.get("maxPerLevel" if run.kind == AdaptiveRun.Kind.NGRAM_DISCOVERY else "maxBuckets")
    return Spec(
        run.analysis,
        run.kind,
        raw["field"],
        rounds,
        run.plan,
        raw["privacy"],
        threshold.get("zScore"),
        per_level,
        raw.get("cohorts", []),
        raw,
    )


# ---------------------------------------------------------------- the chain


def adaptive_start(*, spec: Any, user: AbstractBaseUser) -> AdaptiveRun:
    """Validate the spec and its budget plan, then start round 1; all or nothing."""
    named = Analysis.objects.filter(identifier=spec.get("analysis")).first() if isinstance(spec, dict) else None
    if named is not None and named.owner_id != user.pk and not user.is_staff:
        refusal_log(user=user, action="adaptive.start", target=named.identifier, reasons="owned by another analyst")
        raise NotAllowed("Only the analysis's owner can run it.")
    try:
        parsed = adaptive_validate(spec=spec)
    except ValidationFailed as invalid:
        target = named.identifier if named is not None else "unknown analysis"
        refusal_log(user=user, action="adaptive.start", target=target, reasons=invalid.errors)
        raise
    with transaction.atomic():
        run = AdaptiveRun.objects.create(
            analysis=parsed.analysis, kind=parsed.kind, spec=spec, plan=parsed.plan, created_by=user
        )
        run.current_round = _round_create(parsed.analysis, _first_recipe(parsed), user)
        run.save(update_fields=["current_round"])
    return run


def _round_create(analysis: Analysis, content: dict, user: AbstractBaseUser) -> Round:
    return round_start(recipe=recipe_create(analysis=analysis, content=content, user=user), user=user)


def adaptive_round_finished(round_: Round) -> None:
    """Called when a round is released or fails: wake the run waiting on it (after commit)."""
    from analyses.tasks import advance_adaptive_run

    for run_id in AdaptiveRun.objects.filter(current_round=round_).values_list("pk", flat=True):
        enqueue(advance_adaptive_run, run_id)


def adaptive_advance(*, run_id: int) -> AdaptiveRun | None:
    """Record the finished round's level and start the next round (or finish). Idempotent."""
    with transaction.atomic():
        run = AdaptiveRun.objects.select_for_update().select_related("analysis__fleet").filter(pk=run_id).first()
        if run is None or run.is_finished or run.current_round_id is None:
            return run
        round_ = Round.objects.select_related("recipe").get(pk=run.current_round_id)
        if not round_.is_finished:
            return run  # a redelivered wake-up: the round is still running
        if round_.status != Round.Status.RELEASED:
            verb = round_.get_status_display().lower()
            return _finish(run, AdaptiveRun.Status.FAILED, f"Round {round_.pk} {verb}: {round_.error}")
        spec = _spec_of(run)
        in_baseline = bool(run.baseline) or len(run.levels) >= spec.rounds or _stopped(run)
        if in_baseline:
            run.baseline = [*run.baseline, {"round": round_.pk}]
        else:
            run.levels = [*run.levels, _level_record(spec, run, round_)]
        run.current_round = None
        next_recipe, analysis, stop = _next_step(spec, run)
        if next_recipe is None:
            if stop:
                run.stop_reason = stop
            return _finish(run, AdaptiveRun.Status.FINISHED, run.stop_reason)
        if stop:
            run.stop_reason = stop
        if run.status == AdaptiveRun.Status.PAUSED:
            run.next_recipe = {"analysis": analysis.identifier, "recipe": next_recipe}
            run.save()
            return run
        return _start_next(run, analysis, next_recipe)


def _stopped(run: AdaptiveRun) -> bool:
    return bool(run.stop_reason)


def _start_next(run: AdaptiveRun, analysis: Analysis, content: dict) -> AdaptiveRun:
    """Start the next round, or finish the run when the devices' budget can no longer afford it."""
    try:
        with transaction.atomic():
            run.current_round = _round_create(analysis, content, run.created_by)
            run.next_recipe = None
            run.save()
    except ValidationFailed as refused:
        over_budget = any(key.startswith("privacy.") for key in refused.errors)
        if over_budget and not (run.baseline or run.stop_reason):
            return _finish(run, AdaptiveRun.Status.FINISHED, f"Stopped before the budget would be exceeded: {refused}")
        return _finish(run, AdaptiveRun.Status.FAILED, f"The next round was refused: {refused}")
    return run


def _finish(run: AdaptiveRun, status: str, reason: str) -> AdaptiveRun:
    run.status = status
    run.stop_reason = reason
    if status == AdaptiveRun.Status.FINISHED:
        run.current_round = None  # a failed run keeps the round that failed: it was charged
    run.next_recipe = None
    run.finished_at = timezone.now()
    run.save()
    if status == AdaptiveRun.Status.FINISHED and run.baseline:
        from analyses.tasks import compare_adaptive_run

        # Reading the fleet's ground truth takes seconds: not under this run's row lock.
        enqueue(compare_adaptive_run, run.pk)
    return run


def adaptive_compare(*, run_id: int) -> None:
    """Store the comparison of a finished run with its static baseline. Idempotent."""
    run = AdaptiveRun.objects.select_related("analysis__fleet").filter(pk=run_id).first()
    if run is None or run.status != AdaptiveRun.Status.FINISHED or not run.baseline or run.comparison:
        return
    AdaptiveRun.objects.filter(pk=run_id, comparison__isnull=True).update(comparison=comparison_compute(run))


def _next_step(spec: Spec, run: AdaptiveRun) -> tuple[dict | None, Analysis | None, str]:
    """(next recipe, the analysis it runs in, why the interactive part stopped, if it did)."""
    stop = run.stop_reason
    if not stop and not run.baseline:
        stop = _stop_reason(spec, run)
        if not stop:
            builder = _next_ngram_recipe if spec.kind == AdaptiveRun.Kind.NGRAM_DISCOVERY else _next_refinement
            return builder(spec, run), spec.analysis, ""
    baseline = spec.raw.get("baseline")
    if baseline and len(run.baseline) < spec.rounds:
        other = Analysis.objects.get(identifier=baseline["analysis"])
        return _baseline_recipe(spec, other, len(run.baseline)), other, stop
    return None, None, stop


def _stop_reason(spec: Spec, run: AdaptiveRun) -> str:
    last = run.levels[-1]
    if len(run.levels) >= spec.rounds:
        return f"Reached the planned {spec.rounds} rounds."
    if spec.kind == AdaptiveRun.Kind.NGRAM_DISCOVERY and not any(not k["end"] for k in last["kept"]):
        return f"No {last['length']}-gram cleared the threshold to extend."
    if spec.kind == AdaptiveRun.Kind.BUCKET_REFINEMENT and not last["split"]:
        return "No bucket can be split: none cleared the threshold at more than twice the minimum width."
    return ""


# ---------------------------------------------------------------- reading a level


def _pooled(release: Release) -> tuple[np.ndarray, np.ndarray, int]:
    """Estimates and variances summed over the released batches (cohorts), and their reports."""
    batches = [b for b in release.content["batches"] if not b["suppressed"]]
    if not batches:
        size = len(release.content["buckets"])
        return np.zeros(size), np.full(size, np.inf), 0
    estimates = np.sum([b["estimates"] for b in batches], axis=0)
    variances = np.sum([np.square(b["standard_errors"]) for b in batches], axis=0)
    return estimates, variances, sum(b["reports"] for b in batches)


def _clears(spec: Spec, estimates: np.ndarray, errors: np.ndarray, candidates: np.ndarray) -> np.ndarray:
    """Indices of the candidates that clear the threshold, largest estimate first."""
    chosen = candidates
    if spec.z_score is not None:
        chosen = chosen[estimates[chosen] > spec.z_score * errors[chosen]]
    chosen = chosen[np.argsort(-estimates[chosen], kind="stable")]
    return chosen[: spec.max_per_level] if spec.max_per_level is not None else chosen


def _level_record(spec: Spec, run: AdaptiveRun, round_: Round) -> dict[str, Any]:
    estimates, variances, reports = _pooled(round_.release)
    errors = np.sqrt(variances)
    schema = round_.recipe.content["dataTypeContent"][spec.field]
    common = {
        "round": round_.pk,
        "recipe": round_.recipe.identifier,
        "buckets": int(estimates.size),
        "reports": reports,
        "epsilon0": round_.recipe.epsilon0,
        "epsilon": round_.recipe.epsilon,
        "delta": round_.recipe.delta,
    }
    if spec.kind == AdaptiveRun.Kind.BUCKET_REFINEMENT:
        level = _refinement_level(spec, schema, estimates, errors)
        if len(run.levels) + 1 >= spec.rounds:
            level["split"] = []  # the last planned round: nothing is split for a next one
        return {**common, **level}
    tree = PrefixTreeType.from_json(schema)
    labels = np.array(tree.labels, dtype=object)
    # Candidates: every bucket naming an n-gram; not the global OOV, nor a leaf's unknown word.
    candidates = np.array([i for i in range(1, tree.size) if tree.bucket_ngram(i)[1] != OOV_LABEL], dtype=np.int64)
    kept = []
    for i in _clears(spec, estimates, errors, candidates):
        prefix, extension = tree.bucket_ngram(int(i))
        kept.append(
            {
                "ngram": str(labels[i]),
                "tokens": [*prefix, extension],
                "end": extension == END_LABEL,
                "estimate": float(estimates[i]),
                "standard_error": float(errors[i]),
            }
        )
    return {**common, "length": tree.length, "leaves": len(tree.leaves), "tree": schema["tree"], "kept": kept}


def _next_ngram_recipe(spec: Spec, run: AdaptiveRun) -> dict:
    last = run.levels[-1]
    previous = PrefixTreeType.from_json({"tree": last["tree"], "tokens": spec.raw["vocabulary"], **_unit(spec)})
    leaves = tuple(tuple(k["tokens"]) for k in last["kept"] if not k["end"])
    ended = tuple(tuple(k["tokens"][:-1]) for k in last["kept"] if k["end"])
    # Complete phrases stay in the tree (as "null" children) only under a prefix still in use.
    complete = tuple(c for c in (*previous.complete, *ended) if any(leaf[: len(c)] == c for leaf in leaves))
    tree = PrefixTreeType(tokens=previous.tokens, leaves=leaves, complete=complete, unit=previous.unit)
    tree = PrefixTreeType.from_json(tree.to_json())  # the canonical (breadth-first) order of leaves
    return _recipe(spec, spec.analysis, len(run.levels), tree.to_json(), f"level{tree.length}")


def _unit(spec: Spec) -> dict:
    return {"unit": spec.raw["unit"]} if "unit" in spec.raw else {}


def _refinement_level(spec: Spec, schema: dict, estimates: np.ndarray, errors: np.ndarray) -> dict[str, Any]:
    boundaries = [float(b) for b in schema["boundaries"]]
    encoding = BucketedType(tuple(boundaries))
    # Finite buckets [b_i, b_(i+1)) are buckets 1 .. k-1; OOV (0) and [b_k, inf) cannot be halved.
    finite = np.arange(1, len(boundaries), dtype=np.int64)
    wide = np.array([boundaries[i] - boundaries[i - 1] >= 2 * spec.raw["minWidth"] for i in finite], dtype=bool)
    # maxBuckets caps the next round's buckets: each split adds one.
    room = None if spec.max_per_level is None else max(spec.max_per_level - encoding.size, 0)
    split = sorted(int(i) for i in _clears(_top(spec, room), estimates, errors, finite[wide]))
    buckets = [
        {"bucket": label, "estimate": float(e), "standard_error": float(s)}
        for label, e, s in zip(encoding.labels, estimates, errors, strict=True)
    ]
    return {"boundaries": boundaries, "histogram": buckets, "split": [encoding.labels[i] for i in split]}


def _next_refinement(spec: Spec, run: AdaptiveRun) -> dict:
    last = run.levels[-1]
    boundaries = last["boundaries"]
    labels = BucketedType(tuple(boundaries)).labels
    midpoints = [
        (boundaries[i - 1] + boundaries[i]) / 2 for i in range(1, len(boundaries)) if labels[i] in last["split"]
    ]
    schema = {"dataType": "BucketedType", "boundaries": sorted(boundaries + midpoints)}
    return _recipe(spec, spec.analysis, len(run.levels), schema, f"round{len(run.levels) + 1}")


# ---------------------------------------------------------------- pause, edit, continue


def adaptive_pause(*, run: AdaptiveRun, user: AbstractBaseUser) -> AdaptiveRun:
    """The current round finishes; the next one waits, editable, until the analyst continues."""
    _check_actor(run, user)
    updated = AdaptiveRun.objects.filter(pk=run.pk, status=AdaptiveRun.Status.RUNNING).update(
        status=AdaptiveRun.Status.PAUSED
    )
    run.refresh_from_db()
    if not updated:
        raise Conflict(f"Only a running analysis can be paused (this one is {run.get_status_display().lower()}).")
    return run


def adaptive_next_edit(*, run: AdaptiveRun, recipe: Any, user: AbstractBaseUser) -> AdaptiveRun:
    """Replace the waiting next round's recipe; its privacy must stay the planned one."""
    _check_actor(run, user)
    with transaction.atomic():
        run = AdaptiveRun.objects.select_for_update().get(pk=run.pk)
        if run.status != AdaptiveRun.Status.PAUSED or run.next_recipe is None:
            raise Conflict("Only a paused analysis whose next round is waiting can be edited.")
        analysis = Analysis.objects.get(identifier=run.next_recipe["analysis"])
        planned = run.next_recipe["recipe"]
        if not isinstance(recipe, dict):
            raise ValidationFailed({"recipe": ["Must be a JSON object."]})
        if recipe.get("privacy") != planned["privacy"]:
            raise ValidationFailed(
                {
                    "privacy": [
                        f"Must stay as planned (the budget split was checked at start): {json.dumps(planned['privacy'])}."
                    ]
                }
            )
        _check_same_question(planned, recipe)
        recipe_validate(analysis=analysis, content=recipe)
        run.next_recipe = {"analysis": analysis.identifier, "recipe": recipe}
        run.save(update_fields=["next_recipe"])
    return run


def _check_same_question(planned: dict, recipe: dict) -> None:
    """An edit may reshape the next round's buckets (prune the tree, move boundaries), not its question."""
    problems = Problems()
    for key in ("AnalysisIdentifier", "query", "cohorts"):
        if recipe.get(key) != planned.get(key):
            problems.add(key, f"Must stay {planned.get(key)!r}.")
    (field, schema), edited = next(iter(planned["dataTypeContent"].items())), recipe.get("dataTypeContent")
    if not isinstance(edited, dict) or set(edited) != {field} or not isinstance(edited[field], dict):
        problems.add("dataTypeContent", f"Must encode {field} alone.")
    else:
        edited_schema = edited[field]
        kept = ("dataType",) if schema["dataType"] == "BucketedType" else ("dataType", "tokens", "unit")
        if schema["dataType"] == "HashedNgrams":
            kept = tuple(schema)  # the static baseline is compared as planned
        for key in kept:
            if edited_schema.get(key) != schema.get(key):
                problems.add(f"dataTypeContent.{field}.{key}", "Must stay as planned.")
        if schema["dataType"] == "PrefixTree" and not problems:
            try:
                same_length = PrefixTreeType.from_json(edited_schema).length == PrefixTreeType.from_json(schema).length
            except ValueError as error:
                problems.add(f"dataTypeContent.{field}.tree", f"{error}.")
            else:
                if not same_length:
                    problems.add(f"dataTypeContent.{field}.tree", "Its leaves must keep their length.")
    if problems:
        raise ValidationFailed(problems.errors)


def adaptive_resume(*, run: AdaptiveRun, user: AbstractBaseUser) -> AdaptiveRun:
    """Continue a paused analysis: send the waiting round, if any, else let the current one advance it."""
    _check_actor(run, user)
    with transaction.atomic():
        run = AdaptiveRun.objects.select_for_update().get(pk=run.pk)
        if run.status != AdaptiveRun.Status.PAUSED:
            raise Conflict("Only a paused analysis can continue.")
        run.status = AdaptiveRun.Status.RUNNING
        if run.next_recipe is None:
            run.save(update_fields=["status"])
            return run
        analysis = Analysis.objects.get(identifier=run.next_recipe["analysis"])
        return _start_next(run, analysis, run.next_recipe["recipe"])


def _check_actor(run: AdaptiveRun, user: AbstractBaseUser) -> None:
    if run.analysis.owner_id != user.pk and not user.is_staff:
        raise NotAllowed("Only the analysis's owner can steer it.")


# ---------------------------------------------------------------- output and comparison


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
    if run.next_recipe is not None:
        output["next_recipe"] = run.next_recipe
    if run.comparison is not None:
        output["comparison"] = run.comparison
    return output


def _level_output(run: AdaptiveRun, level: dict) -> dict[str, Any]:
    if run.kind == AdaptiveRun.Kind.BUCKET_REFINEMENT:
        keys = ("round", "boundaries", "histogram", "split", "buckets", "reports", "epsilon0", "epsilon", "delta")
    else:
        keys = ("length", "round", "buckets", "leaves", "reports", "epsilon0", "epsilon", "delta", "kept")
    entry = {k: level[k] for k in keys}
    if "kept" in entry:
        entry["kept"] = [{k: v for k, v in kept.items() if k != "tokens"} for kept in entry["kept"]]
    return entry


def comparison_compute(run: AdaptiveRun) -> dict[str, Any]:
    """Interactive against static on the fleet's ground truth: precision and recall of the true
    top-K n-grams of the target length, and the relative error of their counts."""
    spec = _spec_of(run)
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
    estimates, variances, reports = _pooled(round_.release)
    tree = PrefixTreeType.from_json(round_.recipe.content["dataTypeContent"][spec.field])
    candidates = np.array([i for i in range(1, tree.size) if tree.bucket_ngram(i)[1] != OOV_LABEL], dtype=np.int64)
    chosen = _clears(_top(spec, top_k), estimates, np.sqrt(variances), candidates)
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
    pooled = [_pooled(r.release) for r in rounds]
    found: dict[str, Any] = {"rounds": len(pooled), "ngrams": [], "by_ngram": {}}
    if not pooled:
        return found
    estimates = np.mean([p[0] for p in pooled], axis=0)
    variances = np.sum([p[1] for p in pooled], axis=0) / len(pooled) ** 2
    reports = np.mean([p[2] for p in pooled])
    encoding = _baseline_encoding(spec)
    top = encoding.top(estimates, variances, 4 * top_k)
    top_estimates = np.array([t[1] for t in top])
    top_errors = np.array([t[2] for t in top])
    chosen = _clears(_top(spec, top_k), top_estimates, top_errors, np.arange(len(top), dtype=np.int64))
    for i in chosen:
        ngram, estimate, error = top[i]
        found["ngrams"].append(ngram)
        estimand = truth.uniform_reports_of(ngram) * reports / run.analysis.fleet.size
        found["by_ngram"][ngram] = {"estimate": estimate, "standard_error": error, "estimand": estimand}
    return found


def _top(spec: Spec, top_k: int | None) -> Spec:
    """The spec's z-score rule with another cap (the comparison's K, or the room left for buckets)."""
    return Spec(**{**spec.__dict__, "max_per_level": top_k})
