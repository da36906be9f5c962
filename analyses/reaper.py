"""The reaper: rounds whose tasks were lost are resumed, or failed once they are too old.

A round is stuck when it is neither released nor failed and nothing has happened for
``stuck_after``: no shard answered since (devices.ShardRun), and it did not start since. Resuming
sends dispatch_round again. That is safe because every step is idempotent: shards that already
answered return at once (no budget is spent twice), and a released round stays released. A round
older than ``fail_after`` is failed instead, with the reason, so it stops holding an analyst's
attention. An adaptive run waiting on a round that has finished (its wake-up task was lost) is
advanced again; that too is idempotent. A round on real devices is never stuck while its
collection window is open: the reaper closes it at its deadline (analyses.device_rounds). Run it from cron (`manage.py reap_rounds`) or Celery beat (the task
analyses.tasks.reap_rounds).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db.models import Max
from django.utils import timezone

from analyses.adaptive.chain import adaptive_runs_wake
from analyses.device_rounds import device_rounds_reap
from analyses.models import AdaptiveRun, Round
from analyses.services.rounds import round_fail
from analyses.task_names import DISPATCH_ROUND
from devices.models import Fleet, ShardRun
from pfs_base.task_queue import enqueue


@dataclass
class Reaped:
    resumed: list[int] = field(default_factory=list)
    failed: list[int] = field(default_factory=list)
    advanced: list[int] = field(default_factory=list)  # adaptive runs woken again
    closed: list[int] = field(default_factory=list)  # rounds on real devices closed (deadline) or re-aggregated


def rounds_reap(*, stuck_after: timedelta, fail_after: timedelta, now: datetime | None = None) -> Reaped:
    """Resume every stuck round younger than ``fail_after``; fail the older ones."""
    if stuck_after <= timedelta(0) or fail_after <= timedelta(0):
        raise ValueError("stuck_after and fail_after must be positive")
    now = now or timezone.now()
    reaped = Reaped()
    candidates = (
        Round.objects.exclude(status__in=Round.TERMINAL)
        .exclude(recipe__analysis__fleet__kind=Fleet.Kind.DEVICES)  # waiting for reports, not stuck: see below
        .filter(created_at__lt=now - stuck_after)
    )
    for round_ in candidates.order_by("pk"):
        if now - _last_activity(round_) < stuck_after:
            continue  # shards are still answering: slow, not stuck
        if now - round_.created_at >= fail_after:
            idle = now - _last_activity(round_)
            round_fail(
                round_id=round_.pk,
                error=f"stuck in {round_.status} with no progress for {idle.total_seconds():,.0f} s; "
                f"failed by the reaper (rounds older than {fail_after.total_seconds():,.0f} s are not resumed)",
            )
            reaped.failed.append(round_.pk)
        else:
            enqueue(DISPATCH_ROUND, round_.pk)
            reaped.resumed.append(round_.pk)
    windows = device_rounds_reap(now=now, stuck_after=stuck_after)
    reaped.closed = windows.closed + windows.resent
    reaped.advanced = _adaptive_runs_stalled(now - stuck_after)
    return reaped


def _adaptive_runs_stalled(finished_before: datetime) -> list[int]:
    """Wake the running adaptive runs whose current round finished before ``finished_before`` and
    that were not advanced (their wake-up was lost)."""
    waiting = AdaptiveRun.objects.filter(
        status=AdaptiveRun.Status.RUNNING,
        current_round__status__in=Round.TERMINAL,
        current_round__finished_at__lt=finished_before,
    )
    woken = list(waiting.order_by("pk").values_list("pk", flat=True))
    adaptive_runs_wake(woken)
    return woken


def _last_activity(round_: Round) -> datetime:
    latest_shard = ShardRun.objects.filter(task_key=round_.task_key).aggregate(at=Max("created_at"))["at"]
    return max(at for at in (round_.created_at, round_.started_at, latest_shard) if at is not None)
