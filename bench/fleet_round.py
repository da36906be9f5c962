"""Benchmark: one round over a simulated fleet, from the API call that starts it to its release.

Three paths, each workload in a fresh process and a fresh database, the helper aggregator beside it
as its own service (gunicorn, ``pfs_web.settings_helper``, its own SQLite file: bench/host.py's
helper_service), reached over HTTP as the product reaches it (``PFS_HELPER_TRANSPORT=http``):

- ``inline``: the embedded default, Celery-less: a SQLite file, tasks inline (the API call
  returns once the round is released), DEBUG off.
- ``inline-pg``: the same in-process path on PostgreSQL, to separate the database from the task path.
- ``worker``: as deployed: PostgreSQL, and a real ``celery -A pfs_web worker --concurrency=2``
  consuming from Redis; the clock runs from the API call until the Release row exists.

Each run: a synthetic fleet (``PFS_SHARD_SIZE`` devices per shard, default 25,000), an approved
analysis, and a BucketedType recipe of K buckets under asymmetric OHE at epsilon0 = 4, started
with ``POST /api/recipes/<id>/rounds/`` (DRF's test client in the process). Devices privatize
with their own coins, except where a shard's devices × buckets exceed 2^26 coins: there the
shard draws the sum of its reports from its exact distribution (privacy.randomizer_support), as
the product does. Beside each round, in the same process and run: the time of 10^9 uniform float64
draws (numpy, 10^7 at a time), the work a dense per-device sampler at 10^6 devices × 1,024 buckets
cannot avoid, and each round's time as a multiple of it. Writes bench/results/fleet_round.md (or
``--out``).

    .venv/bin/python bench/fleet_round.py                                  # the committed table
    .venv/bin/python bench/fleet_round.py --devices 10000 --buckets 64 --out /tmp/fleet.md   # a quick check

The inline-pg and worker paths need PostgreSQL (``--postgres``, a database ``pfs_bench_fleet``
dropped and made anew for each run) and Redis (``--redis-url``, a database of the bench's own).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import resource
import secrets
import subprocess
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path

from host import (  # bench/host.py: this script's folder is on sys.path
    describe,
    helper_service,
    process_group_stop,
    results_header,
)

ROOT = Path(__file__).resolve().parent.parent
DEVICES = [10_000, 100_000, 1_000_000]
BUCKETS = [64, 1_024, 16_384]
PATHS = {
    "inline": "in-process, tasks inline, SQLite (the embedded default)",
    "inline-pg": "in-process, tasks inline, PostgreSQL",
    "worker": "Celery worker (--concurrency=2) over Redis, PostgreSQL",
}
# Seconds one round may take (``--timeout``; the 10^7-device run needs more); a slower one is
# reported, not waited for.
RUN_TIMEOUT = float(os.environ.get("PFS_BENCH_ROUND_TIMEOUT", 240))
# 10^9 uniform draws, 10^7 at a time: one per device and bucket at 10^6 × 1,024, in 80 MB arrays.
DRAWS, DRAWS_CHUNK = 10**9, 10**7
EXACT_SUM_ABOVE = 1 << 26  # privacy.randomizer_support's default, restated for the table's sampler column
BENCH_DB = "pfs_bench_fleet"
HELPER_SECRET = secrets.token_urlsafe(32)  # the aggregator auth secret both services of a run share


# --- one workload, in its own process -----------------------------------------------------------


def run_one(path: str, devices: int, buckets: int) -> dict:
    import django

    sys.path.insert(0, str(ROOT))
    django.setup()
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from rest_framework.test import APIClient

    from analyses.models import Release
    from analyses.services.policy import analysis_approve, analysis_create
    from analyses.services.recipes import recipe_create
    from devices.fleet_io import fleet_create

    call_command("migrate", verbosity=0)  # the leader's store; the helper's service migrated its own
    officer = get_user_model().objects.create_user("officer", is_staff=True)
    built = time.perf_counter()
    fleet = fleet_create(name="bench", size=devices, seed=1, shard_size=settings.PFS_SHARD_SIZE)
    built = time.perf_counter() - built
    fleet_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    spec = {
        "identifier": "bench",
        "fleet": "bench",
        "queryClass": {"stream": "ModelMetrics", "fields": ["perplexity"], "cohortFields": []},
        "budget": {"epsilon": 10.0, "reports": 10, "delta": 1e-6},
        "fields": {"perplexity": {"localEpsilon": 8.0, "epsilon": 10.0, "reports": 10}},
    }
    analysis = analysis_approve(analysis=analysis_create(spec=spec, owner=officer), officer=officer)
    # K buckets: OOV + K - 1 boundaries spread over the perplexity range.
    boundaries = [10 + 90 * i / (buckets - 1) for i in range(buckets - 1)]
    recipe = {
        "query": "select perplexity from ModelMetrics",
        "dataTypeContent": {"perplexity": {"dataType": "BucketedType", "boundaries": boundaries}},
        "privacy": {"mechanism": "asymmetric_ohe", "epsilon0": 4.0, "epsilon": 2.0, "delta": 1e-6},
    }
    recipe_obj = recipe_create(analysis=analysis, content=recipe, user=officer)
    client = APIClient()
    client.force_authenticate(officer)
    worker = CeleryWorker() if path == "worker" else None
    try:
        if worker is not None:
            worker.wait_ready()
        # The process serves a request first, as a server has before anyone starts a round: the
        # first request of a process loads the URL configuration and the API's middleware (Redis's
        # client among them), about 0.3 s that would otherwise fall in the first round.
        warm = client.get(f"/api/recipes/{recipe_obj.pk}/")
        assert warm.status_code == 200, warm.content
        # Two rounds of the same recipe: the first on the fresh fleet, whose shards each lose the
        # keyboard phrases past retention before the query runs (pfs_device.streams: the synthetic
        # fleet holds 60 days, retention keeps 30), so it rewrites every shard; the next finds
        # nothing to expire, as every round after a fleet's first does.
        elapsed, cpu, round_id = timed_round(client, recipe_obj.pk, "first")
        elapsed_next, cpu_next, _ = timed_round(client, recipe_obj.pk, "next")
        worker_rss = worker.peak_rss_mib() if worker is not None else None
    finally:
        if worker is not None:
            worker.stop()
    release = Release.objects.get(round_id=round_id)
    draws = draws_seconds()
    return {
        "path": path,
        "devices": devices,
        "buckets": buckets,
        "shards": fleet.shards.count(),
        "shard_size": settings.PFS_SHARD_SIZE,
        "fleet_seconds": built,
        "fleet_peak_rss_mib": fleet_rss,
        "seconds": elapsed,
        "seconds_next": elapsed_next,
        "cpu_seconds": cpu,
        "cpu_seconds_next": cpu_next,
        "draws_seconds": draws,
        "reports": release.content["reports"],
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "worker_peak_rss_mib": worker_rss,
    }


def timed_round(client: object, recipe_id: int, label: str) -> tuple[float, float, int]:
    """Seconds from the API call that starts a round of the recipe until its release exists, the CPU
    seconds this process spent meanwhile (all of an in-process round's work), and the round's id.

    With ``PFS_BENCH_PROFILE=<path>`` the round runs under cProfile, saved to ``<path>.<label>``.
    """
    from analyses.models import Release

    profile = cProfile.Profile() if os.environ.get("PFS_BENCH_PROFILE") else None
    if profile is not None:
        profile.enable()
    start, cpu_start = time.perf_counter(), time.process_time()
    answer = client.post(f"/api/recipes/{recipe_id}/rounds/")  # type: ignore[attr-defined]
    assert answer.status_code == 202, answer.content
    round_id = answer.json()["id"]
    deadline = time.monotonic() + RUN_TIMEOUT
    while not Release.objects.filter(round_id=round_id).exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"no release after {RUN_TIMEOUT:.0f} s")
        time.sleep(0.02)
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    if profile is not None:
        profile.disable()
        profile.dump_stats(f"{os.environ['PFS_BENCH_PROFILE']}.{label}")
    return elapsed, cpu, round_id


def draws_seconds() -> float:
    """Seconds for DRAWS uniform float64 draws, a new array of DRAWS_CHUNK each time, as a dense
    per-device sampler would draw them (one per device and bucket), in this process."""
    import numpy as np

    rng = np.random.default_rng(1)
    started = time.perf_counter()
    for _ in range(DRAWS // DRAWS_CHUNK):
        rng.random(DRAWS_CHUNK)
    return time.perf_counter() - started


class CeleryWorker:
    """``celery -A pfs_web worker --concurrency=2`` on this process's database and a queue of its own."""

    def __init__(self) -> None:
        self.hostname = f"pfs-bench-{os.getpid()}"
        self.log = tempfile.NamedTemporaryFile("w+", suffix=".log", prefix="pfs-bench-worker-")  # noqa: SIM115
        self.process = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "pfs_web", "worker", "--loglevel=WARNING", "--concurrency=2"]
            + ["--hostname", f"{self.hostname}@%h", "--without-gossip", "--without-mingle"]
            + ["--queues", os.environ["PFS_TASK_QUEUE"]],
            cwd=ROOT,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def wait_ready(self, timeout: float = 60.0) -> None:
        from pfs_web.celery import app

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the worker exited with {self.process.returncode}: {self._log_tail()}")
            if app.control.ping(destination=[f"{self.hostname}@{os.uname().nodename}"], timeout=0.5):
                return
        raise RuntimeError(f"the worker did not answer within {timeout:.0f} s: {self._log_tail()}")

    def peak_rss_mib(self) -> float:
        """The largest peak RSS among the worker's processes (the main one and its pool)."""
        pids, peaks = [self.process.pid], []
        while pids:
            pid = pids.pop()
            try:
                status = Path(f"/proc/{pid}/status").read_text()
                pids += [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
            except OSError:
                continue
            peaks += [int(line.split()[1]) / 1024 for line in status.splitlines() if line.startswith("VmHWM:")]
        return max(peaks, default=0.0)

    def stop(self) -> None:
        process_group_stop(self.process, timeout=30)
        self.log.close()

    def _log_tail(self) -> str:
        self.log.flush()
        self.log.seek(0)
        return self.log.read()[-3000:]


# --- the grid -----------------------------------------------------------------------------------


def fresh_database(admin_url: str, name: str) -> str:
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as admin:
        for database in (name, f"{name}_issuer"):  # and the issuer's own store; the helper has its service's
            admin.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
            admin.execute(f'CREATE DATABASE "{database}"')
    return urllib.parse.urlsplit(admin_url)._replace(path=f"/{name}").geturl()


def child_env(path: str, tmp: str, args: argparse.Namespace, helper_url: str) -> dict[str, str]:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "pfs_web.settings",
        "PFS_ENV_FILE": os.devnull,  # nothing from this checkout's .env
        "DEBUG": "0",
        "SECRET_KEY": "bench",
        "ALLOWED_HOSTS": "testserver",
        "LOG_LEVEL": "WARNING",
        # The helper as the product reaches it: its own service, over HTTP, with the shared secret.
        "PFS_HELPER_TRANSPORT": "http",
        "HELPER_URL": helper_url,
        "PFS_AGGREGATOR_AUTH_SECRET": HELPER_SECRET,
        # No request limit in the way: one round start per run is far below any rate anyway.
        "PFS_ROUND_START_RATE": "1000/minute",
    }
    if path == "inline":
        return {**env, "PFS_TASK_MODE": "sync", "DATABASE_URL": f"sqlite:///{tmp}/b.sqlite3"}
    database_url = fresh_database(args.postgres, BENCH_DB)
    if path == "inline-pg":
        return {**env, "PFS_TASK_MODE": "sync", "DATABASE_URL": database_url}
    return {
        **env,
        "DATABASE_URL": database_url,
        "REDIS_URL": args.redis_url,
        "PFS_TASK_MODE": "celery",
        "PFS_TASK_QUEUE": f"bench-fleet-{os.getpid()}",
    }


