"""Benchmark: a whole heavy-hitters discovery over Poplar1, the helper aggregator as its own service.

Issue 32, requirement 4 (the time of a whole discovery). ``--devices`` devices of the demo fleet
(each its first typed word, as bench/poplar1_recall.py reads them) shard their word into a Poplar1
report of ``--bits`` bits (``privacy.vdaf.poplar1``, the devices' work, timed apart); the leader (this
process, SQLite, as ``make run``) keeps its shares and hands the helper its own
(``aggregation.heavy_hitters_leader.simulated_reports``); then ``analyses.services.heavy_hitters``
walks the tree a byte a level with the helper's service over HTTP (gunicorn,
``pfs_web.settings_helper``, 2 workers, its own SQLite file): each level's jobs (both aggregators'
verification in two rounds, the helper deciding every sketch), the stores, the release with both
noises. The alphabet is the demo words' letters; a prefix is kept above ``--z-score`` noise
deviations and the minimum cohort, at most ``--max-per-level``.

Each level's time is linear in the reports (every report is verified at every level), so the walk
is extrapolated linearly to 100,000 devices and set against issue 32's target: a whole discovery of
100,000 devices with 64-bit strings in at most 10 minutes on the two cores.

    .venv/bin/python bench/heavy_hitters.py                                   # writes bench/results/heavy_hitters.md
    .venv/bin/python bench/heavy_hitters.py --devices 200 --out /tmp/hh.md    # a quick check
"""

from __future__ import annotations

import argparse
import cProfile
import os
import secrets
import sys
import tempfile
import time
from pathlib import Path

from host import describe, helper_service, results_header  # bench/host.py: this script's folder is on sys.path

ROOT = Path(__file__).resolve().parent.parent
TARGET_DEVICES, TARGET_SECONDS = 100_000, 600.0
SECRET = secrets.token_urlsafe(32)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--devices", type=int, default=1000)
    parser.add_argument("--bits", type=int, default=64)
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--delta", type=float, default=1e-6)
    parser.add_argument("--min-cohort", type=int, default=20)
    parser.add_argument("--z-score", type=float, default=3.0)
    parser.add_argument("--max-per-level", type=int, default=20)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "heavy_hitters.md"))
    args = parser.parse_args()
    load_before = " ".join(f"{x:.2f}" for x in os.getloadavg())
    with tempfile.TemporaryDirectory() as tmp, helper_service(Path(tmp), secret=SECRET) as helper:
        os.environ.update(
            {
                "DJANGO_SETTINGS_MODULE": "pfs_web.settings",
                "PFS_ENV_FILE": os.devnull,
                "DEBUG": "0",
                "SECRET_KEY": "bench",
                "LOG_LEVEL": "WARNING",
                "DATABASE_URL": f"sqlite:///{tmp}/leader.sqlite3",
                "PFS_HELPER_TRANSPORT": "http",
                "HELPER_URL": helper.url,
                "PFS_AGGREGATOR_AUTH_SECRET": SECRET,
            }
        )
        result = run(args)
    load_after = " ".join(f"{x:.2f}" for x in os.getloadavg())
    busy = max(float(load_before.split()[0]), float(load_after.split()[0])) > 2.5
    context = {
        "load_before": load_before,
        "load_after": load_after,
        "busy": busy,
        "command": " ".join([".venv/bin/python bench/heavy_hitters.py", *sys.argv[1:]]),
    }
    Path(args.out).write_text(render(args, result, context))
    print(Path(args.out).read_text())


