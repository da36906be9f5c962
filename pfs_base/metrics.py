"""Prometheus metrics, counted where each event happens (docs/deployment.md lists them).

Services and tasks call the small functions below; nothing else knows about Prometheus. A count
that follows a database change is made when its transaction commits: a round whose start rolled
back never started.

With PROMETHEUS_MULTIPROC_DIR set (gunicorn's workers, Celery's pool, beat: every process of a
host), each process writes its counts into a file of that folder and ``/metrics`` adds them up, so
a scrape sees what the worker did as well as the web process that answers it. Without it, a
process's own registry answers (runserver with in-process tasks, the tests). prometheus_client reads
the variable when it is first imported: this module is imported after the settings, never by them.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Mapping

from django.db import transaction
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.multiprocess import MultiProcessCollector

# No "_created" series beside every counter: Prometheus detects resets without them.
disable_created_metrics()

ROUNDS = Counter(
    "pfs_rounds", "Rounds by event: started, released, withheld (nothing released), failed, cancelled.", ["event"]
)
TASK_SECONDS = Histogram(
    "pfs_task_duration_seconds",
    "Run time of Celery tasks by name; task=analyses.tasks.run_shard is one shard of a round.",
    ["task"],
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600),
)
TASKS = Counter("pfs_tasks", "Celery tasks finished, by name and state (SUCCESS, FAILURE, RETRY).", ["task", "state"])
REPORTS_ACCEPTED = Counter("pfs_reports_accepted", "Uploaded device reports both aggregators accepted.")
REPORTS_REJECTED = Counter(
    "pfs_reports_rejected",
    "Uploaded device reports an aggregator rejected, by aggregator and reason.",
    ["aggregator", "reason"],
)
HELPER_JOB_REPORTS = Counter(
    "pfs_helper_job_reports",
    "Reports in the helper's aggregation jobs, as the helper's own service decided them: accepted, or the reason refused.",
    ["outcome"],
)
BUDGET_REFUSALS = Counter(
    "pfs_budget_refusals",
    "Devices of a simulated fleet that refused a round, by reason: analysis_budget (check 1), "
    "field_budget (check 2), min_cohort (check 3), query_class, policy_snapshot.",
    ["reason"],
)
HTTP_SECONDS = Histogram(
    "pfs_http_request_duration_seconds",
    "Time to answer an HTTP request, by route (the URL pattern), method and status.",
    ["route", "method", "status"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)

# Devices that were not sampled did not refuse anything.
_NOT_REFUSALS = frozenset({"answered", "not_sampled"})
# When each running task started, by task id (a worker process runs one at a time; in-process
# tasks can nest, hence the map).
_task_started_at: dict[str, float] = {}


def round_counted(event: str) -> None:
    transaction.on_commit(lambda: ROUNDS.labels(event).inc())


def reports_counted(*, accepted: int = 0, rejected: Mapping[tuple[str, str], int] | None = None) -> None:
    """``rejected`` maps (aggregator, reason) to a count, as aggregation.reports.rejections_add takes it."""

    def count() -> None:
        if accepted:
            REPORTS_ACCEPTED.inc(accepted)
        for (aggregator, reason), number in (rejected or {}).items():
            REPORTS_REJECTED.labels(aggregator, reason).inc(number)

    transaction.on_commit(count)


def helper_job_counted(*, accepted: int, rejected: Mapping[str, int]) -> None:
    """One aggregation job at the helper's service: ``rejected`` maps a reason to a count."""
    if accepted:
        HELPER_JOB_REPORTS.labels("accepted").inc(accepted)
    for reason, number in rejected.items():
        HELPER_JOB_REPORTS.labels(reason).inc(number)


def budget_refusals_counted(outcomes: Mapping[str, int]) -> None:
    """``outcomes``: devices by decision label, as a shard's run records them."""
    refusals = {reason: count for reason, count in outcomes.items() if reason not in _NOT_REFUSALS and count}

    def count() -> None:
        for reason, number in refusals.items():
            BUDGET_REFUSALS.labels(reason).inc(number)

    if refusals:
        transaction.on_commit(count)


def http_request_observed(*, route: str, method: str, status: int, seconds: float) -> None:
    HTTP_SECONDS.labels(route, method, str(status)).observe(seconds)


def task_started(task_id: str) -> None:
    _task_started_at[task_id] = time.perf_counter()


def task_finished(task_id: str, *, name: str, state: str | None) -> None:
    started = _task_started_at.pop(task_id, None)
    if started is not None:
        TASK_SECONDS.labels(name).observe(time.perf_counter() - started)
    TASKS.labels(name, state or "UNKNOWN").inc()


def queue_depth_collector(depth: Callable[[], int | None], queue: str) -> object:
    """A collector reading the task queue's depth when scraped (a value of the broker, not a count)."""

    class QueueDepth:
        def collect(self) -> Iterable[GaugeMetricFamily]:
            family = GaugeMetricFamily("pfs_task_queue_depth", "Task messages waiting in the broker.", labels=["queue"])
            value = depth()
            if value is not None:
                family.add_metric([queue], value)
            yield family

    return QueueDepth()


def exposition(*extra_collectors: object) -> tuple[bytes, str]:
    """The text a Prometheus scrape reads: every process's counts, and the ``extra_collectors``."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        counts = CollectorRegistry()
        MultiProcessCollector(counts)
    else:
        counts = REGISTRY
    extra = CollectorRegistry()
    for collector in extra_collectors:
        extra.register(collector)
    return generate_latest(counts) + generate_latest(extra), CONTENT_TYPE_LATEST
