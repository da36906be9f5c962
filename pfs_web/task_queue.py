"""Where tasks run: a Celery worker over Redis, a background thread in-process, or inline.

PFS_TASK_MODE (settings) chooses: "celery" when REDIS_URL is set; "thread" by default, so the
embedded default serves pages while a round runs; "sync" runs the task in the caller (unit tests).
Always called through transaction.on_commit, so a task never sees uncommitted rows.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from celery import Task
from django.conf import settings
from django.db import close_old_connections, connections, transaction

# One background thread: the embedded default runs one round at a time, like a single worker.
_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="pfs-task")


def enqueue(task: Task, *args: object) -> None:
    transaction.on_commit(lambda: _send(task, args))


def _send(task: Task, args: tuple) -> None:
    if settings.PFS_TASK_MODE == "celery":
        task.delay(*args)
    elif settings.PFS_TASK_MODE == "thread":
        _executor.submit(_run_in_thread, task, args)
    else:
        task.apply(args=args, throw=True)


def _run_in_thread(task: Task, args: tuple) -> None:
    close_old_connections()
    try:
        task.apply(args=args)
    finally:
        connections.close_all()
