"""Load test: the read API and the dashboard pages under gunicorn, PostgreSQL and Redis on loopback.

Builds a private PostgreSQL database (default ``pfs_bench``: dropped and created anew, migrated,
``seed_demo``, then two demo rounds run in-process so that reads have real releases), starts
gunicorn with ``DEBUG=0`` on 127.0.0.1 against it and a Redis database of its own, signs in as
seed_demo's analyst (an API token from ``POST /api/token/``, a session cookie from ``/login/``),
and drives each endpoint in turn with wrk: 50 connections for ``--duration`` seconds each. A Lua
script counts every response by status, so a redirect to the login page counts as a failure too
(wrk's own "Non-2xx or 3xx" does not).

The API's request rates (``PFS_API_USER_RATE``, ``PFS_API_ANON_RATE``) are raised far above
what the bench sends: every request still pays for its count in Redis, none is refused.

Writes bench/results/api_load.md (or ``--out``). Needs wrk (Debian: ``apt-get install -y wrk``).

    .venv/bin/python bench/api_load.py                                    # the committed table
    .venv/bin/python bench/api_load.py --duration 3 --configs sync:2 --out /tmp/load.md   # a quick check

Every load goes to 127.0.0.1 only, and every wrk run stops by itself after ``--duration``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from http.cookiejar import CookieJar
from pathlib import Path

from host import describe, process_group_stop  # bench/host.py: this script's folder is on sys.path

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
WRK_INSTALL = "apt-get install -y wrk"
NGINX_INSTALL = "apt-get install -y nginx-light"
DEFAULT_CONFIGS = "sync:2,sync:2+nginx"
GTHREAD_THREADS = 4
TARGET_P99_MS = 100.0
# The round page polls its status 500 ms after each answer (static/js/round.js): the fastest any PFS
# client reads (the Python client polls once a second, the adaptive page every 1.5 s).
DASHBOARD_PACE_MS = 500
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

# Per thread, every response by status; at the end one line of JSON with the latency percentiles.
WRK_LUA = r"""
local threads = {}
function setup(thread)
  table.insert(threads, thread)
  thread:set("id", #threads)
end
function init(args)
  statuses = {}
end
function response(status, headers, body)
  statuses[status] = (statuses[status] or 0) + 1
end
function done(summary, latency, requests)
  local counts = {}
  for _, thread in ipairs(threads) do
    for status, n in pairs(thread:get("statuses")) do
      counts[status] = (counts[status] or 0) + n
    end
  end
  local parts = {}
  for status, n in pairs(counts) do
    table.insert(parts, string.format('"%d": %d', status, n))
  end
  local e = summary.errors
  io.write(string.format(
    'WRK_JSON {"requests": %d, "duration_us": %d, "connect_errors": %d, "read_errors": %d, ' ..
    '"write_errors": %d, "timeouts": %d, "p50_us": %d, "p90_us": %d, "p99_us": %d, "max_us": %d, ' ..
    '"mean_us": %.1f, "statuses": {%s}}\n',
    summary.requests, summary.duration, e.connect, e.read, e.write, e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max, latency.mean,
    table.concat(parts, ", ")))
end
"""


# Appended when one run spreads its requests over several paths (the smoke test): each connection
# takes the paths in turn, given after `--` on wrk's command line.
WRK_LUA_PATHS = r"""
local requests_by_path, turn = {}, 0
function init(args)
  statuses = {}
  for i, path in ipairs(args) do
    requests_by_path[i] = wrk.format(nil, path)
  end
end
function request()
  turn = turn % #requests_by_path + 1
  return requests_by_path[turn]
end
"""


# Appended for clients that pause between requests: before each request wrk waits a time drawn
# uniformly from [pause / 2, 3 pause / 2] (mean: the pause). Fixed pauses would keep the 50 clients
# in step, all asking in the same millisecond every pause, as 50 people who opened their pages at
# different moments do not. Seeded per wrk thread: the same draws at every run.
WRK_LUA_PAUSE = """
local pause_ms = %d
local seeded = false
function delay()
  if not seeded then
    math.randomseed(id)
    seeded = true
  end
  return math.floor(pause_ms * (0.5 + math.random()))
end
"""


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


# --- signing in ---------------------------------------------------------------------------------


def api_token(base_url: str, username: str, password: str) -> str:
    body = urllib.parse.urlencode({"username": username, "password": password}).encode()
    with urllib.request.urlopen(f"{base_url}/api/token/", data=body, timeout=10) as answer:  # noqa: S310
        return json.loads(answer.read())["token"]


def session_cookie(base_url: str, username: str, password: str) -> str:
    """Sign in through /login/ as a browser does; the Cookie header that carries the session."""
    jar = CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    with opener.open(f"{base_url}/login/", timeout=10) as page:
        csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.read().decode())
    if csrf is None:
        raise RuntimeError("the login page has no CSRF token")
    form = {"username": username, "password": password, "csrfmiddlewaretoken": csrf[1], "next": "/"}
    request = urllib.request.Request(  # noqa: S310
        f"{base_url}/login/", data=urllib.parse.urlencode(form).encode(), headers={"Referer": f"{base_url}/login/"}
    )
    with opener.open(request, timeout=10):
        pass
    cookies = {cookie.name: cookie.value for cookie in jar}
    if "sessionid" not in cookies:
        raise RuntimeError(f"signing in as {username!r} did not give a session")
    return "; ".join(f"{name}={value}" for name, value in sorted(cookies.items()))


@dataclass(frozen=True)
class Target:
    name: str
    path: str
    headers: dict[str, str] = field(default_factory=dict)


def targets(*, analysis: str, round_id: int, token: str, cookie: str) -> list[Target]:
    """The read endpoints of the issue: four of the API (token) and three dashboard pages (session)."""
    api = {"Authorization": f"Token {token}", "Accept": "application/json"}
    page = {"Cookie": cookie}
    return [
        Target("GET /api/analyses/", "/api/analyses/", api),
        Target("GET /api/analyses/<id>/", f"/api/analyses/{analysis}/", api),
        Target("GET /api/rounds/<id>/", f"/api/rounds/{round_id}/", api),
        Target("GET /api/rounds/<id>/release/", f"/api/rounds/{round_id}/release/", api),
        Target("page /", "/", page),
        Target("page /analyses/<id>/", f"/analyses/{analysis}/", page),
        Target("page /rounds/<id>/", f"/rounds/{round_id}/", page),
    ]


# --- wrk ----------------------------------------------------------------------------------------


def wrk_run(
    url: str,
    *,
    headers: dict[str, str],
    connections: int,
    threads: int,
    duration: float,
    paths: list[str] | None = None,
    pause_ms: int = 0,
) -> dict:
    """One wrk run: requests/s, latency percentiles in ms, and every response by status.

    With ``paths``, requests go to those paths of ``url``'s server in turn instead of to ``url``.
    With ``pause_ms``, each connection waits that long after an answer before its next request,
    as a client does between polls; the latency counts from the request's first byte, not the pause.
    """
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as script:
        script.write(WRK_LUA + (WRK_LUA_PATHS if paths else "") + (WRK_LUA_PAUSE % pause_ms if pause_ms else ""))
    try:
        argv = [wrk_path(), "-c", str(connections), "-t", str(threads), "-d", f"{duration:g}s", "--timeout", "10s"]
        for name, value in headers.items():
            argv += ["-H", f"{name}: {value}"]
        out = subprocess.run(
            argv + ["-s", script.name, url] + (["--", *paths] if paths else []),
            capture_output=True,
            text=True,
            timeout=duration + 60,
            check=True,
        ).stdout
    finally:
        os.unlink(script.name)
    line = next((line for line in out.splitlines() if line.startswith("WRK_JSON ")), None)
    if line is None:
        raise RuntimeError(f"wrk printed no summary:\n{out}")
    raw = json.loads(line.removeprefix("WRK_JSON "))
    statuses = {int(status): count for status, count in raw["statuses"].items()}
    ok = sum(count for status, count in statuses.items() if 200 <= status < 300)
    socket_errors = raw["connect_errors"] + raw["read_errors"] + raw["write_errors"] + raw["timeouts"]
    if raw["requests"] == 0:
        # No response within the run: no latency to report, and certainly not a met target.
        raw.update({key: duration * 1e6 for key in ("p50_us", "p90_us", "p99_us", "max_us", "mean_us")})
    return {
        "requests": raw["requests"],
        "seconds": raw["duration_us"] / 1e6,
        "rps": raw["requests"] / (raw["duration_us"] / 1e6),
        "p50_ms": raw["p50_us"] / 1e3,
        "p90_ms": raw["p90_us"] / 1e3,
        "p99_ms": raw["p99_us"] / 1e3,
        "max_ms": raw["max_us"] / 1e3,
        "mean_ms": raw["mean_us"] / 1e3,
        "statuses": statuses,
        "not_2xx": sum(statuses.values()) - ok,
        "socket_errors": socket_errors,
    }


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
    # The seeding rounds run in this process's thread (no worker needed); the server later uses Redis.
    env = server_env(database_url=url, redis_url=redis_url, PFS_TASK_MODE="thread")
    manage(env, "migrate", "--noinput")
    manage(env, "migrate", "--database", "issuer", "--noinput")
    manage(env, "migrate", "--database", "helper", "--noinput")
    manage(env, "seed_demo", "--devices", str(devices))
    with tempfile.TemporaryDirectory() as tmp:
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


# --- the table ----------------------------------------------------------------------------------


def machine() -> str:
    return describe(tasks="gunicorn and Redis on loopback", memory=True, database="PostgreSQL")


def load_text() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def versions() -> str:
    out = (
        subprocess.run(["psql", "--version"], capture_output=True, text=True, check=False).stdout.strip()
        if shutil.which("psql")
        else "psql not found"
    )
    redis = (
        subprocess.run(["redis-server", "--version"], capture_output=True, text=True, check=False).stdout.split(" ")[2]
        if shutil.which("redis-server")
        else "?"
    )
    wrk = subprocess.run([wrk_path(), "--version"], capture_output=True, text=True, check=False).stdout.split()[1]
    return f"gunicorn 27.0.1, {out.replace('psql (PostgreSQL) ', 'PostgreSQL ')}, Redis {redis}, wrk {wrk}"


def render(*, runs: list[dict], queries: dict[str, int], context: dict) -> str:
    args = argparse.Namespace(**context["settings"])
    lines = [
        "# API and dashboard load (issue 8)",
        "",
        f"Machine: {context['machine']}; {context['versions']}. Date: {time.strftime('%Y-%m-%d')}.",
        f"Load average (1, 5, 15 min) before the run: {context['load_before']}; after: {context['load_after']}."
        + (
            " **Measured while other work shared the two cores**: the numbers are noisy and low."
            if context["busy"]
            else ""
        ),
        "",
        "Reproduce:",
        "",
        "```",
        context["command"],
        "```",
        "",
        f"gunicorn (`DEBUG=0`, `pfs_web.settings`) on 127.0.0.1 against PostgreSQL (database `{args.database}`, "
        f"made anew: migrate, `seed_demo --devices {args.devices}`, two demo rounds) and Redis (`{args.redis_url}`: "
        "the API's request counts and what is rendered from releases). wrk on the same machine, "
        f"{args.connections} connections over {args.threads} threads, {args.duration:g} s per endpoint "
        "after a short warm-up, keep-alive (gunicorn's sync workers close each connection, so wrk reconnects). "
        "The warm-up also renders each release into the cache, once: the tables show the steady state. "
        "API requests carry seed_demo's analyst's token (`POST /api/token/`), pages its session cookie "
        "(signed in once through `/login/`). The API's rates were raised for the bench through the environment "
        f"(`{' '.join(f'{k}={v}' for k, v in UNTHROTTLED.items())}`): every request still increments its count "
        "in Redis, none is refused. The round read is the demo round of 64 perplexity buckets × 5 locale cohorts "
        f"(round {context['round_id']}); the analysis read is `{DEMO_ROUNDS[0][0]}`."
        + (
            " Database connections: a new one per request (`CONN_MAX_AGE` 0)."
            if context["conn_max_age"] == 0
            else f" Database connections kept open for {context['conn_max_age']} s (`CONN_MAX_AGE`)."
        )
        + (
            f" Set for this run through `PFS_DB_CONN_MAX_AGE={args.conn_max_age}`."
            if args.conn_max_age is not None
            else ""
        ),
        "",
        f"Target (issue 8): p99 under {TARGET_P99_MS:.0f} ms at {args.connections} concurrent clients for reads. "
        "Each endpoint takes two loads from the same connections:",
        "",
        f"- **Clients at the dashboard's pace**, the target's measure: each of the {args.connections} connections "
        f"waits {DASHBOARD_PACE_MS} ms after an answer before its next request. That is the round page's polling "
        "interval, the fastest any PFS client reads (the Python client polls once a second, the adaptive page "
        "every 1.5 s); here every request is the endpoint's full read, a whole page included. Latency counts "
        "from a request's first byte, not the pause.",
        "- **Saturation**: the same connections with no pause, a closed loop that finds the throughput ceiling. "
        f"There Little's law ties latency to throughput (mean latency ≈ {args.connections} / requests per second): "
        "a p99 under 100 ms would need well over 500 requests/s from the two cores that also run wrk, "
        "PostgreSQL and Redis.",
        "",
        "Not 2xx: responses whose status was not 2xx (counted by wrk's Lua `response` hook: a redirect to the "
        "login page counts). Socket errors: connect, read, write errors and timeouts (10 s). SQL: queries one "
        "request costs (Django's test client against the same database).",
    ]
    for config in context["configs"]:
        lines += ["", f"## gunicorn {config}"]
        for pause in getattr(args, "pauses", [0]):
            rows = [r for r in runs if r["config"] == config and r.get("pause_ms", 0) == pause]
            met = all(r["p99_ms"] < TARGET_P99_MS for r in rows)
            shape = (
                f"{args.connections} clients, {pause} ms between an answer and the next request"
                if pause
                else f"Saturation: {args.connections} connections, no pause"
            )
            verdict = (
                f"Target p99 < {TARGET_P99_MS:.0f} ms on every endpoint: **{'met' if met else 'not met'}**."
                if pause == DASHBOARD_PACE_MS
                else f"p99 < {TARGET_P99_MS:.0f} ms on {sum(r['p99_ms'] < TARGET_P99_MS for r in rows)} of "
                f"{len(rows)} endpoints."
            )
            lines += ["", f"### {shape}", "", verdict, "", *_table(rows, queries)]

    best = max(context["configs"], key=lambda c: sum(r["rps"] for r in runs if r["config"] == c and not r["pause_ms"]))
    lines += [
        "",
        f"Most requests/s at saturation over all endpoints: gunicorn {best}."
        + (
            " The other work on the machine came and went during the run, so the order of the configurations "
            "can change from one run to the next."
            if context["busy"]
            else ""
        ),
        "",
    ]
    return "\n".join(lines)


def _table(rows: list[dict], queries: dict[str, int]) -> list[str]:
    lines = [
        "| endpoint | SQL | requests/s | p50 (ms) | p90 (ms) | p99 (ms) | max (ms) | requests | not 2xx | socket errors | p99 < 100 ms |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        if r["requests"] == 0:
            lines.append(
                f"| {r['endpoint']} | {queries.get(r['path'], '?')} | 0 | no response completed within the "
                f"{r['seconds']:.0f} s run | | | | 0 | {r['not_2xx']} | {r['socket_errors']} | no |"
            )
            continue
        lines.append(
            f"| {r['endpoint']} | {queries.get(r['path'], '?')} | {r['rps']:,.0f} | {r['p50_ms']:.1f} | "
            f"{r['p90_ms']:.1f} | {r['p99_ms']:.1f} | {r['max_ms']:.1f} | {r['requests']:,} | {r['not_2xx']} | "
            f"{r['socket_errors']} | {'yes' if r['p99_ms'] < TARGET_P99_MS else 'no'} |"
        )
    return lines


REPORTING_OPTIONS = ("--out", "--save-json", "--beside", "--beside-label", "--from-json")


def measuring_argv(argv: list[str]) -> list[str]:
    """The options that change what is measured (what reproduces the table), without the reporting ones."""
    kept, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg in REPORTING_OPTIONS:
            skip = True
        elif not arg.startswith(tuple(f"{option}=" for option in REPORTING_OPTIONS)):
            kept.append(arg)
    return kept


def render_beside(other: dict, runs: list[dict], queries: dict[str, int], label: str) -> str:
    """Per configuration and endpoint: this run's SQL, requests/s and p99 beside another run's."""
    there = {(r["config"], r["endpoint"], r.get("pause_ms", 0)): r for r in other["runs"]}
    lines = [
        f"## Beside another run: {label.split(':')[0]}",
        "",
        f"The other run: {label} Its load average (1, 5, 15 min): {other['context']['load_before']} before, "
        f"{other['context']['load_after']} after. Its command: `{other['context']['command']}`.",
        "",
        "| gunicorn | endpoint | pause (ms) | SQL here | there | requests/s here | there | p99 (ms) here | there |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in runs:
        o = there.get((r["config"], r["endpoint"], r["pause_ms"]))
        if o is None:
            continue
        lines.append(
            f"| {r['config']} | {r['endpoint']} | {r['pause_ms']} | {queries.get(r['path'], '?')} | "
            f"{other['queries'].get(o['path'], '?')} | {r['rps']:,.0f} | {o['rps']:,.0f} | {r['p99_ms']:.1f} | "
            f"{o['p99_ms']:.1f} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=20.0, help="seconds of load per endpoint (default 20)")
    parser.add_argument("--connections", type=int, default=50, help="concurrent connections (default 50)")
    parser.add_argument("--threads", type=int, default=2, help="wrk threads (default 2, one per core)")
    parser.add_argument(
        "--pauses",
        type=lambda text: [int(part) for part in text.split(",")],
        default=[DASHBOARD_PACE_MS, 0],
        help=f"ms each client waits after an answer, one load per value (default {DASHBOARD_PACE_MS},0: "
        "the dashboard's pace, then saturation)",
    )
    parser.add_argument(
        "--configs",
        type=lambda text: [ServerConfig.parse(part) for part in text.split(",")],
        default=[ServerConfig.parse(part) for part in DEFAULT_CONFIGS.split(",")],
        help=f"gunicorn worker class and count per run (default {DEFAULT_CONFIGS}): sync:N, gthread:N "
        f"({GTHREAD_THREADS} threads per worker) or gthread:NxT; +nginx puts nginx in front",
    )
    parser.add_argument("--postgres", default="postgres://postgres@127.0.0.1:5432/postgres", help="admin URL")
    parser.add_argument("--database", default="pfs_bench", help="the bench's own database (dropped, made anew)")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/13", help="a Redis database of the bench's own")
    parser.add_argument("--devices", type=int, default=100_000, help="devices in the demo fleet (default 100,000)")
    parser.add_argument(
        "--conn-max-age",
        type=int,
        help="seconds the server keeps a database connection open (PFS_DB_CONN_MAX_AGE; default: the settings')",
    )
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "api_load.md")
    parser.add_argument("--save-json", type=Path, help="also write the measurements here (for --beside, --from-json)")
    parser.add_argument(
        "--beside",
        type=Path,
        action="append",
        default=[],
        help="measurements (--save-json) of another run, shown beside these (repeatable)",
    )
    parser.add_argument(
        "--beside-label", action="append", default=[], help="what that other run was, a sentence (one per --beside)"
    )
    parser.add_argument("--from-json", type=Path, help="measure nothing: render the measurements of --save-json")
    args = parser.parse_args()
    try:
        wrk_path()
    except ToolMissing as missing:
        sys.exit(f"api_load: {missing}")
    if args.from_json:
        saved = json.loads(args.from_json.read_text())
        runs, queries, context = saved["runs"], saved["queries"], saved["context"]
    else:
        runs, queries, context = measure(args)
    if args.save_json:
        args.save_json.write_text(json.dumps({"runs": runs, "queries": queries, "context": context}))
    text = render(runs=runs, queries=queries, context=context)
    labels = args.beside_label + [""] * (len(args.beside) - len(args.beside_label))
    for other, label in zip(args.beside, labels, strict=False):
        text += "\n" + render_beside(json.loads(other.read_text()), runs, queries, label)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(f"wrote {args.out}")


def measure(args: argparse.Namespace) -> tuple[list[dict], dict[str, int], dict]:
    load_before = load_text()
    print(f"preparing database {args.database} ({args.devices:,} devices, two demo rounds) ...", flush=True)
    database_url = database_prepare(
        admin_url=args.postgres, name=args.database, redis_url=args.redis_url, devices=args.devices
    )
    env = server_env(database_url=database_url, redis_url=args.redis_url)
    if args.conn_max_age is not None:
        env["PFS_DB_CONN_MAX_AGE"] = str(args.conn_max_age)
    round_id, conn_max_age = first_round_id_in(env)
    queries = query_counts(
        env, [t.path for t in targets(analysis=DEMO_ROUNDS[0][0], round_id=round_id, token="", cookie="")]
    )
    runs: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        for config in args.configs:
            # Behind nginx the client's address is the one nginx forwards (X-Forwarded-For).
            server_env_here = {**env, "PFS_NUM_PROXIES": "1"} if config.nginx else env
            with gunicorn_running(config, server_env_here, Path(tmp) / "gunicorn.log") as server, ExitStack() as front:
                base_url = (
                    front.enter_context(nginx_in_front(server.port, Path(tmp))) if config.nginx else server.base_url
                )
                token = api_token(base_url, *ANALYST)
                cookie = session_cookie(base_url, *ANALYST)
                endpoints = targets(analysis=DEMO_ROUNDS[0][0], round_id=round_id, token=token, cookie=cookie)
                for target in endpoints:
                    url = base_url + target.path
                    wrk_run(url, headers=target.headers, connections=args.connections, threads=args.threads, duration=2)
                    server.drain()
                    for pause_ms in args.pauses:
                        result = wrk_run(
                            url,
                            headers=target.headers,
                            connections=args.connections,
                            threads=args.threads,
                            duration=args.duration,
                            pause_ms=pause_ms,
                        )
                        server.drain()
                        run = {"config": str(config), "endpoint": target.name, "path": target.path, **result}
                        runs.append({**run, "pause_ms": pause_ms})
                        print(
                            f"{config!s:>28} {target.name:<30} pause {pause_ms:4d} ms {result['rps']:7.0f} req/s  "
                            f"p50 {result['p50_ms']:6.1f}  p99 {result['p99_ms']:7.1f}  max {result['max_ms']:7.1f} ms  "
                            f"not 2xx {result['not_2xx']}  socket errors {result['socket_errors']}",
                            flush=True,
                        )
    load_after = load_text()
    argv = shlex.join(measuring_argv(sys.argv[1:]))
    context = {
        "machine": machine(),
        "versions": versions(),
        "load_before": load_before,
        "load_after": load_after,
        # The bench itself keeps both cores busy, so only the load before it started says whether
        # others were using them.
        "busy": max(float(x) for x in load_before.split()[:2]) > 0.5,
        "command": f".venv/bin/python bench/api_load.py {argv}".strip(),
        "round_id": round_id,
        "conn_max_age": conn_max_age,
        "configs": [str(c) for c in args.configs],
        "settings": {
            key: getattr(args, key)
            for key in (
                "database",
                "devices",
                "redis_url",
                "connections",
                "threads",
                "duration",
                "conn_max_age",
                "pauses",
            )
        },
    }
    return runs, queries, context


if __name__ == "__main__":
    main()
