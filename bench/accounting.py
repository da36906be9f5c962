"""Time the privacy accounting library; prints a markdown table (redirect it to bench/results/accounting.md).

    .venv/bin/python bench/accounting.py > bench/results/accounting.md

Each row is the median (and worst) wall time of repeated calls, after one warm-up call.
"""

from __future__ import annotations

import datetime
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402
import scipy  # noqa: E402

from privacy.gaussian import analytic_gaussian_sigma, sample_discrete_gaussian  # noqa: E402
from privacy.rappor_rdp import symmetric_rappor_epsilon  # noqa: E402
from privacy.shuffling import METHODS, amplified_epsilon, min_cohort  # noqa: E402

REPEATS = 7


def timed(call: Callable[[], object]) -> tuple[float, float, object]:
    result = call()  # warm-up, and the value shown
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times), max(times), result


def machine() -> list[str]:
    model = next(
        (
            line.split(":", 1)[1].strip()
            for line in subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout.splitlines()
            if line.startswith("Model name")
        ),
        platform.processor() or "unknown",
    )
    return [
        f"- date: {datetime.datetime.now(datetime.UTC).isoformat(timespec='seconds')}",
        f"- nproc: {os.cpu_count()} ({model})",
        f"- Python {platform.python_version()}, numpy {np.__version__}, scipy {scipy.__version__}",
        f"- {REPEATS} timed calls after one warm-up; median and worst wall time",
    ]


def main() -> None:
    rows: list[tuple[str, str, float, float, str]] = []
    for epsilon0, epsilon, delta in [(3.0, 1.0, 1e-6), (4.0, 0.61, 1e-10), (1.0, 0.1, 1e-8), (8.0, 0.01, 1e-10)]:
        for method in METHODS:
            median, worst, n = timed(partial(min_cohort, epsilon0, epsilon, delta, method=method))
            rows.append(
                (
                    "min_cohort",
                    f"eps0={epsilon0}, eps={epsilon}, delta={delta:g}, {method}",
                    median,
                    worst,
                    f"n = {n:,}",
                )
            )
    for epsilon0, n, delta in [(4.0, 10_000, 1e-10), (4.0, 100_000, 1e-6), (2.0, 10**9, 1e-10)]:
        for method in METHODS:
            median, worst, value = timed(partial(amplified_epsilon, epsilon0, n, delta, method=method))
            rows.append(
                (
                    "amplified_epsilon",
                    f"eps0={epsilon0}, n={n:,}, delta={delta:g}, {method}",
                    median,
                    worst,
                    f"eps = {value:.6f}",
                )
            )
    for epsilon, delta, sensitivity in [(0.317, 1e-9, math.sqrt(2)), (1.0, 1e-8, 1.0), (0.01, 1e-12, 1.0)]:
        median, worst, sigma = timed(partial(analytic_gaussian_sigma, epsilon, delta, sensitivity))
        rows.append(
            (
                "analytic_gaussian_sigma",
                f"eps={epsilon}, delta={delta:g}, sensitivity={sensitivity:.4g}",
                median,
                worst,
                f"sigma = {sigma:.6f}",
            )
        )
    median, worst, value = timed(lambda: symmetric_rappor_epsilon(7.0, 100_000, 1e-9))
    rows.append(("symmetric_rappor_epsilon", "eps0=7, n=100,000, delta=1e-9", median, worst, f"eps = {value:.6f}"))
    rng = np.random.default_rng(0)
    for sigma2 in (0.5, 100.0, 1e8):
        median, worst, _ = timed(partial(sample_discrete_gaussian, sigma2, 10_000, rng))
        rows.append(
            (
                "sample_discrete_gaussian",
                f"sigma2={sigma2:g}, size=10,000",
                median,
                worst,
                f"{median / 10_000 * 1e6:.1f} us/sample",
            )
        )

    print("# Privacy accounting timings\n")
    print("\n".join(machine()))
    print("\n| function | parameters | median (ms) | worst (ms) | result |")
    print("|---|---|---:|---:|---|")
    for name, parameters, median, worst, result in rows:
        print(f"| {name} | {parameters} | {median * 1e3:.2f} | {worst * 1e3:.2f} | {result} |")


if __name__ == "__main__":
    main()
