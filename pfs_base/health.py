"""Is this process ready to serve: the database, Redis, a Celery worker, and the task queue's depth.

/readyz (pfs_base.probes) and `manage.py worker_health` read these. Each check is bounded by
PFS_READYZ_TIMEOUT seconds and reports its failure instead of raising: a probe answers, it never
hangs or crashes.
"""

from __future__ import annotations

import time
from typing import Any

import redis
from celery import current_app
from django.conf import settings
from django.db import connections

# kombu's Redis transport keeps a queue as a list named after it, and one list per priority step
# above 0 named "<queue>\x06\x16<step>" (kombu.transport.redis: PRIORITY_STEPS, sep).
_PRIORITY_SEPARATOR, _PRIORITY_STEPS = "\x06\x16", (3, 6, 9)


def readiness() -> tuple[bool, dict[str, Any]]:
    """(ready, what each check found). Not ready when the database, Redis or, with tasks on
    Celery, every worker fails to answer. The queue's depth is reported, not judged: a long queue
    calls for more workers, not for taking this web process out of its load balancer."""
    timeout = settings.PFS_READYZ_TIMEOUT
    if settings.PFS_ROLE == "helper":  # the helper's own service: its store is all it needs
        check = database_check("helper")
        return check["ok"], {"database": check}
    checks: dict[str, Any] = {"database": database_check()}
    # The token issuer's own store (pfs_base.db_router): without it no device gets a token.
    checks["issuer_database"] = database_check("issuer")
    # The helper is another party's service, reached over HTTP: while it is down the leader still
    # takes uploads (they wait, and are verified once it answers), so it is no readiness check here.
    if settings.REDIS_URL:
        checks["redis"] = redis_check(settings.REDIS_URL, timeout=timeout)
    if settings.PFS_TASK_MODE == "celery":
        if checks["redis"]["ok"]:
            checks["workers"] = workers_check(timeout=timeout)
            checks["queue"] = {"ok": True, "name": settings.CELERY_TASK_DEFAULT_QUEUE, "depth": queue_depth()}
        else:
            checks["workers"] = {"ok": False, "error": "not asked: the broker (Redis) does not answer"}
    else:
        checks["tasks"] = {"ok": True, "mode": settings.PFS_TASK_MODE}  # run in-process: no worker to ask
    return all(check["ok"] for check in checks.values()), checks


def database_check(alias: str = "default") -> dict[str, Any]:
    started = time.perf_counter()
    try:
        with connections[alias].cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except Exception as error:  # any failure means not ready; the probe says which
        return {"ok": False, "error": _describe(error)}
    return {"ok": True, "ms": _ms_since(started)}


def redis_check(url: str, *, timeout: float) -> dict[str, Any]:
    started = time.perf_counter()
    try:
        with redis.Redis.from_url(url, socket_connect_timeout=timeout, socket_timeout=timeout) as client:
            client.ping()
    except redis.RedisError as error:
        return {"ok": False, "error": _describe(error)}
    return {"ok": True, "ms": _ms_since(started)}


def workers_check(*, timeout: float, destination: list[str] | None = None) -> dict[str, Any]:
    """Ping the workers (or the ones named): ok when one answers. Returns at the first answer."""
    started = time.perf_counter()
    try:
        replies = current_app.control.ping(destination=destination, timeout=timeout, limit=1)
    except Exception as error:  # the broker refused or dropped the connection: no worker answered
        return {"ok": False, "error": _describe(error)}
    answered = sorted(name for reply in replies for name in reply)
    if not answered:
        return {"ok": False, "error": f"no Celery worker answered a ping within {timeout:g} s"}
    return {"ok": True, "answered": answered, "ms": _ms_since(started)}


def queue_depth() -> int | None:
    """Task messages waiting in the broker for the default queue; None when tasks run in-process
    or Redis does not answer. Read straight from Redis, bounded by the probe's timeout (a kombu
    connection would retry a broker that is down)."""
    if settings.PFS_TASK_MODE != "celery":
        return None
    queue = settings.CELERY_TASK_DEFAULT_QUEUE
    keys = [queue] + [f"{queue}{_PRIORITY_SEPARATOR}{step}" for step in _PRIORITY_STEPS]
    timeout = settings.PFS_READYZ_TIMEOUT
    try:
        with redis.Redis.from_url(
            settings.CELERY_BROKER_URL, socket_connect_timeout=timeout, socket_timeout=timeout
        ) as r:
            with r.pipeline(transaction=False) as pipe:
                for key in keys:
                    pipe.llen(key)
                return sum(pipe.execute())
    except redis.RedisError:
        return None


def _describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"[:500]


def _ms_since(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 1)
