"""Frozen reference epsilons from google's dp-accounting for tests/unit/privacy/test_pld.py.

Runs under its own virtualenv (dp-accounting is never installed into .venv):

    python3 -m venv .venv-oracle && .venv-oracle/bin/pip install -r bench/requirements-oracle.txt
    .venv-oracle/bin/python bench/pld_oracle.py

and writes tests/vectors/pld/dp_accounting.json: per case, the composed epsilon at delta by
dp-accounting's PLD with a pessimistic estimate (an upper bound on the exact epsilon) and an
optimistic one (a lower bound), both at a discretisation interval finer than ours. The shuffled
clone pair is given to dp-accounting as two explicit pmfs over the outcomes (c, k)
(from_two_probability_mass_functions), built here independently of privacy/pld.py; outcomes whose
mass is below 1e-40 in both worlds are left out (together far below any delta used).
"""

from __future__ import annotations

import json
import math
import sys
import time
from importlib.metadata import version
from pathlib import Path

import numpy as np
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from scipy import stats

OUTPUT = Path(__file__).resolve().parent.parent / "tests" / "vectors" / "pld" / "dp_accounting.json"
INTERVAL = 1e-5
COMMAND = ".venv-oracle/bin/python bench/pld_oracle.py"

CASES: list[dict] = [
    {"name": "dgauss-18.37-x20", "kind": "discrete_gaussian", "parameters": {"sigma": 18.37, "sensitivity": 1},
     "count": 20, "delta": 1e-6},
    {"name": "dgauss-5-x100", "kind": "discrete_gaussian", "parameters": {"sigma": 5.0, "sensitivity": 1},
     "count": 100, "delta": 1e-8},
    {"name": "dgauss-40-s2-x1000", "kind": "discrete_gaussian", "parameters": {"sigma": 40.0, "sensitivity": 2},
     "count": 1000, "delta": 1e-9},
    {"name": "dlap-4-x2", "kind": "discrete_laplace", "parameters": {"scale": 4.0, "sensitivity": 1},
     "count": 2, "delta": 1e-6},
    {"name": "dlap-20-x50", "kind": "discrete_laplace", "parameters": {"scale": 20.0, "sensitivity": 1},
     "count": 50, "delta": 1e-6},
    {"name": "gauss-5-x10", "kind": "gaussian", "parameters": {"sigma": 5.0, "sensitivity": 1.0},
     "count": 10, "delta": 1e-6},
    {"name": "gauss-20-x1000", "kind": "gaussian", "parameters": {"sigma": 20.0, "sensitivity": 1.0},
     "count": 1000, "delta": 1e-9},
    {"name": "shuffled-2-100-stronger-x1", "kind": "shuffled",
     "parameters": {"epsilon0": 2.0, "n": 100, "method": "stronger-2022"}, "count": 1, "delta": 1e-6},
    {"name": "shuffled-4-1000-clones-x10", "kind": "shuffled",
     "parameters": {"epsilon0": 4.0, "n": 1000, "method": "clones-2020"}, "count": 10, "delta": 1e-8},
    {"name": "shuffled-2-2000-stronger-x100", "kind": "shuffled",
     "parameters": {"epsilon0": 2.0, "n": 2000, "method": "stronger-2022"}, "count": 100, "delta": 1e-8},
]  # fmt: skip


def clone_pmfs(epsilon0: float, n: int, method: str) -> tuple[dict, dict]:
    """log P and log Q of (C, A + 1 - D) and (C, A + D) over the outcomes (c, k)."""
    p = math.exp(epsilon0) / (math.exp(epsilon0) + 1)
    rate = 2 / (math.exp(epsilon0) + 1) if method == "stronger-2022" else math.exp(-epsilon0)
    log_p: dict = {}
    log_q: dict = {}
    clone_weights = stats.binom.pmf(np.arange(n), n - 1, rate)
    for c in np.nonzero(clone_weights > 1e-40)[0].tolist():
        b = np.concatenate((stats.binom.pmf(np.arange(c + 1), c, 0.5), [0.0]))
        before = np.concatenate(([0.0], b[:-1]))
        world_p = clone_weights[c] * (p * b + (1 - p) * before)
        world_q = clone_weights[c] * ((1 - p) * b + p * before)
        for k in np.nonzero((world_p > 1e-40) | (world_q > 1e-40))[0].tolist():
            log_p[(c, k)] = math.log(world_p[k]) if world_p[k] > 0 else -math.inf
            log_q[(c, k)] = math.log(world_q[k]) if world_q[k] > 0 else -math.inf
    return log_p, log_q


def build(case: dict, pessimistic: bool) -> pld_lib.PrivacyLossDistribution:
    kind, parameters = case["kind"], case["parameters"]
    if kind == "discrete_gaussian":
        return pld_lib.from_discrete_gaussian_mechanism(
            parameters["sigma"], parameters["sensitivity"], pessimistic_estimate=pessimistic,
            value_discretization_interval=INTERVAL,
        )  # fmt: skip
    if kind == "discrete_laplace":
        return pld_lib.from_discrete_laplace_mechanism(
            1.0 / parameters["scale"], parameters["sensitivity"], pessimistic_estimate=pessimistic,
            value_discretization_interval=INTERVAL,
        )  # fmt: skip
    if kind == "gaussian":
        return pld_lib.from_gaussian_mechanism(
            parameters["sigma"], parameters["sensitivity"], pessimistic_estimate=pessimistic,
            value_discretization_interval=INTERVAL, use_connect_dots=False,
        )  # fmt: skip
    if kind == "shuffled":
        log_p, log_q = clone_pmfs(parameters["epsilon0"], parameters["n"], parameters["method"])
        return pld_lib.from_two_probability_mass_functions(
            log_q, log_p, pessimistic_estimate=pessimistic, value_discretization_interval=INTERVAL, symmetric=True
        )
    raise ValueError(kind)


def main() -> None:
    results = []
    for case in CASES:
        start = time.perf_counter()
        values = {}
        for label, pessimistic in (("pessimistic", True), ("optimistic", False)):
            composed = build(case, pessimistic).self_compose(case["count"])
            values[label] = float(composed.get_epsilon_for_delta(case["delta"]))
        print(f"{case['name']}: {values} ({time.perf_counter() - start:.1f} s)", file=sys.stderr)
        results.append({**case, **values, "oracle_seconds": round(time.perf_counter() - start, 2)})
    OUTPUT.parent.mkdir(parents=True, exist_ok=True)
    document = {
        "generator": COMMAND,
        "dp_accounting": version("dp-accounting"),
        "value_discretization_interval": INTERVAL,
        "cases": results,
    }
    OUTPUT.write_text(json.dumps(document, indent=1) + "\n")


if __name__ == "__main__":
    main()
