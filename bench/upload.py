"""Benchmark: upload ingestion — device reports POSTed to /api/device/reports/, then verified in bulk.

gunicorn (DEBUG=0, ``pfs_web.wsgi``: uploads skip Django's middleware) serves pfs_web on 127.0.0.1
against a private PostgreSQL database (default ``pfs_bench_upload``: dropped, created and migrated
anew) and a Redis database of its own (the upload rate is counted there). A fleet of real devices
has an approved analysis and open rounds: 8 age buckets, asymmetric OHE, epsilon0 = 2 (report
length 8). Reports are sealed beforehand by the device code (``pfs_device.report_client``: privatize,
split, HPKE-seal, a blind-signed token each) and written one per line to a file that wrk's Lua
script cycles through, so the client costs the server's cores little.

Three measurements:

(a) **Acceptance**: wrk at each ``--connections`` against each gunicorn ``--configs``, for
    ``--seconds``, with verification off (tasks inline: the upload path sends none). Reports/s and
    wrk's latency percentiles; every answer must be 202.
(b) **Verification**: ``--verify`` fresh reports uploaded once each, then aggregation.ingest's
    ``reports_ingest`` on them in this process (one core): reports/s verified and stored.
(c) **End to end**: the same again on another round with a Celery worker (``--worker-concurrency``)
    verifying while the reports arrive (the upload path sends the task once a second): from the
    first upload to the last report verified.

The helper aggregator runs as its own service beside them (bench/host.py's helper_service:
gunicorn with ``pfs_web.settings_helper``, its own PostgreSQL database ``<database>_helper``),
and the leader's processes reach it over HTTP (``PFS_HELPER_TRANSPORT=http``), as in production.

Writes bench/results/upload.md (or ``--out``). Traffic goes to 127.0.0.1 only.

    .venv/bin/python bench/upload.py                                  # the committed table
    .venv/bin/python bench/upload.py --configs sync:2 --connections 32 --seconds 5 --out /tmp/upload.md
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from host import (  # bench/host.py: this script's folder is on sys.path
    HelperService,
    describe,
    free_port,
    helper_service,
    process_group_stop,
)
from upload_prio3 import prio3_ingest
from upload_setup import VAR, counts, setup, upload_statements, write_bodies

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
TARGET_RATE, TARGET_P99_MS = 2_000, 100.0
HELPER_SECRET = "bench-aggregator-auth-secret"  # PFS_AGGREGATOR_AUTH_SECRET: the same on both sides
# The attestation authority's key the bench plays (pfs_device.attestation): its devices are registered attested.
BENCH_AUTHORITY = hashlib.sha256(b"pfs-studio bench attestation authority").digest()
WRK_THREADS = 2
UPLOAD_PATH = "/api/device/reports/"  # aggregation.intake.UPLOAD_PATH (importable once Django is set up)
WARM_SECONDS = 3

# Each wrk thread sends its share of the bodies (every WRK_THREADS-th one), cycling, to the URL's
# path with the given Content-Type; with a limit, a thread stops after that many answers. done()
# prints the totals as one JSON line. The bodies file holds one body a line ("lines": JSON), or each
# body after its length in 4 bytes, big-endian ("framed": binary bodies such as OHTTP capsules).
LUA = r"""
local threads, made = {}, 0
function setup(thread)
  thread:set("id", made)
  made = made + 1
  table.insert(threads, thread)
