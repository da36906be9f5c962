"""Benchmark: our asymmetric OHE against pure-ldp's optimised unary encoding (OUE), issue 3.

Same workload for both: n devices whose values come from one seeded Zipf-like distribution over
k = 1,024 buckets, epsilon0 = 4, every device privatizing with its own coins. Measures
reports/second (privatize + aggregate + debias, end to end) and the mean squared error of the
estimated per-bucket counts over R seeded repetitions on identical data, next to the theoretical
variance from ``AsymmetricOHE.variance``. Writes bench/results/ldp_compare.md.

pure-ldp is a bench-only dependency and lives in its own virtualenv, never in .venv:

    python3 -m venv .venv-bench
    .venv-bench/bin/pip install -r bench/requirements-peers.txt
    .venv-bench/bin/python bench/ldp_compare.py            # the full table (a few minutes)
    .venv-bench/bin/python bench/ldp_compare.py --quick    # smoke run, prints only

Our ``privacy`` package is imported from the repo root (pure numpy, no Django).

pure-ldp's UEClient privatizes one user per Python call and draws its coins from the global
``numpy.random`` and ``random`` states (it takes no Generator), so it is seeded with
``np.random.seed`` and ``random.seed``; ours draws from a ``numpy.random.Generator``.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import random
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import privacy.randomizer_support  # noqa: E402
from privacy.mechanisms import AsymmetricOHE  # noqa: E402

# This bench compares per-device coins with pure-ldp's per-device clients: never draw the sum from
# its exact distribution here, however large the fleet.
privacy.randomizer_support.EXACT_SUM_ABOVE = sys.maxsize

K = 1_024
EPSILON0 = 4.0
ZIPF_S = 1.1
DATA_SEED = 20_240_303
TIMING_NS = [10_000, 100_000, 1_000_000]
TIMING_REPEATS = {10_000: 3, 100_000: 3, 1_000_000: 1}  # same for both implementations
PEER_MAX_SECONDS = 180.0  # run pure-ldp at a size only if its measured rate says it fits in this
MSE_N = 100_000
MSE_REPS = 20


def zipf_values(n: int, k: int, seed: int) -> np.ndarray:
    """n bucket indices in [0, k) with P(bucket i) proportional to 1/(i + 1)^ZIPF_S."""
    weights = 1.0 / np.arange(1, k + 1, dtype=np.float64) ** ZIPF_S
    rng = np.random.default_rng(seed)
    return rng.choice(k, size=n, p=weights / weights.sum()).astype(np.int64)


# --- the two implementations, each: values, seed -> estimated counts (k,) -------------------------


def ours_estimate(values: np.ndarray, seed: int) -> np.ndarray:
    mech = AsymmetricOHE(EPSILON0)
    rng = np.random.default_rng(seed)
    report_sum = mech.privatize_sum(values, K, rng)
    return mech.debias(report_sum, values.size, K)


def peer_classes():
    from pure_ldp.frequency_oracles import UEClient, UEServer

    return UEClient, UEServer


def peer_estimate(values: np.ndarray, seed: int) -> np.ndarray:
    UEClient, UEServer = peer_classes()
    np.random.seed(seed % 2**32)
    random.seed(seed)
    identity = lambda x: x  # noqa: E731  (our values are already indices in [0, k))
    client = UEClient(EPSILON0, K, use_oue=True, index_mapper=identity)
    server = UEServer(EPSILON0, K, use_oue=True, index_mapper=identity)
    privatise, aggregate = client.privatise, server.aggregate
    for v in values.tolist():  # one device per call, as the package is meant to be used
        aggregate(privatise(v))
    return np.asarray(server.estimate_all(range(K), suppress_warnings=True), dtype=np.float64)


IMPLEMENTATIONS = {"ours (AsymmetricOHE)": ours_estimate, "pure-ldp (UE, use_oue=True)": peer_estimate}


def check_peer_parameters() -> dict:
    """The probabilities pure-ldp's OUE uses, next to ours, at epsilon0."""
    UEClient, UEServer = peer_classes()
    client = UEClient(EPSILON0, K, use_oue=True)
    server = UEServer(EPSILON0, K, use_oue=True)
    mech = AsymmetricOHE(EPSILON0)
    out = {
        "ours_p_own": mech.p_own,
        "ours_p_other": mech.p_other,
        "peer_client_p": client.p,
        "peer_client_q": client.q,
        "peer_server_p": server.p,
        "peer_server_q": server.q,
    }
    assert math.isclose(client.p, mech.p_own) and math.isclose(server.p, mech.p_own), out
    assert math.isclose(client.q, mech.p_other) and math.isclose(server.q, mech.p_other), out
    return out