def run(args: argparse.Namespace) -> dict:
    import django

    sys.path.insert(0, str(ROOT))
    django.setup()
    from django.core.management import call_command

    import analyses.services.heavy_hitters as walker
    from aggregation import heavy_hitters_leader as leader
    from bench.poplar1_recall import fleet_words
    from devices.synthetic import TOKENS
    from privacy.heavy_hitters import WalkPlan, word_bits

    call_command("migrate", verbosity=0)
    indices = fleet_words(args.devices)
    words = [TOKENS[i] for i in indices[indices >= 0]]
    alphabet = bytes(sorted({ord(c) for w in TOKENS for c in w}))
    measurements = [word_bits(word, args.bits) for word in words]
    rules = leader.collection_open(
        collection_key="bench/heavy-hitters",
        bits=args.bits,
        min_cohort=args.min_cohort,
        epsilon=args.epsilon,
        delta=args.delta,
        levels=args.bits // 8,
    )
    # The devices' sharding, timed apart: on a fleet each device shards its own word.
    from aggregation import heavy_hitters as hh
    from privacy.vdaf.poplar1 import Poplar1

    vdaf, ctx = Poplar1(args.bits), hh.context(rules.key)
    sample = measurements[:50]
    started = time.process_time()
    for measurement in sample:
        vdaf.shard(ctx, measurement, hh.nonce_new(), secrets.token_bytes(vdaf.RAND_SIZE))
    shard_ms = (time.process_time() - started) / len(sample) * 1000
    started = time.perf_counter()
    leader.simulated_reports(rules, measurements)
    upload = time.perf_counter() - started

    levels: list[dict] = []
    real_level_run = walker.level_run

    def timed(key: str, agg_param: tuple) -> object:
        wall, cpu = time.perf_counter(), time.process_time()
        release = real_level_run(key, agg_param)
        levels.append(
            {
                "level": agg_param[0],
                "asked": len(agg_param[1]),
                "reports": release.reports,
                "seconds": time.perf_counter() - wall,
                "leader_cpu": time.process_time() - cpu,
            }
        )
        return release

    walker.level_run = timed
    plan = WalkPlan(bits=args.bits, alphabet=alphabet, z=args.z_score, max_per_level=args.max_per_level)
    # With PFS_BENCH_PROFILE=<path> the walk runs under cProfile (the leader's side), saved to <path>,
    # its jobs one at a time: cProfile sees this thread only.
    profile = cProfile.Profile() if os.environ.get("PFS_BENCH_PROFILE") else None
    if profile is not None:
        leader.JOBS_IN_FLIGHT = 1
    started = time.perf_counter()
    if profile is not None:
        profile.enable()
    walk = walker.heavy_hitters_walk(rules.key, plan)
    if profile is not None:
        profile.disable()
        profile.dump_stats(os.environ["PFS_BENCH_PROFILE"])
    walk_seconds = time.perf_counter() - started
    return {
        "devices": len(words),
        "shard_ms": shard_ms,
        "upload": upload,
        "walk": walk_seconds,
        "levels": levels,
        "found": sorted(walk.words.items(), key=lambda item: -item[1]),
        "sigma": walk.sigma,
        "machine": describe(tasks="this process and the helper's service", memory=True),
    }


def render(args: argparse.Namespace, result: dict, context: dict) -> str:
    devices = result["devices"]
    scale = TARGET_DEVICES / devices
    walk_100k = result["walk"] * scale
    lines = results_header(
        "Heavy hitters over Poplar1: a whole discovery through both aggregators",
        machine=result["machine"],
        context=context,
        busy="other work shared the two cores; the times are slow.",
    )
    lines += [
        f"{devices:,} devices of the demo fleet (each its first typed word; bench/poplar1_recall.py), "
        f"{args.bits}-bit strings, a byte a level ({args.bits // 8} levels), total ε = {args.epsilon:g} at "
        f"δ = {args.delta:g} (each aggregator's σ = {result['sigma']:.2f} a level), minimum cohort "
        f"{args.min_cohort}, kept above {args.z_score:g} noise deviations, at most {args.max_per_level} a level. "
        "The leader is this process (SQLite), the helper its own service (gunicorn, 2 workers, SQLite) "
        "over HTTP.",
        "",
        f"- The devices' sharding: {result['shard_ms']:.1f} ms of CPU a report (on each device).",
        f"- Upload to both aggregators (the leader's store, the helper's over HTTP): {result['upload']:.1f} s.",
        f"- The walk: **{result['walk']:.1f} s** for {devices:,} devices, so about "
        f"**{walk_100k / 60:.0f} minutes for {TARGET_DEVICES:,}** (linear in the reports), against the "
        f"target of {TARGET_SECONDS / 60:.0f} minutes: "
        + ("met." if walk_100k <= TARGET_SECONDS else f"{walk_100k / TARGET_SECONDS:.1f} × the target, not met."),
        "",
        "| level | prefixes asked | reports verified | seconds | the leader's CPU (s) |",
        "|---:|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {lv['level']} | {lv['asked']:,} | {lv['reports']:,} | {lv['seconds']:.1f} | {lv['leader_cpu']:.1f} |"
        for lv in result["levels"]
    ]
    found = ", ".join(f"{word} ({count})" for word, count in result["found"][:20])
    lines += ["", f"Words found ({len(result['found'])}), the first 20 by noisy count: {found}.", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
