"""The life of a round: start, dispatch to shards, aggregate, fail, cancel, and its progress.

Tasks sit above this module: it sends them by name (pfs_base.task_queue) and never imports them.
When a round ends it announces ``round_finished`` (analyses.signals); adaptive runs subscribe.
"""

from __future__ import annotations

import secrets
import threading
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.db.models import BooleanField, Case, Q, Value, When
from django.db.models.fields.json import KeyTextTransform
from django.utils import timezone

from aggregation.heavy_hitters_leader import collection_open
from aggregation.ingest import reports_ingest
from aggregation.issuer import issuer_public_key
from aggregation.models import CollectionRules, Poplar1Level
from aggregation.services import (
    collection_discard,
    collection_provision,
    collection_rules_open,
)
from analyses import device_rounds
from analyses.audit_log import refusal_log
from analyses.models import Analysis, Recipe, Release, Round
from analyses.rules.roles import check_may_run, check_may_stop
from analyses.services.accuracy import CONFIRM_KEY, recipe_expected_error, too_noisy_refusal
from analyses.services.budget import budget_plan_refusal, recipe_budget_request
from analyses.services.cohorts import cohort_forecast, cohort_release, small_cohorts_refusal
from analyses.services.collector import collection_release
from analyses.services.heavy_hitters import heavy_hitters_walk
from analyses.services.policy import analysis_lock
from analyses.services.recipes import (
    device_task,
    recipe_create,
    recipe_device_task,
    recipe_estimator,
    recipe_unsaved,
    recipe_validate,
)
from analyses.services.releases import release_content, walk_release_content
from analyses.signals import round_finished
from analyses.task_names import DISPATCH_ROUND
from devices.models import FleetShard, ShardRun
from devices.services import shard_answer, shard_dry_run
from pfs_base import metrics
from pfs_base.errors import Conflict, NotAllowed, ValidationFailed
from pfs_base.task_queue import enqueue
from pfs_device.budget import Decision
from pfs_device.decision import DeviceTask
from privacy.aggregator_noise import aggregator_noise
from privacy.heavy_hitters import POPLAR1_WORDS, Poplar1WordsType, walk_levels
from privacy.report_vdaf import report_shape


class ShardsPending(RuntimeError):
    """Aggregation was asked for before every shard answered (a redelivered task can fire a chord early)."""


def round_start(*, recipe: Recipe, user: AbstractBaseUser, confirm_small_cohorts: bool = False) -> Round:
    """Queue a round of ``recipe``; its tasks are sent when the transaction commits.

    A recipe whose batches are expected below the minimum cohort (analyses.services.cohorts), or
    whose expected noise exceeds what most buckets can hold (analyses.services.accuracy), starts
    only with ``confirm_small_cohorts``: their devices would spend budget for nothing. A refusal
    writes nothing and spends nothing.
    """
    try:
        check_may_run(user, recipe.analysis)
    except NotAllowed as refusal:
        refusal_log(user=user, action="round.start", target=recipe.analysis.identifier, reasons=str(refusal))
        raise
    if not recipe.analysis.is_approved:
        refusal_log(user=user, action="round.start", target=recipe.analysis.identifier, reasons="not approved")
        raise Conflict("The analysis is not approved.")
    with transaction.atomic():
        # The budget is checked again here, under the analysis's lock, in the transaction that
        # creates the round: a recipe validated earlier (re-run later, or raced by another start)
        # starts only if devices would still accept it. A refusal writes nothing.
        analysis_lock(recipe.analysis)
        refusal = budget_plan_refusal(recipe.analysis, recipe.encoded_field, [recipe_budget_request(recipe)])
        if refusal is not None:
            refusal_log(
                user=user,
                action="round.start",
                target=recipe.analysis.identifier,
                reasons={"privacy.budget": refusal[1]},
            )
            raise ValidationFailed({"privacy.budget": refusal[1]})
        cohorts = list(recipe.content.get("cohorts", []))
        forecast = cohort_forecast(recipe.analysis, cohorts, recipe.privacy.sampling_rate, recipe.privacy.min_cohort)
        # A walk's counts are not spread over its candidates: most are near zero by design, so the
        # too-noisy rule (noise against the mean bucket) does not apply to it.
        noisy = (
            None
            if walk_levels(recipe.encoding)
            else too_noisy_refusal(recipe_expected_error(recipe.analysis, recipe.privacy, recipe.encoding.size))
        )
        wasted = [r for r in (small_cohorts_refusal(forecast), noisy) if r is not None]
        if wasted and not confirm_small_cohorts:
            refusal_log(
                user=user, action="round.start", target=recipe.analysis.identifier, reasons={CONFIRM_KEY: wasted}
            )
            raise ValidationFailed({CONFIRM_KEY: wasted})
        round_ = Round.objects.create(recipe=recipe, seed=secrets.randbits(63), created_by=user)
        _collection_rules_open(round_)
        device_rounds.window_open(round_, device_task(round_))  # real devices fetch the task over HTTP
        enqueue(DISPATCH_ROUND, round_.pk)
        metrics.round_counted("started")
    return round_


