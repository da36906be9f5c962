"""Benchmark: our local randomizers beside two peer libraries, pure-ldp and multi-freq-ldpy.

Frequency estimation for one attribute, like with like:

- OUE: our ``AsymmetricOHE`` ↔ pure-ldp's ``UEClient/UEServer(use_oue=True)`` ↔ multi-freq-ldpy's
  ``UE_Client(optimal=True)`` with its ``MI`` estimator.
- GRR (k-ary randomized response, direct encoding): our ``KaryRandomizedResponse`` ↔ pure-ldp's
  ``DEClient/DEServer`` ↔ multi-freq-ldpy's ``GRR_Client`` + ``GRR_Aggregator_MI``.

Same workload for all: n devices whose values come from one seeded Zipf-like distribution over k
buckets (k = 64 and 1,024), epsilon0 = 4, every device privatizing with its own coins. Measures
reports/second (privatize + aggregate + estimate, end to end) at n = 10^5 and 10^6, and the mean
squared error of the estimated per-bucket counts against the true counts over R seeded
repetitions at n = 10^5, next to the theoretical variance. Writes bench/results/ldp_compare.md.

The peers are bench-only dependencies and live in their own virtualenv, never in .venv:

    python3 -m venv .venv-bench
    .venv-bench/bin/pip install -r bench/requirements-peers.txt
    .venv-bench/bin/python bench/ldp_compare.py            # the full table (about ten minutes)
    .venv-bench/bin/python bench/ldp_compare.py --quick    # smoke run, prints only

Our ``privacy`` package is imported from the repo root (pure numpy, no Django).

Seeds: ours draws from a ``numpy.random.Generator``; pure-ldp from the global ``numpy.random`` and
``random`` states (seeded with ``np.random.seed`` and ``random.seed``); multi-freq-ldpy's clients
are numba-compiled and draw from numba's own generator, which only a compiled ``np.random.seed``
call seeds (``_numba_seed`` here).
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
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import privacy.randomizer_support  # noqa: E402
from privacy.mechanisms import AsymmetricOHE  # noqa: E402
from privacy.randomized_response import KaryRandomizedResponse  # noqa: E402

# This bench compares per-device coins with the peers' per-device clients: never draw the sum from
# its exact distribution here, however large the fleet.
privacy.randomizer_support.EXACT_SUM_ABOVE = sys.maxsize

EPSILON0 = 4.0
ZIPF_S = 1.1
DATA_SEED = 20_240_303
KS = [64, 1_024]
TIMING_NS = [100_000, 1_000_000]
TIMING_REPEATS = {100_000: 3, 1_000_000: 1}  # same for every implementation
PEER_MAX_SECONDS = 180.0  # run a peer at a size only if its measured rate says it fits in this
MSE_N = 100_000
MSE_REPS = 20

OURS, PURE, MFL = "ours", "pure-ldp", "multi-freq-ldpy"
UNBIASED = "unbiased"  # the plain (S - n q)/(p - q), what ours and pure-ldp return
MI_CLIPPED = "MI"  # multi-freq-ldpy's estimator: clipped at 0 and renormalised to n


def zipf_values(n: int, k: int, seed: int) -> np.ndarray:
    """n bucket indices in [0, k) with P(bucket i) proportional to 1/(i + 1)^ZIPF_S."""
    weights = 1.0 / np.arange(1, k + 1, dtype=np.float64) ** ZIPF_S
    rng = np.random.default_rng(seed)
    return rng.choice(k, size=n, p=weights / weights.sum()).astype(np.int64)


# --- implementations, each: values, k, seed -> {estimator: estimated counts (k,)} ----------------


def ours_oue(values: np.ndarray, k: int, seed: int) -> dict[str, np.ndarray]:
    mech = AsymmetricOHE(EPSILON0)
    return {UNBIASED: mech.debias(mech.privatize_sum(values, k, np.random.default_rng(seed)), values.size, k)}


def ours_grr(values: np.ndarray, k: int, seed: int) -> dict[str, np.ndarray]:
    mech = KaryRandomizedResponse(EPSILON0)
    return {UNBIASED: mech.debias(mech.privatize_sum(values, k, np.random.default_rng(seed)), values.size, k)}


def _pure_seed(seed: int) -> None:
    np.random.seed(seed % 2**32)
    random.seed(seed)


def _identity(x: int) -> int:  # our values are already indices in [0, k)
    return x


def pure_oue(values: np.ndarray, k: int, seed: int) -> dict[str, np.ndarray]:
    from pure_ldp.frequency_oracles import UEClient, UEServer

    _pure_seed(seed)
    client = UEClient(EPSILON0, k, use_oue=True, index_mapper=_identity)
    server = UEServer(EPSILON0, k, use_oue=True, index_mapper=_identity)
    privatise, aggregate = client.privatise, server.aggregate
    for v in values.tolist():  # one device per call, as the package is meant to be used
        aggregate(privatise(v))
    return {UNBIASED: np.asarray(server.estimate_all(range(k), suppress_warnings=True), dtype=np.float64)}


def pure_grr(values: np.ndarray, k: int, seed: int) -> dict[str, np.ndarray]:
    from pure_ldp.frequency_oracles import DEClient, DEServer

    _pure_seed(seed)
    client = DEClient(EPSILON0, k, index_mapper=_identity)
    server = DEServer(EPSILON0, k, index_mapper=_identity)
    privatise, aggregate = client.privatise, server.aggregate
    for v in values.tolist():
        aggregate(privatise(v))
    return {UNBIASED: np.asarray(server.estimate_all(range(k), suppress_warnings=True), dtype=np.float64)}


_numba_seed: Callable[[int], None] | None = None


def mfl_seed(seed: int) -> None:
    global _numba_seed
    if _numba_seed is None:
        from numba import njit

        @njit
        def seed_numba(value: int) -> None:
            np.random.seed(value)

        _numba_seed = seed_numba
    _numba_seed(seed % 2**32)


def mfl_oue(values: np.ndarray, k: int, seed: int) -> dict[str, np.ndarray]:
    from multi_freq_ldpy.estimators.Histogram_estimator import MI
    from multi_freq_ldpy.pure_frequency_oracles.UE import UE_Client

    mfl_seed(seed)
    n = values.size
    # UE_Aggregator_MI(reports) is MI(sum(reports), n, p, q) over a list of n dense float64 reports
    # (8 GB at n = 10^6, k = 1,024): the reports are summed as they come instead, same result.
    total = np.zeros(k)
    for v in values.tolist():  # one device per call; each call is compiled (numba)
        total += UE_Client(v, k, EPSILON0, True)
    p, q = 0.5, 1.0 / (math.exp(EPSILON0) + 1.0)
    return {MI_CLIPPED: MI(total, n, p, q) * n, UNBIASED: (total - n * q) / (p - q)}


def mfl_grr(values: np.ndarray, k: int, seed: int) -> dict[str, np.ndarray]:
    from multi_freq_ldpy.pure_frequency_oracles.GRR import GRR_Aggregator_MI, GRR_Client

    mfl_seed(seed)
    n = values.size
    reports = [GRR_Client(v, k, EPSILON0) for v in values.tolist()]
    e = math.exp(EPSILON0)
    p, q = e / (e + k - 1), 1.0 / (e + k - 1)
    counts = np.bincount(np.asarray(reports), minlength=k).astype(np.float64)
    return {MI_CLIPPED: GRR_Aggregator_MI(reports, k, EPSILON0) * n, UNBIASED: (counts - n * q) / (p - q)}


RANDOMIZERS = {
    "OUE": {OURS: ours_oue, PURE: pure_oue, MFL: mfl_oue},
    "GRR": {OURS: ours_grr, PURE: pure_grr, MFL: mfl_grr},
}
MECHANISM = {"OUE": AsymmetricOHE(EPSILON0), "GRR": KaryRandomizedResponse(EPSILON0)}
CALLS = {
    ("OUE", OURS): "`AsymmetricOHE.privatize_sum` + `debias`",
    ("OUE", PURE): "`UEClient(use_oue=True).privatise` + `UEServer.aggregate` per device, `estimate_all`",
    ("OUE", MFL): "`UE_Client(optimal=True)` per device, reports summed, `MI`",
    ("GRR", OURS): "`KaryRandomizedResponse.privatize_sum` + `debias`",
    ("GRR", PURE): "`DEClient.privatise` + `DEServer.aggregate` per device, `estimate_all`",
    ("GRR", MFL): "`GRR_Client` per device, `GRR_Aggregator_MI`",
}


def warm_up() -> None:
    """Compile multi-freq-ldpy's numba clients before any clock runs."""
    small = zipf_values(10, 64, 1)
    for fn in (mfl_oue, mfl_grr):
        fn(small, 64, 0)