# --- measurements ---------------------------------------------------------------------------------


def time_run(fn, values: np.ndarray, seed: int) -> float:
    start = time.perf_counter()
    fn(values, seed)
    return time.perf_counter() - start


def timing(all_values: np.ndarray, ns: list[int], repeats: dict[int, int], peer_max_seconds: float) -> list[dict]:
    rows = []
    peer_rate = None  # reports/s measured at the largest n run so far
    for n in ns:
        values = all_values[:n]
        for name, fn in IMPLEMENTATIONS.items():
            reps = repeats.get(n, 1)
            if fn is peer_estimate and peer_rate is not None and n / peer_rate > peer_max_seconds:
                rows.append({"impl": name, "n": n, "runs": 0, "seconds": None, "skipped": n / peer_rate})
                print(f"{name:>28} n={n:>9,}: not run (measured rate says ~{n / peer_rate:.0f} s)", flush=True)
                continue
            secs = [time_run(fn, values, seed=1_000 + i) for i in range(reps)]
            med = statistics.median(secs)
            if fn is peer_estimate:
                peer_rate = n / med
            rows.append({"impl": name, "n": n, "runs": reps, "seconds": med, "all": secs})
            print(f"{name:>28} n={n:>9,}: {med:8.3f} s  {n / med:>12,.0f} reports/s  runs={secs}", flush=True)
    return rows


def mse(values: np.ndarray, reps: int) -> tuple[list[dict], float]:
    true_counts = np.bincount(values, minlength=K).astype(np.float64)
    n = values.size
    theory = float(AsymmetricOHE(EPSILON0).variance(true_counts, n, K).mean())
    rows = []
    for name, fn in IMPLEMENTATIONS.items():
        per_rep_mse, per_rep_bias = [], []
        start = time.perf_counter()
        for r in range(reps):
            err = fn(values, seed=50_000 + r) - true_counts
            per_rep_mse.append(float(np.mean(err**2)))
            per_rep_bias.append(float(np.mean(err)))
        elapsed = time.perf_counter() - start
        m = statistics.fmean(per_rep_mse)
        se = statistics.stdev(per_rep_mse) / math.sqrt(reps) if reps > 1 else float("nan")
        row = {
            "impl": name,
            "mse": m,
            "se": se,
            "ratio": m / theory,
            "bias": statistics.fmean(per_rep_bias),
            "seconds": elapsed,
        }
        rows.append(row)
        print(f"{name:>28} MSE={m:,.1f} ± {se:,.1f}  (theory {theory:,.1f}, ratio {m / theory:.3f})", flush=True)
    return rows, theory


def machine() -> dict:
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor() or "unknown",
    )
    from importlib.metadata import version

    return {
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "pure_ldp": version("pure-ldp"),
        "date": time.strftime("%Y-%m-%d"),
        "load": " ".join(f"{x:.2f}" for x in os.getloadavg()),
    }


