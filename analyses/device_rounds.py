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
says nothing unless it answers. Progress is what the aggregators know: reports received and not
yet verified, reports accepted so far, and uploads rejected by reason.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.db.models import Sum
from django.utils import timezone

from aggregation.issuer import issuer_public_key
from aggregation.models import CollectionRules, LeaderShare, PendingReport
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

    ``devices_answered`` counts the reports accepted: the shares stored while the collection is
    open, the released batches' reports once it is released (the shares are deleted then).
    ``reports_pending``: received and not yet verified (verification runs about once a second
    with a Celery worker, and always before the release).
    """
    window = CollectionWindow.objects.filter(task_key=round_.task_key).first()
    release = getattr(round_, "release", None) if round_.status == Round.Status.RELEASED else None
    if release is not None:
        accepted = release.content["reports"]  # the released batches: a suppressed one's size stays hidden
    else:
        stored = LeaderShare.objects.filter(collection__key=round_.task_key).aggregate(reports=Sum("reports"))
        accepted = stored["reports"] or 0
    rules = CollectionRules.objects.filter(key=round_.task_key).first()
    return {
        "status": round_.status,
        "shards_total": 0,
        "shards_done": 0,
        "devices_answered": accepted,
        # Devices refuse on their own and tell no one: the server cannot count refusals.
        "devices_not_answering": {},
        "error": round_.error,
        "elapsed_seconds": _elapsed(round_),
        "eta_seconds": None,  # devices answer when they fetch the task: there is no pace to extrapolate
        "reports_accepted": accepted,
        "reports_pending": PendingReport.objects.filter(collection_key=round_.task_key).count(),
        "reports_rejected": rejections(round_.task_key),
        "collection": {
            "open": bool(window and window.closed_at is None and rules and not rules.closed),
            "opened_at": window.opened_at if window else None,
            "closes_at": window.closes_at if window else None,
            "closed_at": window.closed_at if window else None,
        },
    }


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
