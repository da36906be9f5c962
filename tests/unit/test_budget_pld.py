"""The device's PLD account (issue 30, requirement 2): the tightest accountant composes every query's
dominating pair numerically, and a device may answer when that composition fits.

Each expected number is recomputed here from privacy.pld's constructors over the same history,
never with the ledger's code; the ledger's own sums are compared with them.
"""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest

from analyses.services.budget import rounds_affordable
from analyses.services.policy import analysis_approve, analysis_create
from pfs_device.budget import (
    Accountant,
    BudgetRequest,
    Decision,
    RenyiComposition,
    TightestComposition,
    ledger_empty,
    query_pld_key,
)
from privacy.aggregator_noise import aggregator_noise
from privacy.enforced_cohort import min_cohort_enforced
from privacy.pld import composed_epsilon, discrete_gaussian, discrete_laplace, shuffled
from tests.conftest import SPEC

DELTA_PRIME = 1e-6


def local(mechanism: str = "asymmetric_ohe", epsilon: float = 0.3, epsilon0: float = 2.0) -> BudgetRequest:
    """A shuffled round of a local randomizer at replacement epsilon0, its cohort the one devices enforce."""
    cohort = min_cohort_enforced(mechanism=mechanism, epsilon0=epsilon0, epsilon=epsilon, delta=1e-7).min_cohort
    return BudgetRequest(
        epsilon0=epsilon0, epsilon=epsilon, delta=1e-7, fields=("age",), min_cohort=cohort,
        mechanism=mechanism, mechanism_epsilon0=epsilon0 / 2 if mechanism == "symmetric_rappor" else epsilon0,
    )  # fmt: skip


def noised(epsilon: float = 0.5, delta: float = 1e-7) -> BudgetRequest:
    return BudgetRequest(
        epsilon0=math.inf, epsilon=epsilon, delta=delta, fields=("age",), min_cohort=1000, aggregator_noise=True
    )


def policy(epsilon: float, reports: int = 1000) -> dict:
    return {
        "budget": {"epsilon": epsilon, "reports": reports, "delta": DELTA_PRIME, "accountant": "tightest"},
        "fields": {"age": {"localEpsilon": 10.0, "epsilon": epsilon, "reports": reports, "aggregatorNoise": True}},
    }


def charged(requests: list[BudgetRequest], size: int = 1, who=None):
    accountant, ledger = Accountant(TightestComposition()), ledger_empty(size)
    for request in requests:
        accountant.charge(ledger, request, np.ones(size, dtype=bool) if who is None else who)
    return accountant, ledger


def pld_statement(requests: list[BudgetRequest], scope: str = "") -> float:
    accountant, ledger = charged(requests)
    spent = accountant.guarantee(ledger, scope, delta_prime=DELTA_PRIME, delta_sum=sum(r.delta for r in requests))
    assert spent.account == "pld" and spent.delta == pytest.approx(DELTA_PRIME)
    return spent.epsilon


def test_ten_shuffled_rounds_are_stated_by_their_clone_pairs_composed() -> None:
    query = local()
    expected = composed_epsilon([(shuffled(2.0, query.min_cohort, "stronger-2022"), 10)], DELTA_PRIME)
    assert pld_statement([query] * 10) == pytest.approx(expected, rel=1e-9)
    # and it is what the field's scope states too: the same ten queries read age
    assert pld_statement([query] * 10, scope="field:age:") == pytest.approx(expected, rel=1e-9)
    # Hadamard response has FMT 2020's clone rate (privacy.enforced_cohort.BOUNDS): its own pair.
    hadamard = local("hadamard_response")
    expected = composed_epsilon([(shuffled(2.0, hadamard.min_cohort, "clones-2020"), 3)], DELTA_PRIME)
    assert pld_statement([hadamard] * 3) == pytest.approx(expected, rel=1e-9)


def test_where_another_account_is_tighter_the_statement_keeps_it() -> None:
    # Symmetric RAPPOR's Renyi curve is its own output's (seed 000 C.1.3), the clone pair the generic
    # one at 2 epsilon0: the Renyi account stays below the PLD's, and the tightest takes it.
    accountant, ledger = charged([local("symmetric_rappor", epsilon0=4.0)] * 10)
    accounts = {name: float(eps[0]) for name, eps in accountant.composition.accounts(ledger, "", DELTA_PRIME).items()}
    assert accounts["renyi"] < accounts["pld"] < accounts["basic"]
    assert accountant.guarantee(ledger, "", delta_prime=DELTA_PRIME, delta_sum=1e-6).account == "renyi"
    # Four pure 0.5-DP discrete Laplace rounds: the sum 2 is exact, the PLD's grid adds up to 8 steps.
    accountant, ledger = charged([noised(0.5, 0.0)] * 4)
    accounts = accountant.composition.accounts(ledger, "", DELTA_PRIME)
    assert 2.0 <= accounts["pld"][0] <= 2.0 + 8 * 1e-4 and accounts["basic"][0] == 2.0
    assert accountant.guarantee(ledger, "", delta_prime=DELTA_PRIME, delta_sum=0.0).account == "basic"