def render(
    mach: dict, params: dict, trows: list[dict], mrows: list[dict], theory: float, mse_n: int, reps: int, wall: float
) -> str:
    e = math.exp(EPSILON0)
    lines = [
        "# Local randomizer: ours vs pure-ldp (issue 3)",
        "",
        f"Machine: {mach['nproc']} cores ({mach['cpu']}), Python {mach['python']}, numpy {mach['numpy']}, "
        f"pure-ldp {mach['pure_ldp']}. Date: {mach['date']}. Load average at the end of the run: {mach['load']} "
        "(the cores were shared with other work).",
        "",
        "Reproduce (peers live in their own virtualenv, never in `.venv`):",
        "",
        "```",
        "python3 -m venv .venv-bench",
        ".venv-bench/bin/pip install -r bench/requirements-peers.txt",
        ".venv-bench/bin/python bench/ldp_compare.py",
        "```",
        "",
        f"Workload: k = {K:,} buckets, epsilon0 = {EPSILON0:g}, values drawn once from a Zipf-like distribution "
        f"(P(bucket i) ∝ 1/(i+1)^{ZIPF_S}, seed {DATA_SEED}); the first n of them are the fleet of size n. "
        "Both implementations get the same values and the same epsilon0; every device privatizes with its own coins.",
        "",
        "## How the two randomizers relate",
        "",
        "They are the same randomizer with the same estimator. pure-ldp's `UEClient(..., use_oue=True)` "
        "(`frequency_oracles/unary_encoding/ue_client.py`) sets p = 0.5 and q = 1/(e^ε + 1); `_perturb` draws "
        "each coordinate as 1 with probability q and then redraws the device's own coordinate as 1 with probability p. "
        "`UEServer` estimates (S_d − n q)/(p − q). Our `AsymmetricOHE` reports the own bit ~ Bernoulli(1/2) and every other bit "
        "~ Bernoulli(1/(e^ε0 + 1)) and debiases with (S_d − n p0)/(1/2 − p0). "
        f"At ε0 = {EPSILON0:g} the script checks: ours p_own = {params['ours_p_own']}, p_other = {params['ours_p_other']:.12f}; "
        f"pure-ldp p = {params['peer_client_p']}, q = {params['peer_client_q']:.12f} (client and server). "
        "The differences are in the implementation only: pure-ldp privatizes one device per Python call "
        "(`np.random.choice` over k coordinates plus `random.random()`) from the global `numpy.random`/`random` state, "
        "and aggregates one report per call; ours draws the coins of a block of devices at once from a "
        "`numpy.random.Generator` and sums them (`privatize_sum`).",
        "",
        "## Throughput: reports/second",
        "",
        "End to end: privatize every device, aggregate, debias all k buckets. Ours: `privatize_sum` + `debias`. "
        "pure-ldp: `UEClient.privatise` + `UEServer.aggregate` per device, then `estimate_all` over the domain. "
        "Median of the runs shown (the same number of runs for both at each n).",
        "",
        "| implementation | n | runs | seconds (median) | reports/s |",
        "|---|---:|---:|---:|---:|",
    ]
    for r in trows:
        if r["seconds"] is None:
            lines.append(
                f"| {r['impl']} | {r['n']:,} | 0 | not run: the rate measured at the smaller n puts it at ~{r['skipped']:.0f} s, over the {PEER_MAX_SECONDS:.0f} s limit | — |"
            )
        else:
            lines.append(
                f"| {r['impl']} | {r['n']:,} | {r['runs']} | {r['seconds']:.3f} | {r['n'] / r['seconds']:,.0f} |"
            )
    speed = {}
    for r in trows:
        if r["seconds"] is not None:
            speed.setdefault(r["n"], {})[r["impl"]] = r["n"] / r["seconds"]
    names = list(IMPLEMENTATIONS)
    ratios = [f"{s[names[0]] / s[names[1]]:.1f}× at n = {n:,}" for n, s in speed.items() if len(s) == 2]
    if ratios:
        lines += ["", "Ours over pure-ldp: " + ", ".join(ratios) + "."]
    lines += [
        "",
        "## Accuracy: mean squared error of the estimated counts",
        "",
        f"n = {mse_n:,}, R = {reps} repetitions with coin seeds 50000…{50_000 + reps - 1} on the same values. "
        "MSE = mean over repetitions and over the k buckets of (estimated count − true count)²; ± is the standard "
        "error over the repetitions. Theory: the mean over buckets of `AsymmetricOHE.variance` at the true counts, "
        f"n·4e^ε0/(e^ε0 − 1)² + f(d), = {theory:,.1f} here (the estimator is unbiased, so MSE = variance). "
        "Mean error is the signed error averaged over buckets and repetitions (should be ≈ 0).",
        "",
        "| implementation | MSE per bucket | ± s.e. | theory | MSE / theory | mean error | seconds for R runs |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in mrows:
        lines.append(
            f"| {r['impl']} | {r['mse']:,.1f} | {r['se']:,.1f} | {theory:,.1f} | {r['ratio']:.3f} | {r['bias']:+.2f} | {r['seconds']:.1f} |"
        )
    lines += [
        "",
        f"Per-device variance factor 4e^ε0/(e^ε0 − 1)² = {4 * e / (e - 1) ** 2:.6f} at ε0 = {EPSILON0:g}. "
        f"Whole script: {wall:.0f} s wall.",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="tiny sizes, print only, write nothing")
    args = parser.parse_args()
    wall = time.perf_counter()
    params = check_peer_parameters()
    print("OUE parameters:", params, flush=True)
    if args.quick:
        ns, repeats, mse_n, reps = [2_000, 5_000], {}, 5_000, 3
    else:
        ns, repeats, mse_n, reps = TIMING_NS, TIMING_REPEATS, MSE_N, MSE_REPS
    all_values = zipf_values(max(max(ns), mse_n), K, DATA_SEED)
    trows = timing(all_values, ns, repeats, PEER_MAX_SECONDS)
    mrows, theory = mse(all_values[:mse_n], reps)
    wall = time.perf_counter() - wall
    text = render(machine(), params, trows, mrows, theory, mse_n, reps, wall)
    if args.quick:
        print(text)
        return
    out = ROOT / "bench" / "results" / "ldp_compare.md"
    out.parent.mkdir(exist_ok=True)
    out.write_text(text)
    print(f"wrote {out.relative_to(ROOT)} ({wall:.0f} s)")


if __name__ == "__main__":
    main()
