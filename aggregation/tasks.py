"""Celery task of the aggregators: verify a collection's pending uploads (aggregation.ingest)."""

from __future__ import annotations

from celery import shared_task
from django.db import OperationalError

from aggregation.helper_client import HelperUnavailable
from aggregation.ingest import INGEST_TASK, reports_ingest

# Reports one run verifies before it sends the rest to a fresh run (about 15 s of checks), so
# that a backlog never holds a worker near its time limit (CELERY_TASK_TIME_LIMIT).
RUN_LIMIT = 10_000


@shared_task(
    name=INGEST_TASK,
    acks_late=True,
    reject_on_worker_lost=True,
    # The helper not answering is retried too: the job's rows wait, assigned, for the next run.
    autoretry_for=(OperationalError, HelperUnavailable),
    retry_backoff=2,
    retry_backoff_max=30,
    max_retries=5,
)
def ingest_reports(collection_key: str) -> int:
    """Idempotent: a pending report is verified once (its row is deleted in the same transaction)."""
    result = reports_ingest(collection_key=collection_key, limit=RUN_LIMIT)
    if result.verified >= RUN_LIMIT:
        ingest_reports.delay(collection_key)
    return result.verified
