"""Check 3's minimum cohort: seed 000's closed form against the bound proven per mechanism, and its cost.

    .venv/bin/python bench/min_cohort.py    # writes bench/results/min_cohort.md
    .venv/bin/python bench/min_cohort.py --fleets-only    # rewrites only its last section (no timing)

For the demo recipes (the age field of demo.keyboard, epsilon 0.3; the perplexity recipe of
docs/examples/perplexity.json, epsilon 1; both delta 1e-6) at epsilon0 1, 2, 4 and 8, per family of
mechanisms (privacy.enforced_cohort.BOUNDS), the cohort by the closed form
(privacy.amplification.min_cohort_closed_form, what devices enforce today) and by
privacy.enforced_cohort.min_cohort_enforced, with the cost of an uncached (cold) and a memoized
(warm) call. Then the cold cost over the whole demo range of the issue, and what the change means
for fleets: the smallest fleet that can answer, and the demo fleet's locale cohorts that stop being
suppressed.
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import math
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import scipy  # noqa: E402
from host import describe  # noqa: E402  (bench/host.py: this script's folder is on sys.path)

from devices.synthetic import LOCALE_WEIGHTS, LOCALES  # noqa: E402
from privacy import enforced_cohort  # noqa: E402
from privacy.amplification import min_cohort_closed_form  # noqa: E402
from privacy.enforced_cohort import BOUNDS, min_cohort_enforced  # noqa: E402

RECIPES = [("age (demo.keyboard)", 0.3, 1e-6), ("perplexity (docs/examples)", 1.0, 1e-6)]
EPSILONS0 = [1.0, 2.0, 4.0, 8.0]
# The demo range of the issue, for the cold-cost sweep.
RANGE_EPSILONS0 = [0.5, 1.0, 2.0, 4.0, 8.0]
RANGE_EPSILONS = [0.1, 0.3, 0.5, 1.0, 2.0]
RANGE_DELTAS = [1e-10, 1e-8, 1e-6, 1e-4]
# analyses/management/commands/seed_demo.py's default fleet, its cohorts split by locale.
DEMO_FLEET = 100_000
COLD_REPEATS = 5
# The budget for one uncached call.
BUDGET = 0.050
WARM_CALLS = 10_000


def families() -> list[tuple[str, list[str]]]:
    """(bound, its mechanisms) in BOUNDS order: one row per bound, timed on its first mechanism."""
    grouped: dict[str, list[str]] = {}
    for name, (method, _) in BOUNDS.items():
        grouped.setdefault(method, []).append(name)
    return list(grouped.items())


def cold(mechanism: str, epsilon0: float, epsilon: float, delta: float) -> tuple[float, float, int]:
    """Median and worst seconds of uncached calls (the memo cleared before each), and the cohort."""
    times = []
    for _ in range(COLD_REPEATS):
        enforced_cohort._min_cohort.cache_clear()
        start = time.perf_counter()
        cohort = min_cohort_enforced(mechanism=mechanism, epsilon0=epsilon0, epsilon=epsilon, delta=delta).min_cohort
        times.append(time.perf_counter() - start)
    return statistics.median(times), max(times), cohort


def warm(mechanism: str, epsilon0: float, epsilon: float, delta: float) -> float:
    """Mean seconds of a memoized call."""
    min_cohort_enforced(mechanism=mechanism, epsilon0=epsilon0, epsilon=epsilon, delta=delta)
    start = time.perf_counter()
    for _ in range(WARM_CALLS):
        min_cohort_enforced(mechanism=mechanism, epsilon0=epsilon0, epsilon=epsilon, delta=delta)
    return (time.perf_counter() - start) / WARM_CALLS


def fleet_rows() -> list[str]:
    """Per recipe, epsilon0 and bound: the smallest fleet that answers at sampling rate 1 (one batch:
    the minimum cohort itself; split by locale: every locale's expected cohort at least m, so
    m / the smallest locale share) and the demo fleet's locale cohorts expected at least m."""
    smallest_share = float(LOCALE_WEIGHTS.min())
    rows = []
    for (recipe, epsilon, delta), epsilon0, (method, mechanisms) in itertools.product(RECIPES, EPSILONS0, families()):
        before = min_cohort_closed_form(epsilon0, epsilon, delta)
        after = min_cohort_enforced(mechanism=mechanisms[0], epsilon0=epsilon0, epsilon=epsilon, delta=delta).min_cohort

        def released(m: int) -> str:
            names = [name for name, share in zip(LOCALES, LOCALE_WEIGHTS, strict=True) if DEMO_FLEET * share >= m]
            return f"{len(names)} of {len(LOCALES)}" + (
                f" ({', '.join(names)})" if 0 < len(names) < len(LOCALES) else ""
            )

        rows.append(
            f"| {recipe} | {epsilon0:g} | {method} | {before:,} → {after:,} | "
            f"{math.ceil(before / smallest_share):,} → {math.ceil(after / smallest_share):,} | "
            f"{released(before)} → {released(after)} |"
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "min_cohort.md")
    parser.add_argument(
        "--fleets-only",
        action="store_true",
        help="rewrite only the fleet section of --out (deterministic: no timing, so no quiet machine needed)",
    )
    arguments = parser.parse_args()
    out = arguments.out
    if arguments.fleets_only:
        text = out.read_text()
        kept = text.split(FLEETS_HEADING)[0].rstrip("\n")
        out.write_text(kept + "\n\n" + "\n".join(fleet_section()))
        print(out.read_text())
        return
    load_before = " ".join(f"{x:.2f}" for x in os.getloadavg())

    start = time.perf_counter()
    min_cohort_enforced(mechanism="asymmetric_ohe", epsilon0=2.0, epsilon=0.3, delta=1e-6)
    first_call = time.perf_counter() - start

    rows = []
    for (recipe, epsilon, delta), epsilon0, (method, mechanisms) in itertools.product(RECIPES, EPSILONS0, families()):
        closed = min_cohort_closed_form(epsilon0, epsilon, delta)
        median, worst, enforced = cold(mechanisms[0], epsilon0, epsilon, delta)
        rows.append(
            f"| {recipe} | {epsilon0:g} | {epsilon:g} | {', '.join(mechanisms)} | {method} | {closed:,} | {enforced:,} | "
            f"{closed / enforced:.1f} | {median * 1e3:.1f} | {worst * 1e3:.1f} | "
            f"{warm(mechanisms[0], epsilon0, epsilon, delta) * 1e6:.2f} |"
        )

    sweep = []
    for method, mechanisms in families():
        timings = []
        for point in itertools.product(RANGE_EPSILONS0, RANGE_EPSILONS, RANGE_DELTAS):
            median, worst, _ = cold(mechanisms[0], *point)
            timings.append((worst, median, point))
        medians = sorted(median for _, median, _ in timings)
        slowest = max(timings)
        over = sum(worst > BUDGET for worst, _, _ in timings)
        sweep.append(
            f"| {method} | {len(timings)} | {statistics.median(medians) * 1e3:.1f} | "
            f"{medians[int(0.9 * len(medians))] * 1e3:.1f} | {medians[-1] * 1e3:.1f} | {slowest[0] * 1e3:.1f} | "
            f"eps0={slowest[2][0]:g}, eps={slowest[2][1]:g}, delta={slowest[2][2]:g} | {over} |"
        )

    date = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    lines = [
        "# Minimum cohort (check 3): closed form against the enforced bound",
        "",
        f"Machine: {describe(tasks='one process', database='no database')}, scipy {scipy.__version__}. "
        f"Date: {date}. Command: `.venv/bin/python bench/min_cohort.py`. "
        f"Load average before: {load_before}; after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}.",
        "",
        "Closed form: seed 000 Theorem 3.1 (`privacy.amplification.min_cohort_closed_form`, enforced by devices "
        "today). Enforced: `privacy.enforced_cohort.min_cohort_enforced`, the FMT 2022 numerical bound for the "
        "mechanisms its errata covers, FMT 2022 per coordinate composed exactly for symmetric RAPPOR "
        "(`privacy.rappor_shuffling`), and the FMT 2020 one for Hadamard response (on a domain of at most 3 values, "
        "when the caller passes `domain_size`, Hadamard response gets the FMT 2022 row; the module docstring says "
        "why). epsilon0 is the replacement-model epsilon0 the device charges (symmetric RAPPOR: twice its own, so "
        "its row at epsilon0 4 is deletion epsilon0 2). "
        f"Cold: the memo cleared before each call, median and worst of {COLD_REPEATS}; warm: the mean of "
        f"{WARM_CALLS:,} memoized calls. The first call of the process took {first_call * 1e3:.1f} ms.",
        "",
        "| recipe | epsilon0 | epsilon | mechanisms | enforced bound | closed form m | enforced m | ratio "
        "| cold median (ms) | cold worst (ms) | warm (us) |",
        "|---|---:|---:|---|---|---:|---:|---:|---:|---:|---:|",
        *rows,
        "",
        f"Cold cost over the demo range: epsilon0 in {RANGE_EPSILONS0}, epsilon in {RANGE_EPSILONS}, "
        f"delta in {RANGE_DELTAS}; the per-point median of {COLD_REPEATS} uncached calls, summarized, and the "
        "slowest single call.",
        "",
        "| bound | points | median (ms) | 90th percentile (ms) | largest median (ms) | slowest call (ms) "
        f"| slowest point | points with a call over {BUDGET * 1e3:.0f} ms |",
        "|---|---:|---:|---:|---:|---:|---|---:|",
        *sweep,
        "",
        *fleet_section(),
    ]
    out.write_text("\n".join(lines))
    print(out.read_text())


