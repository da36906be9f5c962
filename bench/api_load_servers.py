"""bench/api_load.py's servers: its database with the demo rounds, gunicorn (DEBUG=0) on a free loopback
port, nginx in front of it, and wrk.

The settings are production's with the API's request rates raised far above what the bench sends.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from host import helper_service, process_group_stop  # bench/host.py: this script's folder is on sys.path

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
WRK_INSTALL = "apt-get install -y wrk"
NGINX_INSTALL = "apt-get install -y nginx-light"
GTHREAD_THREADS = 4
# seed_demo's analyst (analyses/management/commands/seed_demo.py).
ANALYST = ("analyst", "analyst-demo-password")
# Far above anything 50 connections on two cores can send: the count is kept, nothing is refused.
UNTHROTTLED = {"PFS_API_USER_RATE": "100000000/second", "PFS_API_ANON_RATE": "100000000/second"}

# Two demo rounds (run in-process while seeding). The first is the one the round endpoints read:
# perplexity in 64 buckets, a batch per locale (5 cohorts).
DEMO_ROUNDS = [
    (
        "demo.metrics",
        {
            "recipeIdentifier": "bench-perplexity-by-locale",
            "query": "select perplexity from ModelMetrics",
            "cohorts": ["locale"],
            "dataTypeContent": {
                "perplexity": {"dataType": "BucketedType", "boundaries": [10 + 90 * i / 62 for i in range(63)]}
            },
            "privacy": {"mechanism": "asymmetric_ohe", "epsilon0": 4.0, "epsilon": 1.0, "delta": 1e-6},
        },
    ),
    (
        "demo.refinement",
        {
            "recipeIdentifier": "bench-perplexity",
            "query": "select perplexity from ModelMetrics",
            "cohorts": [],
            "dataTypeContent": {
                "perplexity": {"dataType": "BucketedType", "boundaries": [10 + 6 * i for i in range(15)]}
            },
            "privacy": {"mechanism": "asymmetric_ohe", "epsilon0": 4.0, "epsilon": 1.0, "delta": 1e-6},
        },
    ),
]


class ToolMissing(RuntimeError):
    pass


def wrk_path() -> str:
    path = shutil.which("wrk")
    if path is None:
        raise ToolMissing(f"wrk is not installed: install it with `{WRK_INSTALL}` (Debian's package), then re-run")
    return path


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def server_env(*, database_url: str, redis_url: str, **extra: str) -> dict[str, str]:
    """The production settings (DEBUG off), PostgreSQL and Redis, with the API's rates raised."""
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "pfs_web.settings",
        "DEBUG": "0",
        "SECRET_KEY": "bench-secret-key-not-for-production",
        "ALLOWED_HOSTS": "127.0.0.1,localhost",
        "DATABASE_URL": database_url,
        "REDIS_URL": redis_url,
        "PFS_TASK_MODE": "celery",  # as deployed; the reads enqueue nothing
        "LOG_LEVEL": "WARNING",
        # Plain HTTP on loopback: urllib's cookie jar (session_cookie) returns no secure cookie over it.
        "SESSION_COOKIE_SECURE": "0",
        "CSRF_COOKIE_SECURE": "0",
        **UNTHROTTLED,
        **extra,
    }


@dataclass(frozen=True)
class ServerConfig:
    worker_class: str  # sync or gthread
    workers: int
    threads: int = 1
    nginx: bool = False  # behind nginx, as gunicorn's documentation deploys it

    @classmethod
    def parse(cls, text: str) -> ServerConfig:
        """'sync:2', 'gthread:4' (GTHREAD_THREADS threads per worker) or 'gthread:2x32'; a '+nginx'
        suffix puts nginx in front."""
        text, plus, proxy = text.partition("+")
        if plus and proxy != "nginx":
            raise argparse.ArgumentTypeError(f"the only proxy is nginx (+nginx), not {proxy!r}")
        kind, _, shape = text.partition(":")
        workers, _, threads = shape.partition("x")
        if kind not in ("sync", "gthread") or not workers.isdigit() or int(workers) < 1:
            raise argparse.ArgumentTypeError(f"a server config reads sync:N, gthread:N or gthread:NxT, not {text!r}")
        if threads and (kind == "sync" or not threads.isdigit() or int(threads) < 1):
            raise argparse.ArgumentTypeError(f"threads (xT) are for gthread workers, at least 1: not {text!r}")
        default = GTHREAD_THREADS if kind == "gthread" else 1
        return cls(kind, int(workers), int(threads) if threads else default, nginx=bool(plus))

    def __str__(self) -> str:
        threads = f" × {self.threads} threads" if self.worker_class == "gthread" else ""
        return f"{self.worker_class}, {self.workers} workers{threads}" + (", behind nginx" if self.nginx else "")

    def argv(self) -> list[str]:
        args = ["--worker-class", self.worker_class, "--workers", str(self.workers)]
        return args + (["--threads", str(self.threads)] if self.worker_class == "gthread" else [])