def check_parameters() -> dict:
    """The probabilities each peer uses, next to ours, at epsilon0 (k = 64 for GRR)."""
    from pure_ldp.frequency_oracles import DEClient, DEServer, UEClient, UEServer

    k = 64
    ohe, grr = MECHANISM["OUE"], MECHANISM["GRR"]
    ue_client, ue_server = UEClient(EPSILON0, k, use_oue=True), UEServer(EPSILON0, k, use_oue=True)
    de_client, de_server = DEClient(EPSILON0, k), DEServer(EPSILON0, k)
    e = math.exp(EPSILON0)
    out = {
        "oue": (ohe.p_own, ohe.p_other),
        "pure_oue": (ue_client.p, ue_client.q, ue_server.p, ue_server.q),
        "mfl_oue": (0.5, 1 / (e + 1)),  # UE_Client(optimal=True), UE_Aggregator_MI
        "grr": (grr.p_keep(k), grr.p_other(k)),
        "pure_grr": (de_client.p, de_client.q, de_server.p, de_server.q),
        "mfl_grr": (e / (e + k - 1), 1 / (e + k - 1)),  # GRR_Client, GRR_Aggregator_MI: p, (1 - p)/(k - 1)
    }
    for a, b in [("oue", "pure_oue"), ("oue", "mfl_oue"), ("grr", "pure_grr"), ("grr", "mfl_grr")]:
        for i, value in enumerate(out[b]):
            assert math.isclose(value, out[a][i % 2]), (a, b, out)
    return out