FLEETS_HEADING = "## What it means for fleets"


def fleet_section() -> list[str]:
    """The fleet table, with its own heading: deterministic figures, no timing."""
    return [
        FLEETS_HEADING,
        "",
        "Smallest fleet that can answer, at sampling rate 1 (before: the closed form devices enforced; after: "
        "the enforced bound): one batch needs the minimum cohort m itself; a recipe split by locale needs every "
        f"locale's expected cohort to reach m, so m / {float(LOCALE_WEIGHTS.min()):g} (the smallest locale share of "
        f"`devices.synthetic`, {', '.join(f'{n} {w:g}' for n, w in zip(LOCALES, LOCALE_WEIGHTS, strict=True))}). "
        f"Last column: the locale cohorts of the {DEMO_FLEET:,}-device demo fleet (`manage.py seed_demo`) "
        "expected at or above m, i.e. released rather than suppressed. These figures are deterministic (no "
        "timing): `--fleets-only` rewrites this section alone.",
        "",
        "| recipe | epsilon0 | enforced bound | smallest fleet, one batch | smallest fleet, split by locale "
        f"| locale cohorts released on {DEMO_FLEET:,} devices |",
        "|---|---:|---|---:|---:|---|",
        *fleet_rows(),
        "",
    ]


if __name__ == "__main__":
    main()