def run_workload(path: str, devices: int, buckets: int, args: argparse.Namespace) -> dict:
    with tempfile.TemporaryDirectory() as tmp, helper_service(Path(tmp), secret=HELPER_SECRET) as helper:
        env = child_env(path, tmp, args, helper.url)
        try:
            done = subprocess.run(
                [sys.executable, __file__, "--one", path, str(devices), str(buckets)],
                env=env,
                capture_output=True,
                text=True,
                # Two rounds, and fleet building and migrations on top (a fleet of 10^7 takes minutes).
                timeout=2 * args.timeout + max(120, devices / 10_000),
            )
        except subprocess.TimeoutExpired:
            return {"path": path, "devices": devices, "buckets": buckets, "failed": "stopped: over the time limit"}
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["?"])[-1]
        return {"path": path, "devices": devices, "buckets": buckets, "failed": last[:200]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def shard_size(rows: list[dict]) -> int | None:
    """Devices per shard, as the runs' fleets were built (the product's default, or PFS_SHARD_SIZE);
    None when no run got as far."""
    return next((row["shard_size"] for row in rows if "shard_size" in row), None)


def sampler(devices: int, buckets: int, size: int | None) -> str:
    if size is None:
        return "—"
    per_shard = min(devices, size) * buckets
    return "exact sum" if per_shard > EXACT_SUM_ABOVE else "per-device coins"


def machine() -> str:
    return describe(tasks="tasks as each path says", memory=True, database="SQLite or PostgreSQL as each path says")


def load_text() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def render(rows: list[dict], paths: list[str], context: dict) -> str:
    in_process = [p for p in paths if p != "worker"]  # the worker's CPU is not this process's
    lines = [
        *results_header(
            "Fleet round: API call to release",
            machine=context["machine"],
            context=context,
            busy="the numbers are noisy and slow.",
        ),
        f"Asymmetric OHE at epsilon0 = 4, one batch (no cohorts), {shard_size(rows) or 0:,} devices per shard "
        "(`PFS_SHARD_SIZE`). The clock runs from "
        "`POST /api/recipes/<id>/rounds/` until the release exists; building the fleet and starting the worker "
        "are not timed. The helper aggregator runs as its own service (gunicorn, `pfs_web.settings_helper`, "
        "2 workers, its own SQLite file) on the same machine; the leader reaches it over HTTP, one request "
        "per shard for the shard's helper shares and a few per round. Sampler: per-device coins, or, where one shard's devices × buckets exceed 2^26, the sum "
        "of the shard's reports drawn from its exact distribution (what the product does, "
        "privacy.randomizer_support). Paths:",
        "",
    ]
    lines += [f"- `{p}`: {PATHS[p]}" for p in paths]
    lines += [
        "",
        "Peak RSS: the in-process paths' whole process (building the fleet included); for the worker, the "
        "largest of its processes (each pool process holds one shard at a time).",
        "",
        "Before them the process serves one API request (the recipe's detail): a server has served "
        "requests before anyone starts a round, and a process's first request loads the URL "
        "configuration and the API's middleware. "
        "Two rounds of the same recipe run one after the other: *first* on the fresh fleet (before the "
        "query, each shard deletes the keyboard phrases past their 30-day retention, half of what the "
        "synthetic fleet holds, and is rewritten), *next* on the same fleet (nothing left to expire, as in "
        "every round after a fleet's first). CPU: the seconds of CPU the in-process paths' process spent "
        "on each round (first / next): on a shared machine, the wall-clock time minus the waits for a core "
        "and for the disk.",
        "",
        f"Draws: {DRAWS:,} uniform float64 draws by numpy (`default_rng(1).random({DRAWS_CHUNK:_})`, a new array "
        "each time), timed in the same process right after its rounds: what a dense per-device sampler "
        "cannot avoid at 10^6 devices × 1,024 buckets (one draw per device and bucket). ÷ draws: each "
        "round's time (first / next) over it; issue 28's target for 10^6 × 1,024 on `inline`: at most 0.75.",
        "",
        "| devices | buckets | shards | sampler | fleet built (s) | "
        + " | ".join(f"{p} first (s) | {p} next (s)" for p in paths)
        + " | "
        + " | ".join(f"{p} CPU (s)" for p in in_process)
        + (" | " if in_process else "")
        + " | ".join(f"{p} peak RSS (MiB)" for p in paths)
        + " | "
        + " | ".join(f"{p} draws (s) | {p} ÷ draws" for p in paths)
        + " |",
        "|---:|---:|---:|---|---:|" + "---:|" * (5 * len(paths) + len(in_process)),
    ]
    by_key = {(r["path"], r["devices"], r["buckets"]): r for r in rows}
    failures = []
    for devices, buckets in context["grid"]:
        cells = [by_key.get((p, devices, buckets)) for p in paths]
        shards = next((c["shards"] for c in cells if c and "shards" in c), "—")
        built = next((f"{c['fleet_seconds']:.1f}" for c in cells if c and "fleet_seconds" in c), "—")
        secs, cpus, rss, draws = [], [], [], []
        for p, c in zip(paths, cells, strict=True):
            if c is None or "failed" in c:
                secs += ["—", "—"]
                cpus += ["—"] if p in in_process else []
                rss.append("—")
                draws += ["—", "—"]
                if c is not None:
                    failures.append(f"{p}, {devices:,} × {buckets:,}: {c['failed']}")
                continue
            secs += [f"{c['seconds']:.2f}", f"{c['seconds_next']:.2f}"]
            cpus += [f"{c['cpu_seconds']:.2f} / {c['cpu_seconds_next']:.2f}"] if p in in_process else []
            peak = c["worker_peak_rss_mib"] if c.get("worker_peak_rss_mib") is not None else c["peak_rss_mib"]
            rss.append(f"{peak:.0f}")
            ratios = f"{c['seconds'] / c['draws_seconds']:.2f} / {c['seconds_next'] / c['draws_seconds']:.2f}"
            draws += [f"{c['draws_seconds']:.2f}", ratios]
        lines.append(
            f"| {devices:,} | {buckets:,} | {shards} | {sampler(devices, buckets, shard_size(rows))} | {built} | "
            + " | ".join(secs + cpus + rss + draws)
            + " |"
        )
    if failures:
        lines += ["", "Not measured:", ""] + [f"- {f}" for f in failures]
    else:
        limit = context["timeout"]
        lines += ["", f"Every combination of the grid ran: none stopped at the {limit:.0f}-second limit of a round."]
    lines.append("")
    return "\n".join(lines)


def main() -> None:
    if len(sys.argv) == 5 and sys.argv[1] == "--one":
        print(json.dumps(run_one(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))))
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ints = lambda text: [int(x) for x in text.split(",")]  # noqa: E731
    parser.add_argument("--devices", type=ints, default=DEVICES, help="fleet sizes, comma-separated")
    parser.add_argument("--buckets", type=ints, default=BUCKETS, help="bucket counts, comma-separated")
    parser.add_argument("--paths", type=lambda text: text.split(","), default=list(PATHS), help=", ".join(PATHS))
    parser.add_argument("--postgres", default="postgres://postgres@127.0.0.1:5432/postgres", help="admin URL")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/14", help="a Redis database of the bench's own")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "fleet_round.md")
    parser.add_argument("--timeout", type=float, default=RUN_TIMEOUT, help="seconds one round may take")
    args = parser.parse_args()
    os.environ["PFS_BENCH_ROUND_TIMEOUT"] = str(args.timeout)  # the workloads' processes read it
    unknown = set(args.paths) - set(PATHS)
    if unknown:
        parser.error(f"unknown paths {sorted(unknown)}: choose from {', '.join(PATHS)}")
    load_before = load_text()
    grid = [(d, b) for d in args.devices for b in args.buckets]
    rows = []
    for devices, buckets in grid:
        for path in args.paths:
            row = run_workload(path, devices, buckets, args)
            rows.append(row)
            if "failed" in row:
                print(f"{path:>9} {devices:>9,} devices × {buckets:>6,} buckets: {row['failed']}", flush=True)
                continue
            print(
                f"{path:>9} {devices:>9,} devices × {buckets:>6,} buckets: {row['seconds']:7.2f} s, "
                f"next round {row['seconds_next']:7.2f} s (CPU {row['cpu_seconds']:.2f}, {row['cpu_seconds_next']:.2f} s), "
                f"peak {row['worker_peak_rss_mib'] or row['peak_rss_mib']:.0f} MiB, "
                f"10^9 draws {row['draws_seconds']:.2f} s",
                flush=True,
            )
    context = {
        "machine": machine(),
        "load_before": load_before,
        "load_after": load_text(),
        "busy": max(float(x) for x in load_before.split()[:2]) > 0.5,
        "command": (
            ("" if "PFS_SHARD_SIZE" not in os.environ else f"PFS_SHARD_SIZE={os.environ['PFS_SHARD_SIZE']} ")
            + f".venv/bin/python bench/fleet_round.py {' '.join(sys.argv[1:])}".strip()
        ),
        "grid": grid,
        "timeout": args.timeout,
    }
    text = render(rows, args.paths, context)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
