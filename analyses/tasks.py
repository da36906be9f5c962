"""Celery tasks of a round and of adaptive runs: thin interfaces that take ids and call one service each.

dispatch_round -> chord(run_shard for each shard) -> aggregate_round. Each is idempotent: a shard
that already answered is a no-op (devices.ShardRun), and a round already released stays as it is.

Every task has a stable ``name=`` (analyses.task_names): queued messages and the beat schedule
carry it. This module sits on top: it imports services; services send tasks by name.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from celery import chord, shared_task
from django.conf import settings
from django.db import OperationalError

from aggregation.helper_client import HelperUnavailable
from analyses import task_names
from analyses.adaptive import chain, comparison
from analyses.reaper import rounds_reap
from analyses.services import rounds

logger = logging.getLogger(__name__)

# Only transient database trouble (a lock timeout, a dropped connection) is retried; a refusal
# or a bug is not.
_RETRY = {"autoretry_for": (OperationalError,), "retry_backoff": 2, "retry_backoff_max": 30, "max_retries": 5}
# A helper that does not answer (after its client's own attempts, about half a minute): with Celery
# a round waits for it about 20 minutes, a task retried every 30 s; in-process there is no queue to
# wait in (a retry would run at once), so the round fails, saying why.
_HELPER_RETRIES = 40 if settings.PFS_TASK_MODE == "celery" else 0
_HELPER_COUNTDOWN = 30


def _helper_retry_or_fail(task, round_id: int, unavailable: HelperUnavailable) -> None:
    if task.request.retries < _HELPER_RETRIES:
        raise task.retry(exc=unavailable, countdown=_HELPER_COUNTDOWN, max_retries=_HELPER_RETRIES) from unavailable
    rounds.round_fail(round_id=round_id, error=f"the helper aggregator did not answer: {unavailable}")


@shared_task(name=task_names.DISPATCH_ROUND, bind=True, acks_late=True, reject_on_worker_lost=True, **_RETRY)
def dispatch_round(self, round_id: int) -> None:
    try:
        shard_ids = rounds.round_dispatch(round_id=round_id)
    except HelperUnavailable as unavailable:
        _helper_retry_or_fail(self, round_id, unavailable)
        return
    if not shard_ids:
        return
    header = [run_shard.si(round_id, shard_id) for shard_id in shard_ids]
    try:
        chord(header)(aggregate_round.si(round_id).on_error(fail_round.si(round_id)))
    except Exception as error:
        # In-process mode runs the chord right here; with a broker only sending can fail.
        rounds.round_fail(round_id=round_id, error=f"round could not run: {error}")
        raise


@shared_task(name=task_names.RUN_SHARD, bind=True, acks_late=True, reject_on_worker_lost=True, **_RETRY)
def run_shard(self, round_id: int, shard_id: int) -> None:
    try:
        rounds.round_shard_run(round_id=round_id, shard_id=shard_id)
    except HelperUnavailable as unavailable:  # the shard's transaction rolled back: nothing spent
        _helper_retry_or_fail(self, round_id, unavailable)


# How long the aggregation waits for shards still being redelivered before it fails the round.
_PENDING_RETRIES, _PENDING_COUNTDOWN = 90, 2


@shared_task(
    name=task_names.AGGREGATE_ROUND, bind=True, acks_late=True, reject_on_worker_lost=True, max_retries=_PENDING_RETRIES
)
def aggregate_round(self, round_id: int) -> None:
    try:
        rounds.round_aggregate(round_id=round_id)
    except (rounds.ShardsPending, OperationalError) as pending:
        if self.request.retries >= _PENDING_RETRIES:
            rounds.round_fail(round_id=round_id, error=f"aggregation gave up: {pending}")
            return
        raise self.retry(exc=pending, countdown=_PENDING_COUNTDOWN) from pending
    except HelperUnavailable as unavailable:
        # Nothing was released and nothing is lost (the leader's shares and the reports are kept):
        # the round stays running, and the reaper resumes it (docs/architecture.md, the reaper).
        if self.request.retries < _HELPER_RETRIES:
            raise self.retry(exc=unavailable, countdown=_HELPER_COUNTDOWN, max_retries=_HELPER_RETRIES) from unavailable
        logger.warning("round %s waits for the helper aggregator, which did not answer: %s", round_id, unavailable)
    except Exception as error:
        logger.exception("aggregation of round %s failed", round_id)
        rounds.round_fail(round_id=round_id, error=f"aggregation failed: {error}")


@shared_task(name=task_names.FAIL_ROUND)
def fail_round(round_id: int) -> None:
    rounds.round_fail(round_id=round_id, error="a shard task failed; see the worker log")


@shared_task(name=task_names.REAP_ROUNDS)
def reap_rounds() -> dict[str, list[int]]:
    """Celery beat's entry to the reaper (settings.CELERY_BEAT_SCHEDULE)."""
    reaped = rounds_reap(
        stuck_after=timedelta(seconds=settings.PFS_ROUND_STUCK_AFTER),
        fail_after=timedelta(seconds=settings.PFS_ROUND_FAIL_AFTER),
    )
    return {"resumed": reaped.resumed, "failed": reaped.failed, "advanced": reaped.advanced, "closed": reaped.closed}


@shared_task(name=task_names.ADVANCE_ADAPTIVE_RUN, acks_late=True, reject_on_worker_lost=True, **_RETRY)
def advance_adaptive_run(run_id: int) -> None:
    chain.adaptive_advance(run_id=run_id)


@shared_task(name=task_names.COMPARE_ADAPTIVE_RUN, acks_late=True, reject_on_worker_lost=True, **_RETRY)
def compare_adaptive_run(run_id: int) -> None:
    comparison.adaptive_compare(run_id=run_id)
