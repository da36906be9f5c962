"""The one Celery app. Its configuration lives in Django settings under CELERY_*.

Its signals tie tasks into operations: each task's log lines carry its id (pfs_base.logs), its run
time and outcome are counted (pfs_base.metrics), and a worker or beat started without a broker
stops at once instead of consuming from nowhere.
"""

from __future__ import annotations

import os
from contextvars import Token

from celery import Celery
from celery.signals import beat_init, task_postrun, task_prerun, worker_init

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "pfs_web.settings")

app = Celery("pfs_web")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

_log_ids: dict[str, Token] = {}


@worker_init.connect
@beat_init.connect
def _refuse_without_broker(**_: object) -> None:
    from django.conf import settings

    if settings.PFS_TASK_MODE != "celery":
        # SystemExit, not an exception: Celery logs a signal handler's exceptions and carries on,
        # and a worker on the in-memory broker would wait for tasks that never come.
        raise SystemExit(
            f"A Celery worker or beat needs a broker: set REDIS_URL (without it tasks run "
            f"{settings.PFS_TASK_MODE!r} in the web process, PFS_TASK_MODE)."
        )


@task_prerun.connect
def _task_started(task_id: str, **_: object) -> None:
    # Imported here, not above: prometheus_client must load after the settings (pfs_base.metrics).
    from pfs_base import metrics
    from pfs_base.logs import request_id_var

    _log_ids[task_id] = request_id_var.set(task_id)
    metrics.task_started(task_id)


@task_postrun.connect
def _task_finished(task_id: str, task: object, state: str | None = None, **_: object) -> None:
    from pfs_base import metrics
    from pfs_base.logs import request_id_var

    metrics.task_finished(task_id, name=getattr(task, "name", "unknown"), state=state)
    token = _log_ids.pop(task_id, None)
    if token is not None:
        request_id_var.reset(token)
