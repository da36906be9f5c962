"""Benchmark: a release of 16,384 buckets x 100 cohorts — aggregation, debiasing, intervals.

Stores two uploads (leader and helper shares of two shards) per cohort batch, then times
`collection_release` (each aggregator sums and deletes its shares, the collector combines and
debiases) and the presentation of the release with simultaneous intervals. Temporary SQLite.

    .venv/bin/python bench/release.py
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
BUCKETS, COHORTS, SHARDS, REPORTS_PER_SHARD = 16_384, 100, 2, 5_000


def main() -> None:
    tmp = tempfile.mkdtemp()
    os.environ.update(
        DATABASE_URL=f"sqlite:///{tmp}/bench.sqlite3",
        SECRET_KEY="bench",
        DJANGO_SETTINGS_MODULE="pfs_web.settings_test",
    )
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.core.management import call_command

    from aggregation.services import collection_rules_open
    from aggregation.upload import BatchPair, shard_shares_upload
    from analyses.services.collector import ClientNoiseEstimator, collection_release
    from privacy import field
    from privacy.intervals import present, z_value
    from privacy.mechanisms import AsymmetricOHE

    call_command("migrate", verbosity=0)
    call_command("migrate", database="helper", verbosity=0)  # the helper's own store (pfs_base.db_router)
    mechanism = AsymmetricOHE(epsilon0=4.0)
    rng = np.random.default_rng(3)
    timings = []
    for repetition in range(3):
        key = f"bench/{repetition}"
        collection_rules_open(key=key, length=BUCKETS, min_cohort=1_000, weight_bound=1)
        for cohort in range(COHORTS):
            for shard in range(SHARDS):
                values = rng.integers(0, BUCKETS, size=REPORTS_PER_SHARD)
                counts = (
                    mechanism.privatize_sum(values, BUCKETS, rng)
                    if shard == 0 and cohort == 0
                    else rng.binomial(REPORTS_PER_SHARD, mechanism.p_other, size=BUCKETS)
                )
                leader, helper = field.split(field.to_field(counts), rng)
                pair = BatchPair(f"cohort={cohort}", leader, helper, reports=REPORTS_PER_SHARD, min_cohort=1_000)
                shard_shares_upload(collection_key=key, source=f"shard:{shard}", batches=[pair])
        start = time.perf_counter()
        estimator = ClientNoiseEstimator(mechanism="asymmetric_ohe", epsilon0=4.0, domain_size=BUCKETS)
        batches = collection_release(collection_key=key, estimator=estimator)
        z = z_value(level=0.95, cells=BUCKETS * COHORTS, intervals="simultaneous")
        for batch in batches:
            present(batch.estimates, batch.standard_errors, z=z, view="raw")
        timings.append(time.perf_counter() - start)
        assert len(batches) == COHORTS and not any(b.suppressed for b in batches)
    cpu = next(
        line.split(":", 1)[1].strip()
        for line in Path("/proc/cpuinfo").read_text().splitlines()
        if line.startswith("model name")
    )
    table = (
        "# Release: aggregation, debiasing and intervals\n\n"
        f"Machine: {os.cpu_count()} cores ({cpu}), Python {sys.version.split()[0]}, numpy {np.__version__}, SQLite. "
        f"Date: {time.strftime('%Y-%m-%d')}. Command: `.venv/bin/python bench/release.py`.\n\n"
        "| buckets | cohorts | uploads per aggregator | median (s) | worst (s) | target (s) |\n|---:|---:|---:|---:|---:|---:|\n"
        f"| {BUCKETS:,} | {COHORTS} | {COHORTS * SHARDS} | {statistics.median(timings):.3f} | {max(timings):.3f} | 1.0 |\n"
    )
    (ROOT / "bench" / "results" / "release.md").write_text(table)
    print(table)


if __name__ == "__main__":
    main()