class Gunicorn:
    """gunicorn serving pfs_web on 127.0.0.1:port until stop()."""

    def __init__(self, config: ServerConfig, env: dict[str, str], log_path: Path, port: int | None = None) -> None:
        self.config, self.port, self.log_path = config, port or free_port(), log_path
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.log = open(log_path, "w")  # noqa: SIM115 - closed in stop()
        # DEBUG off serves the collected, hashed static files (WhiteNoise), as `make serve` does.
        subprocess.run(
            [PY, "manage.py", "collectstatic", "--noinput", "--verbosity", "0"], cwd=ROOT, env=env, check=True
        )
        self.process = subprocess.Popen(
            [PY, "-m", "gunicorn", "pfs_web.wsgi:application", "--bind", f"127.0.0.1:{self.port}"]
            + config.argv()
            + ["--timeout", "60", "--graceful-timeout", "5", "--error-logfile", "-"],
            cwd=ROOT,
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: stop() ends the workers with it
        )

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"gunicorn exited with {self.process.returncode}:\n{self._log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.base_url}/login/", timeout=2) as answer:  # noqa: S310
                    if answer.status == 200:
                        return
            except OSError:
                time.sleep(0.2)
        raise RuntimeError(f"gunicorn did not answer within {timeout} s:\n{self._log_tail()}")

    def drain(self, timeout: float = 120.0) -> None:
        """Wait until requests left queued by a finished wrk run are served: wrk stops at its deadline
        without waiting for answers, and the next run must not share the server with them."""
        with urllib.request.urlopen(f"{self.base_url}/login/", timeout=timeout) as answer:  # noqa: S310
            answer.read()

    def stop(self) -> None:
        process_group_stop(self.process)
        self.log.close()

    def _log_tail(self) -> str:
        self.log.flush()
        return self.log_path.read_text()[-3000:]


@contextmanager
def gunicorn_running(config: ServerConfig, env: dict[str, str], log_path: Path):
    server = Gunicorn(config, env, log_path)
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


# nginx in front of gunicorn as gunicorn's documentation deploys it: it holds the clients' keep-alive
# connections and buffers each request whole before it passes it on, so a sync worker never waits
# on a client that connected and has not sent yet.
NGINX_CONF = """
daemon off;
worker_processes 1;
pid {tmp}/nginx.pid;
error_log {tmp}/nginx-error.log warn;
events {{ worker_connections 1024; }}
http {{
  access_log off;
  client_body_temp_path {tmp}/body;
  proxy_temp_path {tmp}/proxy;
  fastcgi_temp_path {tmp}/fastcgi;
  uwsgi_temp_path {tmp}/uwsgi;
  scgi_temp_path {tmp}/scgi;
  keepalive_timeout 60s;
  keepalive_requests 1000000;
  server {{
    listen 127.0.0.1:{port};
    location / {{
      proxy_pass http://127.0.0.1:{upstream};
      proxy_set_header Host $http_host;
      proxy_set_header X-Forwarded-For $remote_addr;
    }}
  }}
}}
"""


@contextmanager
def nginx_in_front(upstream_port: int, tmp: Path):
    """nginx on a free port of 127.0.0.1, passing every request to gunicorn on ``upstream_port``; its URL."""
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    if not Path(nginx).exists():
        raise ToolMissing(f"nginx is not installed: install it with `{NGINX_INSTALL}`, or leave out +nginx")
    port = free_port()
    conf = tmp / "nginx.conf"
    conf.write_text(NGINX_CONF.format(tmp=tmp, port=port, upstream=upstream_port))
    process = subprocess.Popen([nginx, "-c", str(conf), "-p", str(tmp)], stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                with urllib.request.urlopen(f"{url}/login/", timeout=2):  # noqa: S310
                    break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"nginx did not start: {(tmp / 'nginx-error.log').read_text()}") from None
                time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=20)