# --- measurements ---------------------------------------------------------------------------------


def timing(all_values: dict[int, np.ndarray], ns: list[int], repeats: dict[int, int]) -> list[dict]:
    rows = []
    for randomizer, impls in RANDOMIZERS.items():
        for k, values_k in all_values.items():
            rate: dict[str, float] = {}  # reports/s measured at the largest n run so far
            for n in ns:
                values = values_k[:n]
                for name, fn in impls.items():
                    row = {"randomizer": randomizer, "impl": name, "k": k, "n": n}
                    if name in rate and n / rate[name] > PEER_MAX_SECONDS:
                        rows.append({**row, "runs": 0, "seconds": None, "skipped": n / rate[name]})
                        print(f"{randomizer} {name:>16} k={k:>5} n={n:>9,}: not run (~{n / rate[name]:.0f} s)")
                        continue
                    reps = repeats.get(n, 1)
                    secs = []
                    for i in range(reps):
                        start = time.perf_counter()
                        fn(values, k, 1_000 + i)
                        secs.append(time.perf_counter() - start)
                    med = statistics.median(secs)
                    rate[name] = n / med
                    rows.append({**row, "runs": reps, "seconds": med})
                    print(
                        f"{randomizer} {name:>16} k={k:>5} n={n:>9,}: {med:8.3f} s {n / med:>12,.0f} reports/s",
                        flush=True,
                    )
    return rows


def mse(all_values: dict[int, np.ndarray], n: int, reps: int) -> list[dict]:
    rows = []
    for randomizer, impls in RANDOMIZERS.items():
        for k, values_k in all_values.items():
            values = values_k[:n]
            true_counts = np.bincount(values, minlength=k).astype(np.float64)
            theory = float(MECHANISM[randomizer].variance(true_counts, n, k).mean())
            for name, fn in impls.items():
                errors: dict[str, list[tuple[float, float]]] = {}
                start = time.perf_counter()
                for r in range(reps):
                    for estimator, estimate in fn(values, k, 50_000 + r).items():
                        err = estimate - true_counts
                        errors.setdefault(estimator, []).append((float(np.mean(err**2)), float(np.mean(err))))
                elapsed = time.perf_counter() - start
                for estimator, pairs in errors.items():
                    mses = [m for m, _ in pairs]
                    m = statistics.fmean(mses)
                    row = {
                        "randomizer": randomizer,
                        "impl": name,
                        "estimator": estimator,
                        "k": k,
                        "mse": m,
                        "se": statistics.stdev(mses) / math.sqrt(reps) if reps > 1 else float("nan"),
                        "theory": theory,
                        "bias": statistics.fmean(b for _, b in pairs),
                        "seconds": elapsed,
                    }
                    rows.append(row)
                    print(
                        f"{randomizer} {name:>16} {estimator:>8} k={k:>5}: MSE {m:,.1f} (theory {theory:,.1f})",
                        flush=True,
                    )
    return rows


