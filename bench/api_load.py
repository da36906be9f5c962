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
import subprocess
import sys
import tempfile
import urllib.parse
import urllib.request
from contextlib import ExitStack
from dataclasses import dataclass, field
from http.cookiejar import CookieJar
from pathlib import Path

from api_load_servers import (
    ANALYST,
    DEMO_ROUNDS,
    GTHREAD_THREADS,
    ServerConfig,
    ToolMissing,
    database_prepare,
    first_round_id_in,
    gunicorn_running,
    nginx_in_front,
    query_counts,
    server_env,
    wrk_path,
)
from api_load_table import DASHBOARD_PACE_MS, load_text, machine, measuring_argv, render, render_beside, versions

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CONFIGS = "sync:2,sync:2+nginx"

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