def _collection_rules_open(round_: Round) -> None:
    """Configure both aggregators with the round's public batch rules."""
    size = round_.recipe.encoding.size
    privacy = round_.recipe.privacy
    encoding = round_.recipe.encoding
    fleet = round_.recipe.analysis.fleet
    # The key the devices' task commits to: both aggregators check every token against it.
    token_key = issuer_public_key(round_.task_key) if fleet.is_real else None
    if isinstance(encoding, Poplar1WordsType):
        # A walk: one Poplar1 collection whose levels each aggregator noises on its own
        # (aggregation.heavy_hitters); provisioned as below.
        collection_open(
            collection_key=round_.task_key,
            bits=encoding.bits,
            min_cohort=privacy.min_cohort,
            epsilon=privacy.epsilon,
            delta=privacy.delta,
            levels=encoding.levels,
            token_key=token_key,
            provision=fleet.is_real,
        )
        return
    # The shape of a report (length, weight bound, the Prio3 it is verified with) comes from the
    # recipe alone, by the code the devices run (privacy.report_vdaf).
    if privacy.aggregator_noise:
        shape = report_shape(mechanism=None, epsilon0=None, domain_size=size)
        noise = aggregator_noise(privacy.epsilon, privacy.delta)
    else:
        shape = report_shape(mechanism=privacy.mechanism, epsilon0=privacy.epsilon0, domain_size=size)
        noise = None
    length, weight_bound = shape.length, shape.weight_bound
    # Rate validation of real devices' uploads needs nothing from the leader: each aggregator takes
    # the devices' count from the token issuer's signed statement and their pacing from its own
    # settings (aggregation.aggregators.devices_refusal), never from this fleet table.
    collection_rules_open(
        key=round_.task_key,
        length=length,
        min_cohort=privacy.min_cohort,
        weight_bound=weight_bound,
        noise=noise,
        vdaf=shape.kind,
        token_key=token_key,
        # Real devices get the task, and seal to the helper's key, from now: the helper must know the
        # collection now (its key rotation keeps a retired key for the collections it knows). A
        # simulated round's is provisioned by its dispatch (a task, retried while the helper is down).
        provision=fleet.is_real,
    )


def round_create_and_start(
    *, analysis: Analysis, content: Any, user: AbstractBaseUser, confirm_small_cohorts: bool = False
) -> Round:
    """Validate and store a recipe and start its round, all or nothing."""
    check_may_run(user, analysis)
    with transaction.atomic():
        analysis_lock(analysis)  # before anything is read: the check and the start are one step
        recipe = recipe_create(analysis=analysis, content=content, user=user)
        return round_start(recipe=recipe, user=user, confirm_small_cohorts=confirm_small_cohorts)


