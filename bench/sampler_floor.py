"""Benchmark: the unary sampler beside its randomness floor and beside the per-bit sampler it replaced.

One privatization of n devices over k buckets with asymmetric OHE (epsilon0 = 4, every device its
own coins, the exact-sum shortcut off), timed three ways in one process:

- ``privatize_sum``: what a fleet shard runs (``privacy.randomizer_support.unary_report_sum``);
- the floor: only the variates that sampler needs, drawn in the same blocks and thrown away, the
  Geometric(p0) gaps between the ones and one uniform per device for its own bit. No exact
  per-device sampler can draw fewer: every one of a device's ones must be drawn;
- the per-bit sampler the product used before (one uniform per device and bucket, a block of
  devices at a time), for reference.

    .venv/bin/python bench/sampler_floor.py                     # writes bench/results/sampler_floor.md
    .venv/bin/python bench/sampler_floor.py --devices 100000 --out /tmp/floor.md   # a quick check
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from privacy import randomizer_support  # noqa: E402
from privacy.mechanisms import AsymmetricOHE  # noqa: E402

EPSILON0 = 4.0
REPEATS = 5


def floor_draws(values: np.ndarray, k: int, p_other: float, rng: np.random.Generator) -> None:
    """The variates the sparse sampler draws, in its blocks, and nothing else."""
    block = randomizer_support.unary_devices_per_block(k, p_other)
    for start in range(0, values.size, block):
        devices = values[start : start + block].size
        mean = devices * (k - 1) * p_other
        rng.geometric(p_other, size=int(mean + 6 * math.sqrt(mean) + 16))
        rng.random(devices)


def per_bit_sum(values: np.ndarray, k: int, p_own: float, p_other: float, rng: np.random.Generator) -> None:
    """The former sampler: a uniform per device and bucket, 2^22 coins a block."""
    block = max(1, (1 << 22) // k)
    total = np.zeros(k, dtype=np.int64)
    for start in range(0, values.size, block):
        chunk = values[start : start + block]
        bits = rng.random((chunk.size, k)) < p_other
        bits[np.arange(chunk.size), chunk] = rng.random(chunk.size) < p_own
        total += bits.sum(axis=0, dtype=np.int64)


def median_seconds(run: Callable[[], None], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--devices", type=int, default=1_000_000)
    parser.add_argument("--buckets", type=int, default=1_024)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "sampler_floor.md")
    args = parser.parse_args()
    randomizer_support.EXACT_SUM_ABOVE = sys.maxsize  # per-device coins, however many
    n, k = args.devices, args.buckets
    mechanism = AsymmetricOHE(EPSILON0)
    values = np.random.default_rng(1).integers(0, k, size=n)
    rng = np.random.default_rng(2)
    load_before = " ".join(f"{x:.2f}" for x in os.getloadavg())
    rows = [
        ("`AsymmetricOHE.privatize_sum` (the sparse sampler)", lambda: mechanism.privatize_sum(values, k, rng)),
        ("floor: its Geometric gaps and own-bit uniforms only", lambda: floor_draws(values, k, mechanism.p_other, rng)),
        (
            "the former per-bit sampler (n × k uniforms)",
            lambda: per_bit_sum(values, k, mechanism.p_own, mechanism.p_other, rng),
        ),
    ]
    results = [(label, median_seconds(run, REPEATS)) for label, run in rows]
    load_after = " ".join(f"{x:.2f}" for x in os.getloadavg())
    from host import describe  # bench/host.py: this script's folder is on sys.path

    floor = results[1][1]
    variates = n * (1 + (k - 1) * mechanism.p_other)
    lines = [
        "# The unary sampler beside its randomness floor",
        "",
        f"Machine: {describe(tasks='one process', database='no database')}. Date: {time.strftime('%Y-%m-%d')}.",
        f"Load average (1, 5, 15 min) before the run: {load_before}; after: {load_after}."
        + (" **Measured while other work shared the two cores.**" if float(load_before.split()[0]) > 0.5 else ""),
        "",
        "Reproduce:",
        "",
        "```",
        f".venv/bin/python bench/sampler_floor.py {' '.join(sys.argv[1:])}".strip(),
        "```",
        "",
        f"Asymmetric OHE, epsilon0 = {EPSILON0:g}, n = {n:,} devices, k = {k:,} buckets, uniform values, every "
        f"device its own coins. A device's report holds about 1 + (k − 1) p0 = {variates / n:.1f} ones "
        f"({variates:,.0f} variates for the fleet). Median of {REPEATS} runs.",
        "",
        "| sampler | seconds | reports/s | ÷ floor |",
        "|---|---:|---:|---:|",
    ]
    lines += [f"| {label} | {seconds:.3f} | {n / seconds:,.0f} | {seconds / floor:.2f} |" for label, seconds in results]
    lines.append("")
    text = "\n".join(lines)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
