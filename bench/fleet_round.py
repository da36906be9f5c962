"""Benchmark: one round over a simulated fleet, dispatch to release, on the embedded default.

Runs each workload in a fresh process: a temporary SQLite database, tasks inline (no broker), a
synthetic fleet, an approved analysis, and a BucketedType recipe of K buckets under asymmetric OHE
at epsilon0 = 4, every device privatizing with its own coins. Reports wall time from dispatch to
release and the peak resident memory of the process. Writes bench/results/fleet_round.md.

    .venv/bin/python bench/fleet_round.py            # the default table
    .venv/bin/python bench/fleet_round.py 100000 1024
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORKLOADS = [(10_000, 64), (100_000, 64), (100_000, 1_024), (1_000_000, 1_024)]


def run_one(devices: int, buckets: int) -> dict:
    import django

    sys.path.insert(0, str(ROOT))
    os.environ["DJANGO_SETTINGS_MODULE"] = "pfs_web.settings_test"
    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    from analyses import services
    from analyses.models import Round
    from devices.fleet_io import fleet_create

    call_command("migrate", verbosity=0)
    officer = get_user_model().objects.create_user("officer", is_staff=True)
    fleet = fleet_create(name="bench", size=devices, seed=1, shard_size=int(os.environ.get("PFS_SHARD_SIZE", 10_000)))
    spec = {
        "identifier": "bench",
        "fleet": "bench",
        "queryClass": {"stream": "ModelMetrics", "fields": ["perplexity"], "cohortFields": []},
        "budget": {"epsilon": 10.0, "reports": 10, "delta": 1e-6},
        "fields": {"perplexity": {"localEpsilon": 8.0, "epsilon": 10.0, "reports": 10}},
    }
    analysis = services.analysis_approve(analysis=services.analysis_create(spec=spec, owner=officer), officer=officer)
    # K buckets: OOV + K - 1 boundaries spread over the perplexity range.
    boundaries = [10 + 90 * i / (buckets - 1) for i in range(buckets - 1)]
    recipe = {
        "query": "select perplexity from ModelMetrics",
        "dataTypeContent": {"perplexity": {"dataType": "BucketedType", "boundaries": boundaries}},
        "privacy": {"mechanism": "asymmetric_ohe", "epsilon0": 4.0, "epsilon": 2.0, "delta": 1e-6},
    }
    recipe_obj = services.recipe_create(analysis=analysis, content=recipe, user=officer)
    round_ = Round.objects.create(recipe=recipe_obj, seed=7, created_by=officer)
    from analyses import tasks

    start = time.perf_counter()
    tasks.dispatch_round.apply(args=(round_.pk,), throw=True)
    elapsed = time.perf_counter() - start
    round_.refresh_from_db()
    assert round_.status == Round.Status.RELEASED, round_.error
    return {
        "devices": devices,
        "buckets": buckets,
        "shards": fleet.shards.count(),
        "seconds": elapsed,
        "reports": round_.release.content["reports"],
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def machine() -> str:
    from host import describe  # bench/host.py: this script's folder is on sys.path

    return describe(tasks="tasks inline")


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--one":
        print(json.dumps(run_one(int(sys.argv[2]), int(sys.argv[3]))))
        return
    workloads = [(int(sys.argv[1]), int(sys.argv[2]))] if len(sys.argv) == 3 else WORKLOADS
    rows = []
    for devices, buckets in workloads:
        with tempfile.TemporaryDirectory() as tmp:
            env = {**os.environ, "DATABASE_URL": f"sqlite:///{tmp}/bench.sqlite3", "SECRET_KEY": "bench"}
            out = subprocess.run(
                [sys.executable, __file__, "--one", str(devices), str(buckets)],
                env=env,
                check=True,
                capture_output=True,
                text=True,
            ).stdout
        row = json.loads(out.strip().splitlines()[-1])
        rows.append(row)
        print(
            f"{devices:>9,} devices × {buckets:>5} buckets: {row['seconds']:6.2f} s, peak {row['peak_rss_mib']:.0f} MiB",
            flush=True,
        )
    table = [
        "| devices | buckets | shards | dispatch → release (s) | devices/s | peak RSS (MiB) |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        table.append(
            f"| {r['devices']:,} | {r['buckets']:,} | {r['shards']} | {r['seconds']:.2f} | {r['devices'] / r['seconds']:,.0f} | {r['peak_rss_mib']:.0f} |"
        )
    results = ROOT / "bench" / "results"
    results.mkdir(exist_ok=True)
    (results / "fleet_round.md").write_text(
        f"# Fleet round: dispatch to release\n\nMachine: {machine()}. Date: {time.strftime('%Y-%m-%d')}.\n"
        f"Asymmetric OHE, epsilon0 = 4, every device with its own coins; `bench/fleet_round.py`.\n\n"
        + "\n".join(table)
        + "\n"
    )
    print("\n".join(table))


if __name__ == "__main__":
    main()
