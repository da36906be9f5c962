"""Where tasks run: a Celery worker over Redis, a background thread in-process, or inline.

PFS_TASK_MODE (settings) chooses: "celery" when REDIS_URL is set; "thread" by default, so the
embedded default serves pages while a round runs; "sync" runs the task in the caller (unit tests).
Always called through transaction.on_commit, so a task never sees uncommitted rows.

Tasks are named, never imported: services sit below the tasks that call them, so they send a
task by its stable ``name=`` (the one queued messages and the beat schedule carry). Each app's
AppConfig imports its tasks module, so every name is registered before anything is sent.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from celery import Task, current_app
from django.conf import settings
from django.db import close_old_connections, connections, transaction

# One background thread: the embedded default runs one round at a time, like a single worker.
_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="pfs-task")


def enqueue(task_name: str, *args: object) -> None:
    """Run the task named ``task_name`` with ``args`` once the current transaction commits."""
    transaction.on_commit(lambda: _send(task_named(task_name), args))


def task_named(name: str) -> Task:
    """The registered task called ``name`` (KeyError for a name no app registered)."""
    return current_app.tasks[name]


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
