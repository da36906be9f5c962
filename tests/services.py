"""Real services for integration and browser tests. A missing service fails the test, never skips it.

`make test` (scripts/with-test-services.sh) finds or starts Redis and Chromium and exports
REDIS_URL and PFS_CHROMIUM; run by hand, export them yourself.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis
from django.conf import settings
from django.db import connection

from pfs_web.celery import app as celery_app

ROOT = Path(__file__).resolve().parent.parent


def redis_url_or_fail() -> str:
    url = os.environ.get("REDIS_URL")
    if not url:
        pytest.fail("REDIS_URL is not set: run `make test`, which finds or starts Redis, or export REDIS_URL")
    try:
        redis.Redis.from_url(url, socket_connect_timeout=2).ping()
    except redis.RedisError as error:
        pytest.fail(f"Redis at {url} does not answer: {error}")
    return url


def test_database_url() -> str:
    """The URL of the database pytest-django created, for the worker process to share."""
    db = connection.settings_dict
    if db["ENGINE"] == "django.db.backends.sqlite3":
        return f"sqlite:///{db['NAME']}"
    user = db["USER"] or ""
    password = f":{db['PASSWORD']}" if db["PASSWORD"] else ""
    return f"postgres://{user}{password}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


class Worker:
    """A `celery worker` process consuming from Redis against the test database."""

    def __init__(self, redis_url: str, log_path: Path, *, queue: str = "celery", extra_env: dict | None = None) -> None:
        self.redis_url = redis_url
        self.log_path = log_path
        self.hostname = f"pfs-test-{queue}-{os.getpid()}"
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "pfs_web.settings",
            "SECRET_KEY": "test-worker-secret",
            "DEBUG": "0",
            "DATABASE_URL": test_database_url(),
            "REDIS_URL": redis_url,
            "PFS_TASK_MODE": "celery",
            "PFS_TASK_QUEUE": queue,
            **(extra_env or {}),
        }
        self.log = open(log_path, "w")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "pfs_web",
                "worker",
                "--loglevel=INFO",
                "--concurrency=2",
                "--hostname",
                f"{self.hostname}@%h",
                "--without-gossip",
                "--without-mingle",
                "--queues",
                queue,
            ],
            cwd=ROOT,
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group, so a test can kill it whole
        )

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                pytest.fail(
                    f"the Celery worker exited with {self.process.returncode}:\n{self.log_path.read_text()[-3000:]}"
                )
            if celery_app.control.ping(destination=[f"{self.hostname}@{os.uname().nodename}"], timeout=0.5):
                return
        pytest.fail(f"the Celery worker did not answer within {timeout} s:\n{self.log_path.read_text()[-3000:]}")

    def kill(self) -> None:
        """SIGKILL the worker and its pool processes at once: no cleanup, no acknowledgements."""
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()
        self.log.close()

    def __del__(self) -> None:
        # A test that failed before stopping its worker must not leave one consuming.
        if getattr(self, "process", None) is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)

    def stop(self) -> None:
        if self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.close()


def use_celery_worker(settings_fixture) -> None:
    """Route this test's tasks to the worker instead of running them inline."""
    settings_fixture.PFS_TASK_MODE = "celery"
    celery_app.conf.task_always_eager = False


def restore_inline_tasks() -> None:
    celery_app.conf.task_always_eager = settings.CELERY_TASK_ALWAYS_EAGER


def chromium_or_fail() -> str:
    path = os.environ.get("PFS_CHROMIUM", "/usr/bin/chromium")
    if not Path(path).exists():
        pytest.fail(f"Chromium not found at {path}: run `make test` (installs it in CI) or set PFS_CHROMIUM")
    return path
