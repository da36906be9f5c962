"""The PLD accountant against the others and against dp-accounting; writes bench/results/pld.md.

    .venv/bin/python bench/pld.py

Per case of tests/vectors/pld/dp_accounting.json (written by bench/pld_oracle.py under .venv-oracle):
epsilon at delta of the release composed `count` times by advanced composition (per-step epsilon
at delta / (2 count) from the step's own PLD, delta' = delta / 2), Renyi DP (privacy.composition's
curves: the Gaussian curve for both Gaussians, pure_dp_rdp for the Laplace and the shuffled pair,
which has no other curve here), our PLD (privacy.pld at its default interval) and dp-accounting's
optimistic and pessimistic PLD estimates (interval 1e-5). Then the time to build and compose.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import scipy  # noqa: E402

from bench.host import describe  # noqa: E402
from privacy import pld  # noqa: E402
from privacy.composition import (  # noqa: E402
    DEFAULT_ORDERS,
    ApproximateDP,
    RenyiDP,
    advanced_composition,
    gaussian_rdp,
    pure_dp_rdp,
    rdp_epsilon,
)
from privacy.shuffling import amplified_epsilon  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
VECTORS = ROOT / "tests" / "vectors" / "pld" / "dp_accounting.json"
OUTPUT = ROOT / "bench" / "results" / "pld.md"
REPEATS = 5


def build(case: dict) -> pld.PrivacyLossDistribution:
    kind, parameters = case["kind"], case["parameters"]
    if kind == "discrete_gaussian":
        return pld.discrete_gaussian(parameters["sigma"], parameters["sensitivity"])
    if kind == "discrete_laplace":
        return pld.discrete_laplace(parameters["scale"], parameters["sensitivity"])
    if kind == "gaussian":
        return pld.gaussian(parameters["sigma"], parameters["sensitivity"])
    return pld.shuffled(parameters["epsilon0"], parameters["n"], parameters["method"])


def renyi(case: dict, step: pld.PrivacyLossDistribution) -> float:
    kind, parameters, count = case["kind"], case["parameters"], case["count"]
    if kind in ("discrete_gaussian", "gaussian"):
        curve = gaussian_rdp(parameters["sigma"], parameters["sensitivity"], DEFAULT_ORDERS)
    elif kind == "discrete_laplace":
        curve = pure_dp_rdp(parameters["sensitivity"] / parameters["scale"], DEFAULT_ORDERS)
    else:
        curve = pure_dp_rdp(parameters["epsilon0"], DEFAULT_ORDERS)
    return rdp_epsilon(RenyiDP(DEFAULT_ORDERS, tuple(count * rho for rho in curve.rhos)), case["delta"])


def advanced(case: dict, step: pld.PrivacyLossDistribution) -> float:
    count, delta = case["count"], case["delta"]
    per_step = step.epsilon(delta / (2 * count))
    return advanced_composition(ApproximateDP(per_step, delta / (2 * count)), count, delta / 2).epsilon


def main() -> None:
    oracle = json.loads(VECTORS.read_text())
    load_before = " ".join(f"{value:.2f}" for value in os.getloadavg())
    rows = []
    for case in oracle["cases"]:
        times = []
        for _ in range(REPEATS):
            start = time.perf_counter()
            step = build(case)
            ours = step.self_compose(case["count"]).epsilon(case["delta"])
            times.append(time.perf_counter() - start)
        rows.append(
            f"| {case['name']} | {case['count']:,} | {case['delta']:g} | {advanced(case, step):.4f} | "
            f"{renyi(case, step):.4f} | **{ours:.4f}** | {case['optimistic']:.4f} | {case['pessimistic']:.4f} | "
            f"{ours / case['pessimistic'] - 1:+.2%} | {statistics.median(times) * 1e3:.0f} | "
            f"{case['oracle_seconds']:.1f} |"
        )
        print(rows[-1], file=sys.stderr)
    shuffled_rows = []
    for epsilon0, n in [(2.0, 10_000), (2.0, 1_000_000), (4.0, 1_000_000), (0.5, 10**7), (2.0, 10**8)]:
        times = []
        for _ in range(REPEATS):
            start = time.perf_counter()
            one = pld.shuffled(epsilon0, n)
            times.append(time.perf_counter() - start)
        reference = amplified_epsilon(epsilon0, n, 1e-8)
        shuffled_rows.append(
            f"| {epsilon0:g} | {n:,} | {one.probs.size:,} | {statistics.median(times) * 1e3:.0f} | "
            f"{one.epsilon(1e-8):.6f} | {reference:.6f} |"
        )
        print(shuffled_rows[-1], file=sys.stderr)
    load_after = " ".join(f"{value:.2f}" for value in os.getloadavg())
    lines = [
        "# Privacy loss distributions: composed epsilon by accountant",
        "",
        f"Machine: {describe(tasks='one process', database='no database')}, scipy {scipy.__version__}. "
        f"Date: {time.strftime('%Y-%m-%d')}. Command: `.venv/bin/python bench/pld.py`. "
        f"Load average before: {load_before}; after: {load_after} (two cores shared with other work).",
        "",
        "Each release composed `count` times, epsilon at `delta`. Advanced: DRV10 with each step's epsilon at "
        "delta / (2 count) from its own PLD and delta' = delta / 2. Renyi: `privacy.composition`'s curves over "
        "DEFAULT_ORDERS (the Gaussian curve for both Gaussians, CKS20 Theorem 14 for the discrete one; the pure "
        "curve for the Laplace and for the shuffled pair, whose amplification has no Renyi curve here). Ours: "
        f"`privacy.pld` at interval {pld.DEFAULT_INTERVAL:g} (at most count x interval above exact). "
        f"dp-accounting {oracle['dp_accounting']} at interval {oracle['value_discretization_interval']:g}: "
        "optimistic (below exact) and pessimistic (above exact) estimates, frozen in "
        "`tests/vectors/pld/dp_accounting.json` by `bench/pld_oracle.py`. Time: median of "
        f"{REPEATS} runs of building the step's PLD, composing and reading epsilon (ours); one run of both "
        "estimates (dp-accounting, its own virtualenv, numpy 1.26).",
        "",
        "| case | count | delta | advanced | Renyi | PLD (ours) | dp-acc. optimistic | dp-acc. pessimistic "
        "| ours vs pessimistic | ours (ms) | dp-acc. (s) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        *rows,
        "",
        "One PLD of n shuffled eps0-DP reports (`pld.shuffled`, stronger-2022, interval 1e-4): median time of "
        f"{REPEATS} builds, grid points, and its epsilon at delta = 1e-8 against `privacy.shuffling.amplified_epsilon` "
        "(the same quantity bounded directly; ours at most one interval plus the block coarsening above).",
        "",
        "| eps0 | n | points | build (ms) | PLD epsilon | amplified_epsilon |",
        "|---:|---:|---:|---:|---:|---:|",
        *shuffled_rows,
        "",
    ]
    OUTPUT.write_text("\n".join(lines))


if __name__ == "__main__":
    main()