# --- the bench database -------------------------------------------------------------------------


def manage(env: dict[str, str], *args: str) -> str:
    return subprocess.run(
        [PY, "manage.py", *args], cwd=ROOT, env=env, check=True, capture_output=True, text=True
    ).stdout


def database_prepare(*, admin_url: str, name: str, redis_url: str, devices: int) -> str:
    """Drop and create database ``name``, migrate, seed the demo and run DEMO_ROUNDS; its URL."""
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as admin:
        for database in (name, f"{name}_issuer", f"{name}_helper"):  # the issuer's and the helper's own stores
            admin.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
            admin.execute(f'CREATE DATABASE "{database}"')
    url = urllib.parse.urlsplit(admin_url)._replace(path=f"/{name}").geturl()
    helper_url = urllib.parse.urlsplit(admin_url)._replace(path=f"/{name}_helper").geturl()
    # The seeding rounds run in this process's thread (no worker needed); the server later uses Redis.
    env = server_env(database_url=url, redis_url=redis_url, PFS_TASK_MODE="thread")
    manage(env, "migrate", "--noinput")
    manage(env, "migrate", "--database", "issuer", "--noinput")
    manage(env, "seed_demo", "--devices", str(devices))
    # The rounds need the helper aggregator: its own service on its own database, for the seeding
    # only (the reads the bench then times never reach it).
    secret = "bench-aggregator-auth-secret"
    with (
        tempfile.TemporaryDirectory() as tmp,
        helper_service(Path(tmp), secret=secret, database_url=helper_url) as helper,
    ):
        env = {**env, "HELPER_URL": helper.url, "PFS_AGGREGATOR_AUTH_SECRET": secret}
        for analysis, recipe in DEMO_ROUNDS:
            path = Path(tmp) / f"{recipe['recipeIdentifier']}.json"
            path.write_text(json.dumps(recipe))
            manage(env, "run_recipe", str(path), "--analysis", analysis, "--json")
    return url


def first_round_id_in(env: dict[str, str]) -> tuple[int, int]:
    """The released round of DEMO_ROUNDS[0] in the bench database, and the server's CONN_MAX_AGE."""
    code = (
        "import sys, django; django.setup()\n"
        "from django.conf import settings\n"
        "from analyses.models import Round\n"
        "rounds = Round.objects.filter(recipe__analysis__identifier=sys.argv[1], status='released')\n"
        "print(rounds.order_by('pk').values_list('pk', flat=True).first(), "
        "settings.DATABASES['default'].get('CONN_MAX_AGE', 0))\n"
    )
    out = subprocess.run(
        [PY, "-c", code, DEMO_ROUNDS[0][0]], cwd=ROOT, env=env, check=True, capture_output=True, text=True
    )
    round_id, conn_max_age = out.stdout.strip().splitlines()[-1].split()
    return int(round_id), int(conn_max_age)


def query_counts(env: dict[str, str], paths: list[str]) -> dict[str, int]:
    """SQL queries each path costs, counted in a child process through Django's test client."""
    code = (
        "import json, sys, django; django.setup()\n"
        "from django.contrib.auth import get_user_model\n"
        "from django.db import connection\n"
        "from django.test import Client\n"
        "from django.test.utils import CaptureQueriesContext\n"
        "client = Client(); client.force_login(get_user_model().objects.get(username=sys.argv[1]))\n"
        "out = {}\n"
        "for path in sys.argv[2:]:\n"
        "    client.get(path)\n"  # warm: the first request loads templates and content types
        "    with CaptureQueriesContext(connection) as queries:\n"
        "        status = client.get(path).status_code\n"
        "    assert status == 200, (path, status)\n"
        "    out[path] = len(queries)\n"
        "print(json.dumps(out))\n"
    )
    out = subprocess.run(
        [PY, "-c", code, ANALYST[0], *paths],
        cwd=ROOT,
        env={**env, "ALLOWED_HOSTS": "testserver"},
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])
