"""Rounds on fleets of real devices: a collection window instead of shard tasks.

A round on a ``devices`` fleet starts as any other (round_start: the recipe's batch rules go to
both aggregators) and opens a CollectionWindow: the task its devices fetch over HTTP
(devices.api). Dispatch finds no shard and marks the round running. Devices decide, answer and
upload on their own (pfs_device.sdk). An upload is stored as received (aggregation.intake) and
verified later in bulk (aggregation.ingest), which stores the accepted shares summed per chunk.
The analyst closes the window (``round_close``), or the reaper does at its deadline; closing
stops the leader receiving reports and sends aggregate_round, which verifies what is still
pending and releases as for a simulated round.

The server never learns which devices refused or why: a device decides on its own ledger and
says nothing unless it answers. Progress is what the aggregators know, as a release would show
it: reports accepted in batches that reached their minimum cohort, and uploads rejected by reason.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.db.models import Max, Sum
from django.utils import timezone

from aggregation.issuer import issuer_public_key
from aggregation.models import CollectionRules, LeaderShare
from aggregation.reports import collection_close, rejections
from analyses.models import Round
from analyses.rules.roles import check_may_run
from analyses.task_names import AGGREGATE_ROUND
from devices.models import CollectionWindow, Enrollment
from pfs_base.errors import Conflict
from pfs_base.task_queue import enqueue
from pfs_device.decision import DeviceTask


def window_open(round_: Round, task: DeviceTask) -> CollectionWindow | None:
    """Offer ``task``, a new round's, to its fleet's real devices; None for a simulated fleet. Idempotent."""
    analysis = round_.recipe.analysis
    if not analysis.fleet.is_real:
        return None
    # The task commits to the collection's token key: the one key every device must be served.
    task = dataclasses.replace(task, token_key=issuer_public_key(round_.task_key).digest)
    enrollment = Enrollment.objects.filter(fleet=analysis.fleet, analysis_identifier=analysis.identifier).first()
    # The snapshot the fleet was enrolled with, as a simulated fleet's devices hold it: a task
    # naming another one is refused on the device (policy_snapshot).
    snapshot = enrollment.snapshot if enrollment is not None else analysis.snapshot
    window, _ = CollectionWindow.objects.get_or_create(
        round_pk=round_.pk,
        defaults={
            "fleet": analysis.fleet,
            "task_key": round_.task_key,
            "task": task.audit_json(),
            "snapshot": snapshot,
        },
    )
    return window


def is_device_round(round_: Round) -> bool:
    return round_.recipe.analysis.fleet.is_real


def round_close(*, round_: Round, user: AbstractBaseUser | None, at: datetime | None = None) -> Round:
    """Close the collection window of a round on real devices, or set its deadline.

    With ``at`` in the future only the deadline is set; otherwise the aggregators stop accepting
    reports at once and the round is aggregated. Closing a closed window again sends the
    aggregation again (idempotent), so a lost task can be replaced. A round on a simulated fleet,
    or one that has finished, cannot be closed (Conflict).
    """
    if user is not None:  # the reaper closes at the deadline; a person must own the analysis
        check_may_run(user, round_.recipe.analysis)
    with transaction.atomic():
        locked = Round.objects.select_for_update().select_related("recipe__analysis__fleet").get(pk=round_.pk)
        if not is_device_round(locked):
            raise Conflict("Only a round on a fleet of real devices is closed by hand; a simulated round ends itself.")
        if locked.is_finished:
            raise Conflict(f"Round {locked.pk} is already {locked.get_status_display().lower()}.")
        window = CollectionWindow.objects.select_for_update().get(task_key=locked.task_key)
        now = timezone.now()
        if at is not None and at > now and window.closed_at is None:
            window.closes_at = at
            window.save(update_fields=["closes_at"])
            return locked
        if window.closed_at is None:
            window.closed_at = now
            window.save(update_fields=["closed_at"])
        collection_close(collection_key=locked.task_key)
        if locked.status == Round.Status.QUEUED:
            # Dispatch has not run yet; when it does it finds the round running and sends nothing.
            locked.status = Round.Status.RUNNING
            locked.started_at = now
            locked.save(update_fields=["status", "started_at"])
        enqueue(AGGREGATE_ROUND, locked.pk)
    return locked


def round_progress_devices(round_: Round) -> dict[str, Any]:
    """Progress of a round on real devices, in round_progress's shape, from what the aggregators hold.

    ``devices_answered`` and ``reports_accepted`` count only what a release would show: while the
    collection runs, the accepted reports of the batches that have reached their minimum cohort
    (reports_releasable); once released, the released batches' reports. A batch below its minimum
    cohort adds nothing to any count, live or after, so no difference of counts gives its size
    (docs/architecture.md, "Nothing released is not a release"). Reports received and not yet
    verified are not counted for the analyst: they are not attributed to a batch yet.
    """
    window = CollectionWindow.objects.filter(task_key=round_.task_key).first()
    release = round_release(round_)
    if release is not None:
        accepted = release.content["reports"]  # the released batches: a suppressed one's size stays hidden
        charged = bool(release.content.get("epsilon_spent")) or accepted > 0
    else:
        accepted = reports_releasable([round_.task_key])[round_.task_key]
        charged = LeaderShare.objects.filter(collection__key=round_.task_key, reports__gt=0).exists()
    rules = CollectionRules.objects.filter(key=round_.task_key).first()
    return {
        "status": round_.status,
        "shards_total": 0,
        "shards_done": 0,
        "devices_answered": accepted,
        "devices_charged": charged,  # some device answered (spent budget), however few: never how many
        # Devices refuse on their own and tell no one: the server cannot count refusals.
        "devices_not_answering": {},
        "error": round_.error,
        "elapsed_seconds": _elapsed(round_),
        "eta_seconds": None,  # devices answer when they fetch the task: there is no pace to extrapolate
        "reports_accepted": accepted,
        # Rejected reports are in no batch: their counts say nothing of a batch's size.
        "reports_rejected": rejections(round_.task_key),
        "collection": {
            "open": bool(window and window.closed_at is None and rules and not rules.closed),
            "opened_at": window.opened_at if window else None,
            "closes_at": window.closes_at if window else None,
            "closed_at": window.closed_at if window else None,
        },
    }


def round_release(round_: Round) -> Any:
    """The round's Release once it is released or withheld, else None."""
    if round_.status not in (Round.Status.RELEASED, Round.Status.WITHHELD):
        return None
    return getattr(round_, "release", None)


