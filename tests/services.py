"""Real services for integration and browser tests. A missing service fails the test, never skips it.

`make test` (scripts/with-test-services.sh) finds or starts Redis and Chromium and exports
REDIS_URL and PFS_CHROMIUM; run by hand, export them yourself.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import kombu.exceptions
import pytest
import redis
from django.conf import settings
from django.db import connections

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


def test_database_url(alias: str = "default") -> str:
    """The URL of the database pytest-django created, for the worker process to share."""
    db = connections[alias].settings_dict
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
            "ISSUER_DATABASE_URL": test_database_url("issuer"),
            "HELPER_DATABASE_URL": test_database_url("helper"),
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
            try:
                answered = celery_app.control.ping(destination=[f"{self.hostname}@{os.uname().nodename}"], timeout=0.5)
            except (redis.RedisError, kombu.exceptions.OperationalError, OSError):
                # A broker that a fault test restarted: this process's pooled connections to it are
                # dead, and a ping on one fails instead of reconnecting. New ones, and ask again.
                _broker_switch(celery_app.conf.broker_url)
                answered = None
            if answered:
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


class PrivateRedis:
    """A redis-server of the test's own, configured like the deployment's (nothing kept on disk),
    so that a test can restart it without touching the Redis other tests use."""

    def __init__(self, tmp_path: Path) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            pytest.fail(
                "redis-server is not installed: the Redis-restart test starts its own (apt-get install redis-server)"
            )
        self.binary, self.dir = binary, tmp_path
        with socket.socket() as probe:  # a free port for this test's server
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(
            [
                self.binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.dir),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                redis.Redis.from_url(self.url, socket_connect_timeout=0.2).ping()
                return
            except redis.RedisError:
                time.sleep(0.05)
        pytest.fail(f"the test's redis-server on port {self.port} did not start")

    def kill(self) -> None:
        """SIGKILL: every queued message, unacknowledged delivery and chord counter is gone."""
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None


@contextmanager
def celery_broker(url: str):
    """Send this process's tasks through the broker at ``url`` (Celery caches its connection pools)."""
    previous = celery_app.conf.broker_url
    _broker_switch(url)
    try:
        yield
    finally:
        _broker_switch(previous)


def _broker_switch(url: str) -> None:
    # Forget the cached pools, without closing them: kombu keeps one pool per broker URL and hands
    # the same one back when this process switches back.
    celery_app.conf.broker_url = url
    celery_app._pool = None
    celery_app.amqp._producer_pool = None


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Background:
    """A shell command running in its own process group (a server, a worker), its output in a file."""

    def __init__(self, command: str, *, cwd: Path, env: dict[str, str], log_path: Path) -> None:
        self.command, self.log_path = command, log_path
        self.log = open(log_path, "w")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(
            ["bash", "-c", command],
            cwd=cwd,
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # stop() ends its children (gunicorn's workers, Celery's pool) with it
        )

    def alive(self) -> bool:
        return self.process.poll() is None

    def output(self) -> str:
        self.log.flush()
        return self.log_path.read_text(errors="replace")

    def wait_for(self, ready, *, timeout: float, what: str) -> None:
        """Poll ``ready()`` until it is true; fail with the command's output if it exits or time runs out."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if ready():
                return
            if not self.alive():
                pytest.fail(
                    f"`{self.command}` exited with {self.process.returncode} before {what}:\n{self.output()[-4000:]}"
                )
            time.sleep(0.3)
        pytest.fail(f"`{self.command}`: no {what} within {timeout:g} s:\n{self.output()[-4000:]}")

    def stop(self, timeout: float = 30) -> None:
        if self.alive():
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        if not self.log.closed:
            self.log.close()

    def __del__(self) -> None:
        # A test that failed before stopping its process must not leave it serving.
        if getattr(self, "process", None) is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)


def http_status(url: str, *, timeout: float = 5.0, headers: dict[str, str] | None = None) -> int | None:
    """The status a GET of ``url`` answers (redirects not followed), or None if nothing answers."""

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None

    opener = urllib.request.build_opener(NoRedirect)
    try:
        with opener.open(urllib.request.Request(url, headers=headers or {}), timeout=timeout) as answer:
            return answer.status
    except urllib.error.HTTPError as error:
        return error.code
    except OSError:
        return None