def round_dry_run(*, analysis: Analysis, content: Any) -> dict[str, Any]:
    """How many devices would answer the recipe, and why the others would not; nothing is spent.

    The recipe is validated as for a real round (a bad one raises ValidationFailed); then every
    shard runs the devices' own decision on a task that is never sent. Devices that are not
    sampled count apart from refusals. Next to the recipe's cost (epsilon, delta), its expected
    error per bucket and whether it is too noisy (analyses.services.accuracy), which a start
    would ask to confirm.
    """
    parsed = recipe_validate(analysis=analysis, content=content)
    recipe = recipe_unsaved(analysis, content, parsed, None)
    task = recipe_device_task(recipe, task_key=f"{analysis.identifier}/dry-run", seed=secrets.randbits(63))
    decisions: dict[str, int] = {}
    by_batch: dict[str, int] = {}
    for shard_id in FleetShard.objects.filter(fleet=analysis.fleet).values_list("pk", flat=True):
        reasons, batches = shard_dry_run(shard_id=shard_id, task=task)
        for reason, count in reasons.items():
            decisions[reason] = decisions.get(reason, 0) + count
        for batch, count in batches.items():
            by_batch[batch] = by_batch.get(batch, 0) + count
    answering = decisions.pop(Decision.ANSWERED.label, 0)
    not_sampled = decisions.pop(Decision.NOT_SAMPLED.label, 0)
    min_cohort = parsed.privacy.min_cohort
    forecast = cohort_forecast(analysis, parsed.cohorts, parsed.privacy.sampling_rate, min_cohort)
    if not analysis.fleet.is_real:
        # The devices' own decisions, batch by batch: what this round would release.
        forecast = [{**row, "expected": by_batch.get(row["cohort"], 0)} for row in forecast]
        forecast = [{**row, "below": row["expected"] < min_cohort} for row in forecast]
    error = recipe_expected_error(analysis, parsed.privacy, parsed.encoding.size)
    # One verdict per batch, which the page's headline and its table both read.
    release = cohort_release(forecast, answering, min_cohort)
    return {
        "devices": analysis.fleet.size,
        "would_answer": answering,
        "not_sampled": not_sampled,
        "would_refuse": decisions,
        "min_cohort": min_cohort,
        "meets_min_cohort": release["release"] == "all",
        "release": release["release"],
        "cohorts": release["cohorts"],
        "batches_released": release["released"],
        "batches_below": release["suppressed"],
        # Next to its cost: the error of each bucket, and whether a start will ask to confirm it.
        "epsilon": parsed.privacy.epsilon,
        "delta": parsed.privacy.delta,
        "expected_error": error.as_json(),
        "too_noisy": error.too_noisy,
        "too_noisy_reason": too_noisy_refusal(error),
    }


def round_dispatch(*, round_id: int) -> list[int]:
    """Mark the round running and return the shard ids to run; [] if it is no longer queued."""
    with transaction.atomic():
        round_ = Round.objects.select_for_update().select_related("recipe__analysis").filter(pk=round_id).first()
        if round_ is None:
            return []
        shard_ids = list(
            FleetShard.objects.filter(fleet=round_.recipe.analysis.fleet).order_by("index").values_list("pk", flat=True)
        )
        if round_.status != Round.Status.QUEUED:
            return shard_ids if round_.status == Round.Status.RUNNING else []
        # The helper's task, before any share is sent to it (HelperUnavailable: the task is retried).
        if not CollectionRules.objects.filter(key=round_.task_key).exists():
            _collection_rules_open(round_)  # a round made by hand, not by round_start
        collection_provision(collection_key=round_.task_key)
        round_.status = Round.Status.RUNNING
        round_.shards_total = len(shard_ids)
        round_.started_at = timezone.now()
        round_.save(update_fields=["status", "shards_total", "started_at"])
    return shard_ids