def reports_releasable(task_keys: list[str]) -> dict[str, int]:
    """By collection, the reports held in the batches that have reached their minimum cohort.

    A batch's minimum cohort is the one the aggregators apply (aggregation.aggregators): the
    largest of its shares' and its rules', and of the helper's floor. A batch below it counts 0:
    reports only add up, so a batch that ends suppressed for its size counted 0 at every moment.
    """
    floors = dict(CollectionRules.objects.filter(key__in=task_keys).values_list("key", "min_cohort"))
    floor = settings.PFS_HELPER_MIN_COHORT_FLOOR
    batches = (
        LeaderShare.objects.filter(collection__key__in=task_keys)
        .values("collection__key", "collection__batch_key")
        .annotate(reports=Sum("reports"), min_cohort=Max("min_cohort"))
    )
    totals = dict.fromkeys(task_keys, 0)
    for batch in batches:
        key = batch["collection__key"]
        if batch["reports"] >= max(batch["min_cohort"], floors.get(key, 0), floor, 1):
            totals[key] += batch["reports"]
    return totals


def _elapsed(round_: Round) -> float | None:
    if round_.started_at is None:
        return None
    return max(((round_.finished_at or timezone.now()) - round_.started_at).total_seconds(), 0.0)


@dataclass
class WindowsReaped:
    closed: list[int] = field(default_factory=list)  # rounds closed at their deadline
    resent: list[int] = field(default_factory=list)  # closed rounds whose aggregation was sent again


def device_rounds_reap(*, now: datetime, stuck_after: timedelta) -> WindowsReaped:
    """Close the windows past their deadline; send again the aggregation of rounds closed long ago.

    A device round waiting for reports is not stuck, however long its window: the reaper leaves
    it alone until its deadline or its close. The window of a round that ended otherwise (failed,
    cancelled) is closed, and its collection with it.
    """
    reaped = WindowsReaped()
    due = CollectionWindow.objects.filter(closed_at__isnull=True, closes_at__lte=now)
    for round_ in _rounds_of(due.exclude(round_pk__in=_finished_round_ids())):
        round_close(round_=round_, user=None)
        reaped.closed.append(round_.pk)
    stale = CollectionWindow.objects.filter(closed_at__lt=now - stuck_after)
    for round_ in _rounds_of(stale.exclude(round_pk__in=_finished_round_ids()).exclude(round_pk__in=reaped.closed)):
        round_close(round_=round_, user=None)
        reaped.resent.append(round_.pk)
    ended = CollectionWindow.objects.filter(closed_at__isnull=True, round_pk__in=_finished_round_ids())
    for task_key in ended.values_list("task_key", flat=True):
        collection_close(collection_key=task_key)
    ended.update(closed_at=now)
    return reaped


def _finished_round_ids():
    return Round.objects.filter(status__in=Round.TERMINAL).values("pk")


def _rounds_of(windows) -> list[Round]:
    return list(Round.objects.filter(pk__in=windows.values("round_pk")).order_by("pk"))