def machine() -> dict:
    from importlib.metadata import version

    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor() or "unknown",
    )
    return {
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "versions": f"pure-ldp {version('pure-ldp')}, multi-freq-ldpy {version('multi-freq-ldpy')}, "
        f"numba {version('numba')}",
        "date": time.strftime("%Y-%m-%d"),
    }


def render(mach: dict, params: dict, trows: list[dict], mrows: list[dict], context: dict) -> str:
    e = math.exp(EPSILON0)
    lines = [
        "# Local randomizers: ours beside pure-ldp and multi-freq-ldpy",
        "",
        f"Machine: {mach['nproc']} cores ({mach['cpu']}), Python {mach['python']}, numpy {mach['numpy']}, "
        f"{mach['versions']}. Date: {mach['date']}. Load average (1, 5, 15 min) before the run: "
        f"{context['load_before']}; after: {context['load_after']}."
        + (
            " **Measured while other work shared the two cores**: rates are low and noisy, for every library alike."
            if context["busy"]
            else ""
        ),
        "",
        "Reproduce (the peers live in their own virtualenv, never in `.venv`):",
        "",
        "```",
        "python3 -m venv .venv-bench",
        ".venv-bench/bin/pip install -r bench/requirements-peers.txt",
        ".venv-bench/bin/python bench/ldp_compare.py",
        "```",
        "",
        f"Workload: frequency estimation of one attribute, k = {', '.join(f'{k:,}' for k in KS)} buckets, "
        f"epsilon0 = {EPSILON0:g}; values drawn once per k from a Zipf-like distribution (P(bucket i) ∝ "
        f"1/(i+1)^{ZIPF_S}, seed {DATA_SEED}), the first n of them are the fleet of size n. Every library gets "
        "the same values and the same epsilon0; every device privatizes with its own coins (ours never takes its "
        "exact-sum shortcut here).",
        "",
        "## What each randomizer is",
        "",
        "Like with like. **OUE** (optimised unary encoding): our `AsymmetricOHE` reports its own bit with "
        "probability 1/2 and every other bit with 1/(e^ε0 + 1); pure-ldp's `UEClient(use_oue=True)` and "
        "multi-freq-ldpy's `UE_Client(optimal=True)` are the same randomizer "
        f"(checked here: p = {params['oue'][0]}, q = {params['oue'][1]:.12f} for all three). "
        "**GRR** (k-ary randomized response, direct encoding): our `KaryRandomizedResponse`, pure-ldp's "
        "`DEClient`, multi-freq-ldpy's `GRR_Client`: keep the value with p = e^ε0/(e^ε0 + k − 1), else one of "
        f"the k − 1 others uniformly (checked at k = 64: p = {params['grr'][0]:.12f}, q = {params['grr'][1]:.12f} "
        "for all three). multi-freq-ldpy also has SUE, OLH/BLH, SS and ADP; pure-ldp has OLH, Hadamard "
        "and RAPPOR variants: not compared here, as we have no twin of them in this form.",
        "",
        "How they run: ours privatizes a block of devices at once from a `numpy.random.Generator` "
        "(vectorised numpy) and sums the reports; for OUE it draws only each device's ones (Geometric gaps "
        "between them, about 1 + (k − 1) q variates a device, the same distribution as a coin per bit: "
        "`privacy.randomizer_support.unary_ones`). pure-ldp privatizes and aggregates **one device per Python call** "
        "(`np.random.choice` over k coordinates, or `random.random()`/`random.randint`). multi-freq-ldpy's "
        "clients are numba-compiled but still called **once per device from a Python loop**; its OUE client "
        "returns a dense float64 vector of k entries per device. Its `UE_Aggregator_MI` takes the list of all "
        "reports (8 GB at n = 10^6, k = 1,024), so the bench sums the reports as they come and calls its `MI` "
        "on the sum, which is what `UE_Aggregator_MI` computes; for GRR it runs `GRR_Aggregator_MI` as is "
        "(a Python loop over the reports). numba compilation is done before any clock runs.",
        "",
        "Estimators: ours and pure-ldp return the unbiased (S_d − n q)/(p − q). multi-freq-ldpy's `MI` clips "
        "negative estimates to 0 and renormalises the frequencies to sum to 1 (× n here to give counts): biased. "
        "Clipping removes the negative noise of near-empty buckets, and renormalising then scales every estimate "
        "down to compensate; whether the error rises or falls depends on k and on the distribution. The accuracy "
        "table shows its `MI` and, from the same reports, the unbiased estimate, so that the randomizers are "
        "compared like with like and the estimators apart. (Ours offers clipped and thresholded views of a "
        "release, `privacy.intervals`, without renormalising; the table uses the raw estimate.)",
        "",
        "## Throughput: reports/second",
        "",
        "End to end: privatize every device, aggregate, estimate all k buckets. Median of the runs shown "
        "(the same number of runs for every library at each n).",
        "",
        "| randomizer | k | n | library: calls | runs | seconds (median) | reports/s | ours ÷ this |",
        "|---|---:|---:|---|---:|---:|---:|---:|",
    ]
    ours_rate = {
        (r["randomizer"], r["k"], r["n"]): r["n"] / r["seconds"] for r in trows if r["impl"] == OURS and r["seconds"]
    }
    for r in trows:
        label = f"{r['impl']}: {CALLS[(r['randomizer'], r['impl'])]}"
        head = f"| {r['randomizer']} | {r['k']:,} | {r['n']:,} | {label}"
        if r["seconds"] is None:
            lines.append(
                f"{head} | 0 | not run: ~{r['skipped']:.0f} s at the rate measured at the smaller n, over the "
                f"{PEER_MAX_SECONDS:.0f} s limit | — | — |"
            )
            continue
        rate = r["n"] / r["seconds"]
        ratio = ours_rate.get((r["randomizer"], r["k"], r["n"]))
        lines.append(
            f"{head} | {r['runs']} | {r['seconds']:.3f} | {rate:,.0f} | "
            + (f"{ratio / rate:.1f}× |" if ratio and r["impl"] != OURS else "— |")
        )
    lines += [
        "",
        "## Accuracy: mean squared error of the estimated counts",
        "",
        f"n = {context['mse_n']:,}, R = {context['reps']} repetitions with coin seeds 50000… on the same values. "
        "MSE = mean over repetitions and over the k buckets of (estimated count − true count)²; ± is the standard "
        "error over the repetitions. Theory: the mean over buckets of the mechanism's `variance` at the true "
        "counts (the unbiased estimator's MSE). Mean error: the signed error averaged over buckets and "
        "repetitions (≈ 0 for an unbiased estimator).",
        "",
        "| randomizer | k | library | estimator | MSE per bucket | ± s.e. | theory | MSE / theory | mean error |",
        "|---|---:|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in mrows:
        estimator = "MI: clipped at 0, renormalised" if r["estimator"] == MI_CLIPPED else "unbiased"
        lines.append(
            f"| {r['randomizer']} | {r['k']:,} | {r['impl']} | {estimator} | {r['mse']:,.1f} | {r['se']:,.1f} | "
            f"{r['theory']:,.1f} | {r['mse'] / r['theory']:.3f} | {r['bias']:+.2f} |"
        )
    lines += [
        "",
        f"OUE's per-device variance factor 4e^ε0/(e^ε0 − 1)² = {4 * e / (e - 1) ** 2:.6f} at ε0 = {EPSILON0:g}. "
        f"Whole script: {context['wall']:.0f} s wall.",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="tiny sizes, print only, write nothing")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "ldp_compare.md")
    args = parser.parse_args()
    wall = time.perf_counter()
    load_before = " ".join(f"{x:.2f}" for x in os.getloadavg())
    params = check_parameters()
    warm_up()
    if args.quick:
        ns, repeats, mse_n, reps = [2_000, 5_000], {}, 5_000, 3
    else:
        ns, repeats, mse_n, reps = TIMING_NS, TIMING_REPEATS, MSE_N, MSE_REPS
    all_values = {k: zipf_values(max(max(ns), mse_n), k, DATA_SEED) for k in KS}
    trows = timing(all_values, ns, repeats)
    mrows = mse(all_values, mse_n, reps)
    context = {
        "load_before": load_before,
        "load_after": " ".join(f"{x:.2f}" for x in os.getloadavg()),
        "busy": max(float(x) for x in load_before.split()[:2]) > 0.5,
        "mse_n": mse_n,
        "reps": reps,
        "wall": time.perf_counter() - wall,
    }
    text = render(machine(), params, trows, mrows, context)
    if args.quick:
        print(text)
        return
    args.out.parent.mkdir(exist_ok=True)
    args.out.write_text(text)
    print(f"wrote {args.out} ({context['wall']:.0f} s)")


if __name__ == "__main__":
    main()