def round_shard_run(*, round_id: int, shard_id: int) -> None:
    task = _running_task(round_id)
    if task is None:
        return  # deleted, finished or failed meanwhile: a late or redelivered task does nothing
    shard_answer(shard_id=shard_id, task=task)


# Device tasks of running rounds, kept in the process by _running_task; the oldest dropped first.
_TASKS_KEPT = 16
_tasks: dict[tuple, DeviceTask] = {}
_tasks_lock = threading.Lock()


def _running_task(round_id: int) -> DeviceTask | None:
    """The task the shards of a running round answer; None once the round is not running.

    Every shard reads the round's status, and what of its task may change while it runs (the
    analysis's identifier and approved snapshot), in one narrow query. The task itself is built from
    the round's, recipe's, analysis's and snapshot's rows once per process and round, and kept under
    those values and the round's creation time (an id alone may come back: SQLite reuses the largest
    one after a delete); the recipe never changes once stored. Building it from the full rows on
    every shard cost 2.5 ms of CPU a shard, against 0.8 (four model instances, the recipe's content JSON).
    """
    names = ("status", "created_at", "recipe__analysis__identifier", "recipe__analysis__snapshot__digest")
    found = Round.objects.filter(pk=round_id).values_list(*names).first()
    if found is None or found[0] != Round.Status.RUNNING:
        return None
    with _tasks_lock:
        task = _tasks.get((round_id, *found[1:]))
    if task is not None:
        return task
    round_ = Round.objects.select_related("recipe__analysis__snapshot").get(pk=round_id)
    task = device_task(round_)
    analysis = round_.recipe.analysis
    with _tasks_lock:
        while len(_tasks) >= _TASKS_KEPT:
            del _tasks[next(iter(_tasks))]  # the oldest: dicts keep insertion order
        _tasks[round_id, round_.created_at, analysis.identifier, analysis.snapshot.digest] = task
    return task


def round_aggregate(*, round_id: int) -> Round | None:
    """Aggregate every batch with both aggregators, debias, and store the release. Idempotent."""
    with transaction.atomic():
        round_ = Round.objects.select_for_update().select_related("recipe__analysis").filter(pk=round_id).first()
        if round_ is None or round_.status != Round.Status.RUNNING:
            return round_
        progress = round_progress(round_, exact_refusals=True)
        if progress["shards_done"] < round_.shards_total:
            raise ShardsPending(f"{progress['shards_done']} of {round_.shards_total} shards answered")
        recipe = round_.recipe
        if not isinstance(recipe.encoding, Poplar1WordsType):
            batches = collection_release(collection_key=round_.task_key, estimator=recipe_estimator(recipe))
            Release.objects.create(round=round_, content=release_content(round_, recipe.encoding, batches, progress))
            # A round no batch of which reached its minimum cohort released nothing: its status says
            # so (the stored content keeps the devices' reasons), and no chart is drawn from it.
            released = any(not batch.suppressed for batch in batches)
            withheld = f"no batch reached its minimum cohort of {recipe.privacy.min_cohort:,} reports: nothing released"
            return _round_released(round_, "" if released else withheld)
    return _round_walk(round_, progress)


def _round_walk(round_: Round, progress: dict[str, Any]) -> Round | None:
    """A Poplar1 round: the walk over its collection, level by level with the helper (minutes, over
    HTTP: outside any transaction, so the dashboard's writes go on), then its release. A walk run
    again after a stop resumes: each level already released is read back, not asked again."""
    recipe = round_.recipe
    # Real devices' reports still pending are taken first (both aggregators keep each one whole);
    # the window is closed, so none arrives after.
    reports_ingest(collection_key=round_.task_key, wait=True)
    try:
        walk = heavy_hitters_walk(round_.task_key, recipe.encoding.plan())
    except NotAllowed:  # a level holds fewer verified reports than the minimum cohort
        # Not the refusal's own words: they count the level's reports, a size below the minimum cohort
        # that is never released (the round page and the API show this error).
        walk, withheld = (
            None,
            f"a level of the walk held fewer verified reports than the minimum cohort of "
            f"{recipe.privacy.min_cohort:,}: nothing released",
        )
    else:
        withheld = "" if walk.levels else "the walk asked no level: nothing released"
    with transaction.atomic():
        round_ = Round.objects.select_for_update().select_related("recipe__analysis").filter(pk=round_.pk).first()
        if round_ is None or round_.status != Round.Status.RUNNING:
            return round_
        Release.objects.create(round=round_, content=walk_release_content(round_, walk, progress))
        return _round_released(round_, withheld)