def test_aggregator_noise_composes_one_aggregators_noise_on_two_coordinates() -> None:
    gaussian, laplace = noised(0.5, 1e-7), noised(0.5, 0.0)
    sigma, scale = aggregator_noise(0.5, 1e-7).sigma, float(aggregator_noise(0.5, 0.0).scale)
    expected = composed_epsilon(
        [(discrete_gaussian(sigma, 1), 2 * 6), (discrete_laplace(scale, 1), 2 * 4)], DELTA_PRIME
    )
    assert pld_statement([gaussian] * 6 + [laplace] * 4) == pytest.approx(expected, rel=1e-9)


def test_the_pld_account_lets_a_device_answer_where_every_other_account_refuses() -> None:
    query = noised(0.5, 1e-7)
    accountant, ledger = charged([query] * 19)
    renyi = Accountant(RenyiComposition())
    renyi_ledger = ledger_empty(1)
    for _ in range(19):
        renyi.charge(renyi_ledger, query, np.ones(1, dtype=bool))
    # An allowance between the PLD's 20-round epsilon and the Renyi account's.
    pld_20 = composed_epsilon([(discrete_gaussian(aggregator_noise(0.5, 1e-7).sigma, 1), 40)], DELTA_PRIME)
    spec = policy(pld_20 * 1.01)
    assert renyi.check(renyi_ledger, spec, query)[0] == Decision.ANALYSIS_BUDGET
    assert accountant.check(ledger, spec, query)[0] == Decision.ANSWERED
    # and one round more than the PLD allows is refused: it never claims below its own bound
    accountant.charge(ledger, query, np.ones(1, dtype=bool))
    assert accountant.check(ledger, spec, query)[0] == Decision.ANALYSIS_BUDGET


def test_devices_with_different_histories_in_one_shard_each_get_their_own_composition() -> None:
    a, b = noised(0.5, 1e-7), local()
    accountant, ledger = Accountant(TightestComposition()), ledger_empty(4)
    accountant.charge(ledger, a, np.array([True, True, False, False]))
    accountant.charge(ledger, b, np.array([True, False, True, False]))
    accounts = accountant.composition.accounts(ledger, "", DELTA_PRIME)["pld"]
    gaussian = (discrete_gaussian(aggregator_noise(0.5, 1e-7).sigma, 1), 2)
    clone = (shuffled(2.0, b.min_cohort, "stronger-2022"), 1)
    expected = [
        composed_epsilon([gaussian, clone], DELTA_PRIME),
        composed_epsilon([gaussian], DELTA_PRIME),
        composed_epsilon([clone], DELTA_PRIME),
        0.0,
    ]
    assert accounts == pytest.approx(expected, rel=1e-9)


def test_a_ledger_from_before_the_account_gives_no_pld_credit() -> None:
    accountant, ledger = charged([noised()] * 3)
    for name in [n for n in ledger if "pld" in n]:
        del ledger[name]  # as a ledger written before the PLD account existed
    assert accountant.composition.accounts(ledger, "", DELTA_PRIME)["pld"][0] == math.inf
    accountant.charge(ledger, noised(), np.ones(1, dtype=bool))  # its history stays unknown after
    assert accountant.composition.accounts(ledger, "", DELTA_PRIME)["pld"][0] == math.inf


def test_a_query_with_no_dominating_pair_ends_the_accounts_credit_rather_than_skip_it() -> None:
    unknown = BudgetRequest(epsilon0=2.0, epsilon=0.5, delta=1e-7, fields=("age",), min_cohort=5000, mechanism="?")
    assert query_pld_key(unknown) is None
    accountant, ledger = charged([noised(), unknown])
    assert accountant.composition.accounts(ledger, "", DELTA_PRIME)["pld"][0] == math.inf


@pytest.mark.django_db
def test_rounds_afforded_counts_by_the_pld_account_as_devices_would(fleet, analyst, officer) -> None:
    spec = copy.deepcopy(SPEC)
    spec["identifier"] = "test.pld"
    spec["budget"] = {"epsilon": 3.0, "reports": 1000, "delta": DELTA_PRIME, "accountant": "tightest"}
    spec["fields"]["age"].update(epsilon=3.0, reports=1000, aggregatorNoise=True)
    analysis = analysis_approve(analysis=analysis_create(spec=spec, owner=analyst), officer=officer)
    query = noised(0.5, 1e-7)
    count = rounds_affordable(analysis, query, limit=1000)
    renyi = rounds_affordable(analysis, query, composition="renyi", limit=1000)
    # Recomputed: the count is the largest T whose PLD composition fits 3.0.
    sigma = aggregator_noise(0.5, 1e-7).sigma
    composed = [composed_epsilon([(discrete_gaussian(sigma, 1), 2 * t)], DELTA_PRIME) for t in (count, count + 1)]
    assert composed[0] <= 3.0 < composed[1] and count > renyi
    assert rounds_affordable(analysis, query, limit=5) == 5  # the limit caps the count