end
local function framed(path)
  local file, all = assert(io.open(path, "rb")), {}
  while true do
    local head = file:read(4)
    if head == nil then break end
    local a, b, c, d = head:byte(1, 4)
    local body = file:read(((a * 256 + b) * 256 + c) * 256 + d)
    assert(#head == 4 and body ~= nil, "a truncated bodies file")
    all[#all + 1] = body
  end
  file:close()
  return all
end
function init(args)
  local path, every = args[1], tonumber(args[2])
  limit = tonumber(args[3])
  bodies, index, answers, statuses = {}, 0, 0, {}
  local all = {}
  if args[5] == "framed" then all = framed(path) else for line in io.lines(path) do all[#all + 1] = line end end
  for n, body in ipairs(all) do
    if (n - 1) % every == id then bodies[#bodies + 1] = body end
  end
  headers = {["Content-Type"] = args[4]}
end
function request()
  index = index % #bodies + 1
  return wrk.format("POST", nil, headers, bodies[index])
end
function response(status, _, _)
  local key = tostring(status)
  statuses[key] = (statuses[key] or 0) + 1
  answers = answers + 1
  if limit > 0 and answers >= limit then wrk.thread:stop() end
end
function done(summary, latency, _)
  local total = {}
  for _, thread in ipairs(threads) do
    for status, count in pairs(thread:get("statuses")) do total[status] = (total[status] or 0) + count end
  end
  local parts = {}
  for status, count in pairs(total) do parts[#parts + 1] = string.format('"%s": %d', status, count) end
  local e = summary.errors
  io.write(string.format(
    'WRK {"requests": %d, "seconds": %.3f, "socket_errors": %d, "p50_ms": %.2f, "p90_ms": %.2f, "p99_ms": %.2f, "max_ms": %.2f, "statuses": {%s}}\n',
    summary.requests, summary.duration / 1e6, e.connect + e.read + e.write + e.timeout,
    latency:percentile(50) / 1e3, latency:percentile(90) / 1e3, latency:percentile(99) / 1e3, latency.max / 1e3,
    table.concat(parts, ", ")))
end
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", default="sync:2,sync:4,gthread:2,gthread:4", help="worker class:workers, ...")
    parser.add_argument("--connections", default="32,64", help="wrk connections, comma-separated")
    parser.add_argument("--seconds", type=int, default=10, help="wrk duration per run")
    parser.add_argument("--pool", type=int, default=4000, help="distinct sealed reports wrk cycles through in (a)")
    parser.add_argument("--verify", type=int, default=5000, help="reports verified in (b) and in (c)")
    parser.add_argument("--worker-concurrency", type=int, default=2)
    parser.add_argument("--database", default="pfs_bench_upload")
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/12")
    parser.add_argument("--out", default=None, help="default bench/results/upload.md (upload_prio3.md with --prio3)")
    parser.add_argument("--processes", type=int, default=2, help="with --prio3: verifying processes")
    parser.add_argument(
        "--prio3",
        type=int,
        default=0,
        metavar="BUCKETS",
        help="only verified ingestion of --verify Prio3 reports of BUCKETS buckets, in this process (no wrk)",
    )
    options = parser.parse_args()
    default_out = "upload_prio3.md" if options.prio3 else "upload.md"
    options.out = options.out or str(ROOT / "bench" / "results" / default_out)
    if shutil.which("wrk") is None and not options.prio3:
        sys.exit("wrk is not on the PATH: apt-get install -y wrk")
    configs = [(c.split(":")[0], int(c.split(":")[1])) for c in options.configs.split(",")]
    connections = [int(c) for c in options.connections.split(",")]

    with leader_ready(options.database, options.redis) as (env, helper, helper_key):
        measure(options, configs, connections, env, helper, helper_key)


@contextmanager
def leader_ready(database: str, redis_url: str) -> Iterator[tuple[dict[str, str], HelperService, bytes]]:
    """The bench's stores made anew (PostgreSQL ``database``, ``<database>_issuer`` and
    ``<database>_helper``, dropped and created; the Redis database ``redis_url`` flushed), the helper
    aggregator as its own service, and Django set up and migrated in this process as the leader.
    Yields (the leader's environment, for its servers; the helper; the helper's private key); the
    helper is stopped on the way out."""
    database_url = f"postgres://postgres@127.0.0.1:5432/{database}"
    for name in (database, f"{database}_issuer", f"{database}_helper"):  # own stores
        for statement in (f"DROP DATABASE IF EXISTS {name}", f"CREATE DATABASE {name}"):
            subprocess.run(["psql", "-h", "127.0.0.1", "-U", "postgres", "-qc", statement, "postgres"], check=True)
    subprocess.run([PY, "-c", f"import redis; redis.Redis.from_url({redis_url!r}).flushdb()"], check=True)
    # The helper as its own service (its own PostgreSQL store, as deploy/pfs-helper.env has it),
    # with a key the bench makes, so that the breakdown of the verification can time its steps too.
    helper_key = os.urandom(32)  # an X25519 private key: any 32 bytes
    with (
        tempfile.TemporaryDirectory(prefix="pfs-bench-helper-") as folder,
        helper_service(
            Path(folder),
            secret=HELPER_SECRET,
            database_url=f"{database_url}_helper",
            PFS_HELPER_KEY=base64.b64encode(helper_key).decode(),
        ) as helper,
    ):
        env = leader_env(database_url, redis_url, helper.url)
        os.environ.update(env)
        sys.path.insert(0, str(ROOT))
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        call_command("migrate", database="issuer", verbosity=0)
        yield env, helper, helper_key


def leader_env(database_url: str, redis_url: str, helper_url: str) -> dict[str, str]:
    """The leader's environment: this process's, its servers' and its workers'."""
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "pfs_web.settings",
        "PFS_ENV_FILE": os.devnull,  # nothing from this checkout's .env
        "DEBUG": "0",
        "SECRET_KEY": "bench-secret-key-not-for-production",
        "ALLOWED_HOSTS": "127.0.0.1,localhost,testserver",
        "DATABASE_URL": database_url,
        "REDIS_URL": redis_url,
        "PFS_TASK_MODE": "sync",  # (a) and (b): the upload path sends no verification task
        "LOG_LEVEL": "WARNING",
        "PFS_UPLOAD_RATE": "1000000/second",  # counted, never reached
        # The leader (this process, its servers and workers) reaches the helper over HTTP only.
        "PFS_HELPER_TRANSPORT": "http",
        "HELPER_URL": helper_url,
        "PFS_AGGREGATOR_AUTH_SECRET": HELPER_SECRET,
        # The bench plays the attestation authority of its devices (upload_setup.setup registers them).
        "PFS_ATTESTATION_KEY": base64.b64encode(BENCH_AUTHORITY).decode(),
        "PFS_ATTESTATION_PUBLIC_KEY": base64.b64encode(_public_of(BENCH_AUTHORITY)).decode(),
    }


def measure(options, configs, connections, env: dict[str, str], helper, helper_key: bytes) -> None:
    if options.prio3:
        prio3_ingest(options, helper, helper_key)
        return
    accept_key, verify_key, e2e_key = setup(3)
    script = lua_script()
    started = time.monotonic()
    pools = {
        key: write_bodies(key, count)
        for key, count in ((accept_key, options.pool), (verify_key, options.verify), (e2e_key, options.verify))
    }
    sealing = time.monotonic() - started
    statements = upload_statements(pools[accept_key])

    runs = []
    for worker_class, workers in configs:
        with Gunicorn(worker_class, workers, env) as server:
            warm(server.port, script, pools[accept_key])
            for count in connections:
                load_before = os.getloadavg()[0]
                measured = wrk(server.port, script, pools[accept_key], connections=count, seconds=options.seconds)
                measured.update(
                    config=describe_config(worker_class, workers),
                    connections=count,
                    load=(load_before, os.getloadavg()[0]),
                )
                runs.append(measured)
                print(json.dumps(measured), flush=True)
    best_config = max(runs, key=lambda r: r["rate"])
    best_class, best_workers = configs[[describe_config(*c) for c in configs].index(best_config["config"])]

    verification = verify_alone(
        best_class, best_workers, env, script, pools[verify_key], verify_key, options.verify, pools[accept_key]
    )
    print(json.dumps(verification), flush=True)
    end_to_end = verify_live(
        best_class,
        best_workers,
        env,
        script,
        pools[e2e_key],
        e2e_key,
        options.verify,
        options.worker_concurrency,
        pools[accept_key],
    )
    print(json.dumps(end_to_end), flush=True)
    write(Path(options.out), options, runs, verification, end_to_end, statements, sealing)


# ---------------------------------------------------------------- the server, the worker and wrk


def lua_script() -> Path:
    """LUA, written where wrk reads it."""
    VAR.mkdir(exist_ok=True)
    script = VAR / "bench-upload.lua"
    script.write_text(LUA)
    return script


def describe_config(worker_class: str, workers: int) -> str:
    return f"{worker_class}, {workers} workers" + (", 4 threads each" if worker_class == "gthread" else "")


class Server:
    """A server on a free loopback port, in a process group of its own, its output appended to
    var/bench-upload-<name>.log: waited for until it accepts connections, stopped with its group."""

    name = "server"

    def __init__(self, env: dict[str, str]) -> None:
        self.port = free_port()
        self.log = open(VAR / f"bench-upload-{self.name}.log", "a")  # noqa: SIM115 - closed in __exit__
        self.process = subprocess.Popen(
            self.argv(), cwd=ROOT, env=env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True
        )

    def argv(self) -> list[str]:
        raise NotImplementedError

    def __enter__(self) -> Server:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited; see var/bench-upload-{self.name}.log")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return self
            except OSError:
                time.sleep(0.2)
        raise RuntimeError(f"{self.name} did not start within 60 s")

    def __exit__(self, *exc: object) -> None:
        process_group_stop(self.process)
        self.log.close()


class Gunicorn(Server):
    """The leader: pfs_web on gunicorn."""

    name = "gunicorn"

    def __init__(self, worker_class: str, workers: int, env: dict[str, str]) -> None:
        self.worker_class, self.workers = worker_class, workers
        super().__init__(env)

    def argv(self) -> list[str]:
        argv = [PY, "-m", "gunicorn", "pfs_web.wsgi:application", "--bind", f"127.0.0.1:{self.port}"]
        argv += ["--worker-class", self.worker_class, "--workers", str(self.workers), "--timeout", "60"]
        argv += ["--backlog", "2048"]
        # The app is imported once, before the workers fork: a worker answers as soon as it exists,
        # instead of spending its first seconds importing Django while the bench counts.
        argv += ["--preload"]
        return argv + (["--threads", "4"] if self.worker_class == "gthread" else [])


class Worker:
    """A Celery worker consuming the bench's Redis: the verification tasks the uploads send."""

    def __init__(self, env: dict[str, str], concurrency: int) -> None:
        argv = [PY, "-m", "celery", "-A", "pfs_web", "worker", "--concurrency", str(concurrency)]
        argv += ["--loglevel", "WARNING", "--without-gossip", "--without-mingle", "--pool", "prefork"]
        self.log = open(VAR / "bench-upload-worker.log", "a")  # noqa: SIM115 - closed in __exit__
        self.process = subprocess.Popen(
            argv, cwd=ROOT, env=env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True
        )

    def __enter__(self) -> Worker:
        time.sleep(5)  # its imports and its connection to the broker
        if self.process.poll() is not None:
            raise RuntimeError("the worker exited; see var/bench-upload-worker.log")
        return self

    def __exit__(self, *exc: object) -> None:
        process_group_stop(self.process)
        self.log.close()


def wrk(
    port: int,
    script: Path,
    bodies: Path,
    *,
    connections: int,
    seconds: int,
    count: int = 0,
    key: str = "",
    path: str = UPLOAD_PATH,
    media_type: str = "application/json",
    framed: bool = False,
) -> dict:
    """wrk POSTing ``bodies`` (one a line, or ``framed``: length-prefixed) to ``path``, by default the
    upload endpoint. With ``count``: each thread stops after its share of answers, and wrk is
    interrupted (it then prints its totals) once the collection ``key`` received them all.
    """
    argv = ["wrk", "-t", str(WRK_THREADS), "-c", str(connections), "-d", f"{seconds}s", "--timeout", "10s"]
    argv += ["-s", str(script), f"http://127.0.0.1:{port}{path}", "--", str(bodies), str(WRK_THREADS)]
    argv += [str(count // WRK_THREADS), media_type, "framed" if framed else "lines"]
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    if count:
        # wrk runs for its whole duration even when every thread has stopped: interrupt it.
        while process.poll() is None and received(key) < count:
            time.sleep(0.05)
        process.send_signal(signal.SIGINT)
    out, _ = process.communicate(timeout=seconds + 30)
    line = next(line for line in out.splitlines() if line.startswith("WRK "))
    result = json.loads(line[4:])
    result["rate"] = result["requests"] / result["seconds"]
    return result


def received(collection_key: str) -> int:
    state = counts(collection_key)
    return state["pending"] + state["accepted"] + state["rejected"]


def warm(port: int, script: Path, bodies: Path) -> None:
    """Every worker connected to PostgreSQL and Redis, and the collection's rules cached."""
    wrk(port, script, bodies, connections=64, seconds=WARM_SECONDS)


def verify_alone(worker_class, workers, env, script, bodies, collection_key, count, warm_bodies) -> dict:
    """(b): ``count`` fresh reports uploaded once each, then reports_ingest on them in this process."""
    from aggregation.ingest import reports_ingest

    with Gunicorn(worker_class, workers, env) as server:
        warm(server.port, script, warm_bodies)
        sent = wrk(server.port, script, bodies, connections=32, seconds=300, count=count, key=collection_key)
    before = counts(collection_key)
    started = time.perf_counter()
    result = reports_ingest(collection_key=collection_key)
    seconds = time.perf_counter() - started
    return {
        "sent": sent["requests"],
        "upload_rate": sent["rate"],
        "received": before["pending"],
        "accepted": result.accepted,
        "rejected": result.rejected,
        "chunks": result.chunks,
        "seconds": seconds,
        "rate": result.verified / seconds,
    }


def verify_live(worker_class, workers, env, script, bodies, collection_key, count, concurrency, warm_bodies) -> dict:
    """(c): the uploads and a Celery worker verifying them at once; first upload to last verified."""
    from aggregation.models import PendingReport

    live = {**env, "PFS_TASK_MODE": "celery"}
    with Worker(live, concurrency), Gunicorn(worker_class, workers, live) as server:
        warm(server.port, script, warm_bodies)
        # The warm-up's reports (and (a)'s) would keep the worker busy: drop them before the clock starts.
        PendingReport.objects.exclude(collection_key=collection_key).delete()
        time.sleep(3)
        load_before = os.getloadavg()[0]
        started = time.monotonic()
        sent = wrk(server.port, script, bodies, connections=32, seconds=300, count=count, key=collection_key)
        uploaded = time.monotonic() - started
        deadline = time.monotonic() + 300
        state = counts(collection_key)
        while (state["pending"] or state["accepted"] < count) and time.monotonic() < deadline:
            time.sleep(0.1)
            state = counts(collection_key)
        verified = time.monotonic() - started
        load_after = os.getloadavg()[0]
    return {
        "sent": sent["requests"],
        "upload_rate": sent["rate"],
        "p99_ms": sent["p99_ms"],
        "uploaded_seconds": uploaded,
        "verified_seconds": verified,
        "load": (load_before, load_after),
        "concurrency": concurrency,
        **state,
    }


READING = """
## Reading

- **Acceptance is now cheap**: one parse and one INSERT per report (the SQL above, once the
  collection's rules are cached for a second), no DRF and no middleware (pfs_web.wsgi), against
  about 90 reports/s and 13 statements per report when the upload verified and stored each report
  itself. In process, one upload costs about 1.3 ms of which most is waiting for PostgreSQL's
  commit (a WAL flush: durability is kept, `synchronous_commit` stays on) and one Redis round trip
  (the `uploads` rate). A single sync worker answers about 1,200 uploads/s at 4 connections.
- **The target is met on a quiet machine, narrowly.** Before the first run the load average was
  1.9: nothing else ran. gthread with 2 workers accepts about 2,000 reports/s with p99 under 50 ms,
  and 4 workers about 2,150/s with p99 63 ms at 64 connections. The two cores run wrk, gunicorn,
  PostgreSQL and Redis together, which is what raises the load during the runs. With other work on
  the machine (load 4 to 8), the same bench gave at best 1,863 reports/s with p99 79 ms: the margin
  is thin, and a busy machine misses the target. Rows of one table differ run to run by about as
  much as the configurations do. gthread beats sync here, because threads overlap the commit waits.
- **Verification** runs the per-report checks (`reports_check`: two RSA verifications and two HPKE
  opens per report) with a few statements and one commit per chunk of 500: about 1,850 reports/s on
  one core, so one worker process keeps up with the uploads it can receive; Celery workers on more
  cores verify different chunks side by side (`SELECT ... FOR UPDATE SKIP LOCKED`).
- **End to end**, with a worker verifying beside the uploads on the same two cores, every report was
  verified about half a second after the last upload.
- What would move acceptance further: cores (the upload path is CPU-bound Python in gunicorn); a
  load generator on another machine; `synchronous_commit = off` for the upload statement only
  (fewer WAL flushes, at the price of losing the last few hundred milliseconds of acknowledged
  uploads if PostgreSQL crashes — a device was told 202 and will not resend), not done.
- A device learns only that its report was received; the aggregators' verdict shows in the
  round's progress (`reports_pending`, `reports_accepted`, `reports_rejected`), never per report.
"""


def wrk_answers(run: dict) -> str:
    """A wrk run's answers, as a table states them: "20,311 × 202", socket errors after them."""
    answers = ", ".join(f"{n:,} × {status}" for status, n in sorted(run["statuses"].items()))
    return answers + (f", {run['socket_errors']:,} socket errors" if run["socket_errors"] else "")


def versions() -> tuple[str, str]:
    """PostgreSQL's version, and wrk's."""
    postgres = subprocess.run(
        ["psql", "-h", "127.0.0.1", "-U", "postgres", "-tAc", "show server_version", "postgres"],
        capture_output=True,
        text=True,
    ).stdout.split()[0]
    return postgres, subprocess.run(["wrk", "-v"], capture_output=True, text=True).stdout.split()[1]


def write(path: Path, options, runs, verification, end_to_end, statements, sealing) -> None:
    version, wrk_version = versions()
    command = (
        f"`.venv/bin/python bench/upload.py --configs {options.configs} --connections {options.connections} "
        f"--seconds {options.seconds} --pool {options.pool} --verify {options.verify}`"
    )
    lines = [
        "# Upload ingestion: device reports into /api/device/reports/",
        "",
        f"Machine: {describe(tasks='gunicorn, Redis on loopback', memory=True, database=f'PostgreSQL {version}')}.",
        "",
        f"{command}: reports sealed beforehand by the device code (8 buckets, asymmetric OHE, a blind-signed "
        f"token each; {sealing:.0f} s to seal them), sent by wrk {wrk_version} ({WRK_THREADS} threads, a Lua "
        "script cycling through the sealed bodies) to gunicorn with DEBUG=0. wrk, gunicorn, PostgreSQL and "
        "Redis share the 2 cores. Sync workers close the connection after each answer: wrk reconnects, and "
        "its latencies do not count the reconnection.",
        "",
        f"Target (issue 7): {TARGET_RATE:,} reports/s accepted with p99 under {TARGET_P99_MS:g} ms.",
        "",
        "## (a) Acceptance: the upload answers 202",
        "",
        f"{options.seconds} s per run after a {WARM_SECONDS} s warm-up at 64 connections (gunicorn `--preload`), cycling through {options.pool:,} distinct reports; "
        "verification off (the upload path sends no task). Load average: the machine's 1-minute load "
        "before and after the run. The bench's own processes raise it during the runs; the value before the first run says whether other work shared the machine.",
        "",
        "| gunicorn | connections | answers | reports/s | p50 ms | p90 ms | p99 ms | max ms | load average |",
        "|---|---:|---|---:|---:|---:|---:|---:|---|",
    ]
    for r in runs:
        answers = wrk_answers(r)
        lines.append(
            f"| {r['config']} | {r['connections']} | {answers} | {r['rate']:,.0f} | {r['p50_ms']:.1f} | "
            f"{r['p90_ms']:.1f} | {r['p99_ms']:.1f} | {r['max_ms']:.1f} | {r['load'][0]:.1f} → {r['load'][1]:.1f} |"
        )
    meeting = [r for r in runs if r["rate"] >= TARGET_RATE and r["p99_ms"] < TARGET_P99_MS]
    best = max(runs, key=lambda r: r["rate"])
    if meeting:
        top = max(meeting, key=lambda r: r["rate"])
        verdict = (
            f"**Target met** for uploads by {len(meeting)} of {len(runs)} runs; the best: {top['config']}, "
            f"{top['connections']} connections, {top['rate']:,.0f} reports/s with p99 {top['p99_ms']:.0f} ms."
        )
    else:
        verdict = (
            f"**Target not met**: the fastest run ({best['config']}, {best['connections']} connections) "
            f"accepts {best['rate']:,.0f} reports/s with p99 {best['p99_ms']:.0f} ms."
        )
    lines += ["", verdict, "", f"SQL per upload: {', '.join(statements)} (autocommit: one round trip)."]
    v = verification
    lines += [
        "",
        "## (b) Verification: aggregation.ingest on the received reports",
        "",
        f"{options.verify:,} distinct reports uploaded once each with {best['config']} ({v['sent']:,} answers, "
        f"{v['upload_rate']:,.0f}/s; a few past the count are repeats, rejected as `token_reused`), then "
        f"`reports_ingest` in one process: {v['received']:,} received, {v['accepted']:,} accepted, "
        f"{v['rejected']:,} rejected, in {v['chunks']} chunks and {v['seconds']:.1f} s: "
        f"**{v['rate']:,.0f} reports/s verified and stored** on one core.",
    ]
    e = end_to_end
    done = e["pending"] == 0 and e["accepted"] >= options.verify
    lines += [
        "",
        "## (c) End to end: uploads with a worker verifying",
        "",
        f"{options.verify:,} more distinct reports, same server, a Celery worker with {e['concurrency']} processes "
        f"verifying while they arrive: uploaded in {e['uploaded_seconds']:.1f} s ({e['upload_rate']:,.0f}/s, "
        f"p99 {e['p99_ms']:.0f} ms), "
        + (
            f"all verified {e['verified_seconds']:.1f} s after the first upload"
            if done
            else f"**not all verified** after {e['verified_seconds']:.0f} s ({e['pending']:,} still pending)"
        )
        + f" ({e['accepted']:,} accepted, {e['rejected']:,} rejected); load average "
        f"{e['load'][0]:.1f} → {e['load'][1]:.1f}.",
    ]
    lines.append(READING)
    path.write_text("\n".join(lines))
    print(f"wrote {path}")


def _public_of(seed: bytes) -> bytes:
    return Ed25519PrivateKey.from_private_bytes(seed).public_key().public_bytes_raw()


if __name__ == "__main__":
    main()