def _round_released(round_: Round, withheld: str) -> Round:
    round_.status = Round.Status.WITHHELD if withheld else Round.Status.RELEASED
    round_.error = withheld
    round_.finished_at = timezone.now()
    round_.save(update_fields=["status", "error", "finished_at"])
    metrics.round_counted(round_.status)  # released, or withheld
    _announce_finished(round_)
    return round_


def round_fail(*, round_id: int, error: str) -> None:
    with transaction.atomic():
        failed = (
            Round.objects.filter(pk=round_id)
            .exclude(status__in=Round.TERMINAL)
            .update(status=Round.Status.FAILED, error=error[:2000], finished_at=timezone.now())
        )
        if failed:
            round_ = Round.objects.select_related("recipe__analysis").get(pk=round_id)
            # A failed round is never released: what its collection holds (shares, reports still
            # waiting for verification) would only be kept for nothing.
            collection_discard(collection_key=round_.task_key)
            metrics.round_counted("failed")
            _announce_finished(round_)


def round_cancel(*, round_: Round, user: AbstractBaseUser) -> Round:
    """Stop a round that has not finished: nothing is released and its stored shares are dropped.

    Shards that have not run never do (they check the status first); a shard already answering
    finishes, and its devices' budget stays spent, because they did send reports. The collection
    is closed, so no later report lands in it. A finished round cannot be cancelled (NotAllowed).
    """
    check_may_stop(user, round_.recipe.analysis)
    with transaction.atomic():
        locked = Round.objects.select_for_update().get(pk=round_.pk)
        if locked.is_finished:
            raise Conflict(f"Round {locked.pk} is already {locked.get_status_display().lower()}.")
        locked.status = Round.Status.CANCELLED
        locked.error = f"cancelled by {user.get_username()}"
        locked.finished_at = timezone.now()
        locked.save(update_fields=["status", "error", "finished_at"])
        collection_discard(collection_key=locked.task_key)
        metrics.round_counted("cancelled")
        _announce_finished(locked)
    return locked


def _announce_finished(round_: Round) -> None:
    round_finished.send(sender=Round, round_=round_)


