"""What the PLD account costs a device's check; writes bench/results/device_pld.md.

    .venv/bin/python bench/device_pld.py

One shard of 10,000 devices under the tightest accountant answers rounds of one recipe until its
allowance is nearly spent; then, per history length, the time of `Accountant.check` when another
account fits (the PLD account is skipped), when only the PLD account can decide and its composition
is new to the process (composed from the pairs), and when it was composed before (cached), and the
ledger's packed size. Medians of a few runs; the composition cache is cleared for the "new" column.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from bench.host import describe  # noqa: E402
from pfs_device import budget  # noqa: E402
from pfs_device.budget import Accountant, BudgetRequest, TightestComposition, ledger_empty  # noqa: E402
from pfs_device.columns import pack  # noqa: E402
from privacy.enforced_cohort import min_cohort_enforced  # noqa: E402

OUTPUT = Path(__file__).resolve().parent / "results" / "device_pld.md"
DEVICES = 10_000
REPEATS = 5


def request(mechanism: str, epsilon0: float, epsilon: float, aggregator_noise: bool = False) -> BudgetRequest:
    if aggregator_noise:
        return BudgetRequest(epsilon0=float("inf"), epsilon=epsilon, delta=1e-7, fields=("age",), min_cohort=1000,
                             aggregator_noise=True)  # fmt: skip
    cohort = min_cohort_enforced(mechanism=mechanism, epsilon0=epsilon0, epsilon=epsilon, delta=1e-7).min_cohort
    return BudgetRequest(epsilon0=epsilon0, epsilon=epsilon, delta=1e-7, fields=("age",), min_cohort=cohort,
                         mechanism=mechanism, mechanism_epsilon0=epsilon0)  # fmt: skip


def policy(epsilon: float) -> dict:
    return {
        "budget": {"epsilon": epsilon, "reports": 10_000, "delta": 1e-6, "accountant": "tightest"},
        "fields": {"age": {"localEpsilon": 10.0, "epsilon": epsilon, "reports": 10_000, "aggregatorNoise": True}},
    }


def median_ms(call) -> float:
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def row(label: str, query: BudgetRequest, rounds: int) -> str:
    accountant, ledger = Accountant(TightestComposition()), ledger_empty(DEVICES)
    everyone = np.ones(DEVICES, dtype=bool)
    for _ in range(rounds):
        accountant.charge(ledger, query, everyone)
    # An allowance the sum still fits (PLD skipped), and one just above the PLD account's epsilon
    # after one more round, below what every other account gives it (only the PLD account decides).
    after = {name: column.copy() for name, column in ledger.items()}
    accountant.charge(after, query, everyone)
    accounts = {name: float(eps[0]) for name, eps in accountant.composition.accounts(after, "", 1e-6).items()}
    others = min(eps for name, eps in accounts.items() if name != "pld")
    assert accounts["pld"] * 1.0001 < others, (label, accounts)
    roomy, tight = policy(query.epsilon * (rounds + 2)), policy(accounts["pld"] * 1.0001)
    skipped = median_ms(lambda: accountant.check(ledger, roomy, query))

    def uncached() -> None:
        budget._pld_epsilon.cache_clear()
        budget._pld_of.cache_clear()
        accountant.check(ledger, tight, query)

    new = median_ms(uncached)
    accountant.check(ledger, tight, query)
    cached = median_ms(lambda: accountant.check(ledger, tight, query))
    epsilon = float(accountant.composition.accounts(ledger, "", 1e-6)["pld"][0])
    size = len(pack(ledger)) / 1024
    return (
        f"| {label} | {rounds} | {epsilon:.4f} | {others:.4f} | {skipped:.1f} | {new:.0f} | "
        f"{cached:.1f} | {size:,.0f} |"
    )


def main() -> None:
    load_before = os.getloadavg()
    rows = [
        row(label, query, rounds)
        for label, query in (
            ("asymmetric OHE, ε0 2, ε 0.3", request("asymmetric_ohe", 2.0, 0.3)),
            ("k-ary RR, ε0 4, ε 1", request("kary_rr", 4.0, 1.0)),
            ("aggregator noise (discrete Gaussian), ε 0.5", request("", 0.0, 0.5, aggregator_noise=True)),
        )
        for rounds in (1, 10, 50)
    ]
    load_after = os.getloadavg()
    lines = [
        "# The PLD account on a device's check",
        "",
        f"Machine: {describe(tasks='one process')}. Date: {time.strftime('%Y-%m-%d')}. Command: "
        f"`.venv/bin/python bench/device_pld.py`. Load average before: {' '.join(f'{x:.2f}' for x in load_before)}; "
        f"after: {' '.join(f'{x:.2f}' for x in load_after)}.",
        "",
        f"One shard of {DEVICES:,} devices with the same history (`rounds` answered rounds of the recipe) under "
        "the tightest accountant, checking one more round. PLD ε: the history's PLD account at δ' = 1e-6; "
        "others: the smallest of its basic, advanced and Rényi accounts after one more round (the PLD check "
        "allows just above the PLD's, below this). Check times (median of 5, ms): when the sum fits (the PLD account is not composed), "
        "when only the PLD account can decide and its composition is new to the process, and when it was "
        "composed before (devices with the same counts share one composition per process). Ledger: packed "
        "size of the shard's columns.",
        "",
        "| recipe | rounds | PLD ε | others ε, one more round | check, sum fits (ms) | check, PLD new (ms) | check, PLD cached (ms) "
        "| ledger (KiB) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
        *rows,
        "",
    ]
    OUTPUT.write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
