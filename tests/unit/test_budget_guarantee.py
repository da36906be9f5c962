"""What was spent, as one (epsilon, delta) statement with the total delta (issue 30, requirement 1).

pfs_device.budget.Accountant.guarantee states a device's history under the accountant in force:
the smallest epsilon of the accounts it keeps, with that account's total delta. Each is recomputed
here with privacy.composition's own functions over the same history, never with the ledger's code.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from analyses.reads.analysis_reads import delta_total_max
from analyses.rules.enforced_policy import EnforcedPolicy
from pfs_device.budget import (
    RENYI_ORDERS,
    Accountant,
    AdvancedComposition,
    BasicComposition,
    BudgetRequest,
    RenyiComposition,
    TightestComposition,
    ledger_empty,
    query_rdp,
)
from privacy.aggregator_noise import aggregator_noise
from privacy.composition import RenyiDP, advanced_composition_epsilon, rdp_compose, rdp_epsilon
from privacy.pld import composed_epsilon, discrete_gaussian

DELTA_PRIME = 1e-6


def local(epsilon: float = 0.3, delta: float = 1e-7) -> BudgetRequest:
    return BudgetRequest(
        epsilon0=2.0,
        epsilon=epsilon,
        delta=delta,
        fields=("age",),
        min_cohort=20_000,
        mechanism="asymmetric_ohe",
        mechanism_epsilon0=2.0,
    )


def noised(epsilon: float = 0.5, delta: float = 1e-7) -> BudgetRequest:
    return BudgetRequest(
        epsilon0=math.inf, epsilon=epsilon, delta=delta, fields=("age",), min_cohort=1000, aggregator_noise=True
    )


def history(composition, requests: list[BudgetRequest]):
    accountant = Accountant(composition)
    ledger = ledger_empty(1)
    for request in requests:
        accountant.charge(ledger, request, np.ones(1, dtype=bool))
    return accountant, ledger


def guarantee(composition, requests: list[BudgetRequest], scope: str = ""):
    accountant, ledger = history(composition, requests)
    return accountant.guarantee(ledger, scope, delta_prime=DELTA_PRIME, delta_sum=math.fsum(r.delta for r in requests))


def test_basic_composition_states_the_sum_of_the_deltas_not_one_query_s() -> None:
    spent = guarantee(BasicComposition(), [local(0.5, 1e-7), local(0.25, 2e-7), local(0.25, 3e-7)])
    assert spent.account == "basic"
    assert spent.epsilon == pytest.approx(1.0, abs=1e-9)
    assert spent.delta == pytest.approx(6e-7, rel=1e-9)  # not 3e-7, the largest query's


def test_advanced_composition_of_many_small_queries_adds_delta_prime_to_the_sum() -> None:
    queries = [local(0.02, 1e-9)] * 200
    spent = guarantee(AdvancedComposition(), queries)
    expected = advanced_composition_epsilon(200 * 0.02**2, 200 * 0.02 * math.expm1(0.02), DELTA_PRIME)
    assert spent.account == "advanced" and expected < 200 * 0.02
    assert spent.epsilon == pytest.approx(expected, rel=1e-9)
    assert spent.delta == pytest.approx(200 * 1e-9 + DELTA_PRIME, rel=1e-9)


def test_advanced_composition_of_few_large_queries_falls_back_to_the_sum_and_its_delta() -> None:
    spent = guarantee(AdvancedComposition(), [local(1.0), local(1.0)])
    assert spent.account == "basic" and spent.epsilon == pytest.approx(2.0)
    assert spent.delta == pytest.approx(2e-7)


def test_the_renyi_account_has_the_conversion_s_delta_alone() -> None:
    queries = [noised(0.5)] * 20
    spent = guarantee(RenyiComposition(), queries)
    curve = rdp_compose([RenyiDP(RENYI_ORDERS, query_rdp(q)) for q in queries])
    exact = rdp_epsilon(curve, DELTA_PRIME)
    assert spent.account == "renyi" and spent.epsilon < 20 * 0.5
    # the device's account bounds the conversion from above, by rounding only
    assert exact <= spent.epsilon <= exact * (1 + 1e-9) + 1e-12
    # the curves composed (the Gaussian's) carry no delta of their own: delta' is the whole delta
    assert spent.delta == pytest.approx(DELTA_PRIME, rel=1e-9) and spent.delta >= DELTA_PRIME


def test_the_tightest_accountant_states_its_smallest_account_with_that_account_s_delta() -> None:
    queries = [noised(0.5)] * 20
    tightest = guarantee(TightestComposition(), queries)
    each = {name: guarantee(cls(), queries) for name, cls in (("basic", BasicComposition), ("renyi", RenyiComposition))}
    # Its PLD account (tests/unit/test_budget_pld.py) is below the Renyi one: the discrete Gaussian's
    # exact composition, which carries delta' alone too.
    noise = aggregator_noise(0.5, 1e-7)
    exact = composed_epsilon([(discrete_gaussian(noise.sigma, 1), 2 * 20)], DELTA_PRIME)
    assert tightest.epsilon == pytest.approx(exact, rel=1e-9) and exact < min(g.epsilon for g in each.values())
    assert tightest.account == "pld" and tightest.delta == pytest.approx(DELTA_PRIME, rel=1e-9)
    # before any Renyi credit, a field with no history is 0 with no delta spent
    assert guarantee(TightestComposition(), [], scope="field:age:").epsilon == 0.0


@pytest.mark.parametrize("composition", [BasicComposition, AdvancedComposition, RenyiComposition, TightestComposition])
def test_no_statement_claims_less_than_the_basic_sums_allow(composition) -> None:
    # Whatever the account, its delta covers every query's: never below the sum (basic, advanced)
    # or below delta' (Renyi), and its epsilon never above the plain sum.
    rng = np.random.default_rng(30)
    queries = [
        local(float(rng.uniform(0.01, 0.6)), float(rng.uniform(1e-9, 1e-7))) if rng.random() < 0.7 else noised()
        for _ in range(40)
    ]
    spent = guarantee(composition(), queries)
    assert spent.epsilon <= math.fsum(q.epsilon for q in queries) + 1e-9
    floor = DELTA_PRIME if spent.account in ("renyi", "pld") else math.fsum(q.delta for q in queries)
    assert spent.delta >= floor


@pytest.mark.parametrize(
    ("accountant", "expected"),
    [("basic", 5e-6), ("renyi", 5e-6), ("advanced", 6e-6), ("tightest", 6e-6)],
)
def test_the_policy_s_largest_total_delta(accountant, expected) -> None:
    assert delta_total_max({"delta": 1e-6, "reports": 5, "accountant": accountant}) == pytest.approx(expected)


@pytest.mark.parametrize("accountant", ["basic", "advanced", "renyi", "tightest"])
def test_the_accountant_reads_in_a_sentence_with_its_names_kept(accountant) -> None:
    # Issue 31, item 8: "rényi dp" on screen. Lower case but for Rényi, DP and PLD.
    phrase = EnforcedPolicy.from_content(
        {"queryClass": {}, "budget": {"epsilon": 1.0, "reports": 1, "delta": 1e-6, "accountant": accountant},
         "fields": {}}
    ).accountant_phrase()  # fmt: skip
    assert "rényi" not in phrase and " dp" not in phrase and "pld" not in phrase
    assert phrase[0].islower() or phrase.startswith("Rényi")