def round_progress(round_: Round, *, exact_refusals: bool = False) -> dict[str, Any]:
    """Shards done, devices answered (as a release would count them) and not answering by reason.

    What the analyst may read (docs/architecture.md, "Nothing released is not a release"): no count
    includes a batch below its minimum cohort, live or after the release. ``exact_refusals``: the
    refusal counts themselves, for the release's record (release_content), never for display.
    """
    progress = rounds_progress([round_], exact_refusals=exact_refusals)[round_.pk]
    schemas = (round_.recipe.content.get("dataTypeContent") or {}).values()
    walk = next(
        (s.get("bits", 0) // 8 for s in schemas if isinstance(s, dict) and s.get("dataType") == POPLAR1_WORDS), 0
    )
    if walk:
        # A walk's levels as the leader released them so far: what the analyst sees as it goes.
        released = Poplar1Level.objects.filter(collection_key=round_.task_key, released=True).count()
        progress["walk"] = {"levels": walk, "released": released}
    return progress


def rounds_progress(rounds: list[Round], *, exact_refusals: bool = False) -> dict[int, dict[str, Any]]:
    """round_progress of each round, by id: the shard records of every simulated round in one query.

    ``devices_answered`` of a simulated round: while it runs, the reports held in the batches that
    have reached their minimum cohort (device_rounds.reports_releasable); once released, the
    released batches' reports. ``devices_not_answering`` names the reasons with no counts
    (None) unless the round released every batch it had, or no device has answered: the fleet's
    size minus the devices not answering is the devices answering, suppressed batches included.
    """
    simulated = {r.task_key: r for r in rounds if not device_rounds.is_device_round(r)}
    tallies: dict[str, dict[str, Any]] = {key: {"done": 0, "answered": 0, "outcomes": {}} for key in simulated}
    runs = ShardRun.objects.filter(task_key__in=list(simulated)).values_list("task_key", "answered", "outcomes")
    for task_key, answered, outcomes in runs:
        tally = tallies[task_key]
        tally["done"] += 1
        tally["answered"] += answered
        for reason, count in outcomes.items():
            tally["outcomes"][reason] = tally["outcomes"].get(reason, 0) + count
    releases = _releases_counted(
        [r.pk for r in simulated.values() if r.status in (Round.Status.RELEASED, Round.Status.WITHHELD)]
    )
    live = [r.task_key for r in simulated.values() if r.pk not in releases]
    releasable = device_rounds.reports_releasable(live) if live else {}
    progress = {}
    for round_ in rounds:
        if round_.task_key not in simulated:
            progress[round_.pk] = device_rounds.round_progress_devices(round_)  # what the aggregators hold
            continue
        tally = tallies[round_.task_key]
        release = releases.get(round_.pk)
        elapsed, eta = _round_timing(round_, tally["done"])
        outcomes = tally["outcomes"]
        # No device answered (yet): every batch is empty, there is no size to hide.
        counted = not tally["answered"] or (release is not None and release["countable"])
        progress[round_.pk] = {
            "status": round_.status,
            "shards_total": round_.shards_total,
            "shards_done": tally["done"],
            "devices_answered": release["reports"] if release else releasable[round_.task_key],
            "devices_charged": tally["answered"] > 0,  # some device answered (spent budget): never how many
            "devices_not_answering": (outcomes if exact_refusals or counted else dict.fromkeys(outcomes)),
            "error": round_.error,
            "elapsed_seconds": elapsed,
            "eta_seconds": eta,
        }
    return progress


# A batch's JSON as PostgreSQL (jsonb as text) and SQLite (json_extract, minified) write it.
_SUPPRESSED = Q(batches_text__contains='"suppressed": true') | Q(batches_text__contains='"suppressed":true')


def _releases_counted(round_ids: list[int]) -> dict[int, dict[str, Any]]:
    """By round, what progress reads of its release, in one query and without its estimates: the
    released reports, and whether its refusals may be counted (releases.refusals_countable)."""
    if not round_ids:
        return {}
    rows = (
        Release.objects.filter(round_id__in=round_ids)
        .annotate(
            batches_text=KeyTextTransform("batches", "content"),
            any_suppressed=Case(When(_SUPPRESSED, then=Value(True)), default=Value(False), output_field=BooleanField()),
        )
        .values_list("round_id", "content__reports", "content__epsilon_spent", "any_suppressed")
    )
    return {
        round_id: {"reports": reports or 0, "countable": not spent or not any_suppressed}
        for round_id, reports, spent, any_suppressed in rows
    }


def _round_timing(round_: Round, shards_done: int) -> tuple[float | None, float | None]:
    """(seconds since the round started, or until it finished; seconds left if shards keep their pace).

    Shards run in any order at about the same speed, so the time left is the elapsed time scaled
    by the shards remaining over those done. Before a shard is done (or once the round ended)
    there is no estimate: None.
    """
    if round_.started_at is None:
        return None, None
    elapsed = max(((round_.finished_at or timezone.now()) - round_.started_at).total_seconds(), 0.0)
    if round_.is_finished or not shards_done:
        return elapsed, None
    return elapsed, elapsed * max(round_.shards_total - shards_done, 0) / shards_done
