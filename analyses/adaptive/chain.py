"""The chain of an adaptive run: start, advance after each round, pause, edit and continue.

The chain lives in the database: when a round ends (analyses.signals.round_finished) its run is
woken (``adaptive_runs_wake`` sends ``advance_adaptive_run``), which records the level and starts
the next round in one transaction, so a worker restart resumes where it stopped.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from analyses.adaptive import levels
from analyses.adaptive.spec import (
    Spec,
    adaptive_validate,
    baseline_recipe,
    first_recipe,
    spec_of,
    spec_recipe,
    spec_unit,
)
from analyses.audit_log import refusal_log
from analyses.models import AdaptiveRun, Analysis, Round
from analyses.rules.roles import check_may_run, check_may_stop
from analyses.rules.validation import Problems
from analyses.services.policy import analysis_lock
from analyses.services.recipes import recipe_create, recipe_validate
from analyses.services.rounds import round_start
from analyses.task_names import ADVANCE_ADAPTIVE_RUN, COMPARE_ADAPTIVE_RUN
from pfs_base.errors import Conflict, NotAllowed, ValidationFailed
from pfs_base.task_queue import enqueue
from privacy.ngrams import PrefixTreeType


def adaptive_start(*, spec: Any, user: AbstractBaseUser) -> AdaptiveRun:
    """Validate the spec and its budget plan, then start round 1; all or nothing."""
    named = Analysis.objects.filter(identifier=spec.get("analysis")).first() if isinstance(spec, dict) else None
    if named is not None:
        try:
            check_may_run(user, named)
        except NotAllowed as refusal:
            refusal_log(user=user, action="adaptive.start", target=named.identifier, reasons=str(refusal))
            raise
    try:
        with transaction.atomic():
            # The plan is checked and reserved in one step, under the locks of the analyses it
            # spends: concurrent starts see each other's reservations and accept only what fits.
            for analysis in _spent_analyses(spec):
                analysis_lock(analysis)
            parsed = adaptive_validate(spec=spec)
            run = AdaptiveRun.objects.create(
                analysis=parsed.analysis, kind=parsed.kind, spec=spec, plan=parsed.plan, created_by=user
            )
            # Small cohorts are confirmed once, for the run (its spec's confirmSmallCohorts).
            confirmed = spec.get("confirmSmallCohorts") is True
            run.current_round = _round_create(parsed.analysis, first_recipe(parsed), user, confirmed=confirmed)
            run.save(update_fields=["current_round"])
    except ValidationFailed as invalid:
        target = named.identifier if named is not None else "unknown analysis"
        refusal_log(user=user, action="adaptive.start", target=target, reasons=invalid.errors)
        raise
    return run


def _spent_analyses(spec: Any) -> list[Analysis]:
    """The analyses a spec spends (its own and its baseline's), in a fixed order so locks never deadlock."""
    if not isinstance(spec, dict):
        return []
    baseline = spec.get("baseline")
    names = [spec.get("analysis"), baseline.get("analysis") if isinstance(baseline, dict) else None]
    names = [n for n in names if isinstance(n, str)]
    return list(Analysis.objects.filter(identifier__in=names).order_by("pk"))


def _round_create(analysis: Analysis, content: dict, user: AbstractBaseUser, *, confirmed: bool) -> Round:
    recipe = recipe_create(analysis=analysis, content=content, user=user)
    return round_start(recipe=recipe, user=user, confirm_small_cohorts=confirmed)


def adaptive_runs_wake(run_ids: list[int]) -> None:
    """Advance these runs once the transaction commits (the one way a run is woken)."""
    for run_id in run_ids:
        enqueue(ADVANCE_ADAPTIVE_RUN, run_id)


def on_round_finished(sender: type, *, round_: Round, **_: Any) -> None:
    """analyses.signals.round_finished: wake the run waiting on the round (AnalysesConfig connects it)."""
    adaptive_runs_wake(list(AdaptiveRun.objects.filter(current_round=round_).values_list("pk", flat=True)))


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
        spec = spec_of(run)
        if run.kind == AdaptiveRun.Kind.HEAVY_HITTERS:  # one round: its walk's levels, and the run is done
            run.levels = levels.walk_levels(round_.release.content, round_.pk)
            run.current_round = None
            bits = round_.recipe.content["dataTypeContent"][spec.field]["bits"]
            return _finish(run, AdaptiveRun.Status.FINISHED, levels.walk_stop_reason(run.levels, bits))
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
            # The run was started with its cohorts: their forecast was confirmed (or clear) then. So
            # was its noise (analyses.services.accuracy): later levels of a discovery are sparse by
            # design, most candidates near zero, which the too-noisy rule would flag every time.
            run.current_round = _round_create(analysis, content, run.created_by, confirmed=True)
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
    compared = run.baseline or (run.kind == AdaptiveRun.Kind.HEAVY_HITTERS and run.spec.get("comparison"))
    if status == AdaptiveRun.Status.FINISHED and compared:
        # Reading the fleet's ground truth takes seconds: not under this run's row lock.
        enqueue(COMPARE_ADAPTIVE_RUN, run.pk)
    return run


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
        return baseline_recipe(spec, other, len(run.baseline)), other, stop
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


def _level_record(spec: Spec, run: AdaptiveRun, round_: Round) -> dict[str, Any]:
    estimates, variances, reports = levels.pooled(round_.release.content)
    errors = np.sqrt(variances)
    schema = round_.recipe.content["dataTypeContent"][spec.field]
    common = {
        "round": round_.pk,
        "recipe": round_.recipe.identifier,
        "buckets": int(estimates.size),
        "reports": reports,
        "epsilon0": round_.recipe.privacy.epsilon0,
        "epsilon": round_.recipe.privacy.epsilon,
        "delta": round_.recipe.privacy.delta,
    }
    if spec.kind == AdaptiveRun.Kind.BUCKET_REFINEMENT:
        level = levels.refinement_level(
            schema,
            estimates,
            errors,
            min_width=spec.raw["minWidth"],
            z_score=spec.z_score,
            max_buckets=spec.max_per_level,
        )
        if len(run.levels) + 1 >= spec.rounds:
            level["split"] = []  # the last planned round: nothing is split for a next one
        return {**common, **level}
    level = levels.ngram_level(schema, estimates, errors, z_score=spec.z_score, max_per_level=spec.max_per_level)
    return {**common, **level}


def _next_ngram_recipe(spec: Spec, run: AdaptiveRun) -> dict:
    tree = levels.next_ngram_tree(run.levels[-1], spec.raw["vocabulary"], spec_unit(spec))
    return spec_recipe(spec, spec.analysis, len(run.levels), tree.to_json(), f"level{tree.length}")


def _next_refinement(spec: Spec, run: AdaptiveRun) -> dict:
    schema = {"dataType": "BucketedType", "boundaries": levels.next_refinement_boundaries(run.levels[-1])}
    return spec_recipe(spec, spec.analysis, len(run.levels), schema, f"round{len(run.levels) + 1}")


def adaptive_pause(*, run: AdaptiveRun, user: AbstractBaseUser) -> AdaptiveRun:
    """The current round finishes; the next one waits, editable, until the analyst continues."""
    check_may_stop(user, run.analysis)
    updated = AdaptiveRun.objects.filter(pk=run.pk, status=AdaptiveRun.Status.RUNNING).update(
        status=AdaptiveRun.Status.PAUSED
    )
    run.refresh_from_db()
    if not updated:
        raise Conflict(f"Only a running analysis can be paused (this one is {run.get_status_display().lower()}).")
    return run


def adaptive_next_edit(*, run: AdaptiveRun, recipe: Any, user: AbstractBaseUser) -> AdaptiveRun:
    """Replace the waiting next round's recipe; its privacy must stay the planned one."""
    check_may_run(user, run.analysis)
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
    check_may_run(user, run.analysis)
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
