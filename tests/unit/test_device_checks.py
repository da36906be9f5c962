"""The device's own decisions: query-class verification and budget checks 1-3, each branch."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from pfs_device import budget
from pfs_device.budget import (
    RENYI_ORDERS,
    Accountant,
    AdvancedComposition,
    BasicComposition,
    BudgetRequest,
    Decision,
    RenyiComposition,
    TightestComposition,
    ledger_empty,
    query_rdp,
    to_units,
)
from pfs_device.query import QueryRefused, parse_query, verify_query

QUERY_CLASS = {"stream": "KeyboardNGrams", "fields": ["age", "ngrams"], "cohortFields": ["locale"]}
POLICY = {
    "budget": {"epsilon": 0.5, "reports": 2, "delta": 1e-6},
    "fields": {"age": {"localEpsilon": 2.0, "epsilon": 0.3, "reports": 1}},
}


def request(**changes) -> BudgetRequest:
    values = {
        "epsilon0": 2.0,
        "epsilon": 0.3,
        "delta": 1e-6,
        "fields": ("age",),
        "min_cohort": 20_000,
        "mechanism": "asymmetric_ohe",
        "mechanism_epsilon0": 2.0,
    }
    return BudgetRequest(**{**values, **changes})


def decide(ledger, req=None, policy=POLICY):
    return Accountant(BasicComposition()).check(ledger, policy, req or request())


def test_figure_4_query_is_verified() -> None:
    assert verify_query("select age, ngrams from KeyboardNGrams", ["locale"], QUERY_CLASS).fields == ("age", "ngrams")


@pytest.mark.parametrize(
    ("text", "cohorts", "reason"),
    [
        ("select age, perplexity from KeyboardNGrams", [], "perplexity"),
        ("select age from ModelMetrics", [], "stream"),
        ("select age from KeyboardNGrams where age > 30", [], "only"),
        ("delete from KeyboardNGrams", [], "only"),
        ("select * from KeyboardNGrams", [], "only"),
        ("select age from KeyboardNGrams; drop table x", [], "only"),
        ("select age from KeyboardNGrams", ["age"], "cohort"),
    ],
)
def test_anything_outside_the_query_class_is_refused_with_a_reason(text: str, cohorts: list, reason: str) -> None:
    with pytest.raises(QueryRefused, match=reason):
        verify_query(text, cohorts, QUERY_CLASS)


def test_a_field_selected_twice_is_refused() -> None:
    with pytest.raises(QueryRefused, match="twice"):
        parse_query("select age, age from KeyboardNGrams")


def test_fresh_devices_pass_every_check() -> None:
    assert (decide(ledger_empty(3)) == Decision.ANSWERED).all()


def test_check_1_refuses_when_the_analysis_epsilon_would_be_exceeded() -> None:
    ledger = ledger_empty(2)
    ledger["epsilon_used"][0] = to_units(0.3)  # 0.3 + 0.3 > 0.5
    assert decide(ledger).tolist() == [Decision.ANALYSIS_BUDGET, Decision.ANSWERED]


def test_check_1_refuses_when_the_analysis_reports_are_used_up() -> None:
    ledger = ledger_empty(2)
    ledger["reports_used"][1] = 2
    assert decide(ledger, request(epsilon=0.1, min_cohort=10**9)).tolist() == [
        Decision.ANSWERED,
        Decision.ANALYSIS_BUDGET,
    ]


def test_check_1_refuses_a_delta_above_the_analysis_delta() -> None:
    assert (decide(ledger_empty(1), request(delta=1e-5)) == Decision.ANALYSIS_BUDGET).all()


def test_check_2_refuses_an_epsilon0_above_the_field_local_cap() -> None:
    assert (decide(ledger_empty(1), request(epsilon0=2.5)) == Decision.FIELD_BUDGET).all()


def test_check_2_refuses_when_the_field_epsilon_would_be_exceeded() -> None:
    assert (decide(ledger_empty(1), request(epsilon=0.31)) == Decision.FIELD_BUDGET).all()


def test_check_2_refuses_when_the_field_reports_are_used_up() -> None:
    ledger = ledger_empty(2)
    Accountant(BasicComposition()).charge(ledger, request(epsilon=0.1, min_cohort=10**9), np.array([True, False]))
    assert decide(ledger, request(epsilon=0.1, min_cohort=10**9)).tolist() == [Decision.FIELD_BUDGET, Decision.ANSWERED]


def test_check_2_refuses_a_field_without_a_policy() -> None:
    assert (decide(ledger_empty(1), request(fields=("ngrams",))) == Decision.FIELD_BUDGET).all()


def test_check_3_refuses_a_minimum_cohort_below_what_the_device_computes() -> None:
    # Asymmetric OHE at epsilon0 = 2, epsilon = 0.3, delta = 1e-6: 1,670 reports by FMT 2022, the
    # tightest bound proven for it (privacy.enforced_cohort); Theorem 3.1's closed form needs 19,485.
    assert (decide(ledger_empty(1), request(min_cohort=1_669)) == Decision.MIN_COHORT).all()
    assert (decide(ledger_empty(1), request(min_cohort=1_670)) == Decision.ANSWERED).all()


def test_check_3_refuses_a_randomizer_it_knows_no_bound_for() -> None:
    assert (decide(ledger_empty(1), request(mechanism="homemade")) == Decision.MIN_COHORT).all()


def test_exact_allowance_is_spendable_without_float_drift() -> None:
    # 0.1 + 0.2 > 0.3 in floats; in nano-epsilon units it is exactly 0.3.
    policy = {
        "budget": {"epsilon": 0.3, "reports": 3, "delta": 1e-6},
        "fields": {"age": {"localEpsilon": 2.0, "epsilon": 0.3, "reports": 3}},
    }
    ledger = ledger_empty(1)
    accountant = Accountant(BasicComposition())
    accountant.charge(ledger, request(epsilon=0.1), np.array([True]))
    assert (decide(ledger, request(epsilon=0.2, min_cohort=10**9), policy) == Decision.ANSWERED).all()


def test_charge_spends_only_for_answering_devices_on_analysis_and_field() -> None:
    ledger = ledger_empty(3)
    Accountant(BasicComposition()).charge(ledger, request(), np.array([True, False, True]))
    assert ledger["epsilon_used"].tolist() == [to_units(0.3), 0, to_units(0.3)]
    assert ledger["reports_used"].tolist() == [1, 0, 1]
    assert ledger["field:age:reports_used"].tolist() == [1, 0, 1]


def test_the_device_charges_a_deletion_model_mechanism_at_twice_its_epsilon0() -> None:
    from pfs_device.decision import DeviceTask, budget_request
    from privacy.parameters import PrivacyParameters

    task = DeviceTask(
        task_key="k",
        analysis="a",
        snapshot_digest="d",
        query="select age from KeyboardNGrams",
        cohorts=(),
        encoded_field="age",
        data_types={"age": {"dataType": "BucketedType", "boundaries": [20.0]}},
        privacy=PrivacyParameters(
            noise="client",
            mechanism="symmetric_rappor",
            epsilon0=1.5,
            epsilon=1.0,
            delta=1e-6,
            sampling_rate=1.0,
            min_cohort=2935,
        ),
        seed=1,
    )
    assert budget_request(task).epsilon0 == 3.0


def count_answered(composition, epsilon: float, allowed: float = 1.0, delta: float = 1e-6, tries: int = 200) -> int:
    """How many epsilon-queries one device answers before its analysis budget refuses."""
    policy = {"budget": {"epsilon": allowed, "reports": 10_000, "delta": delta}, "fields": {}}
    accountant = Accountant(composition)
    ledger = ledger_empty(1)
    req = BudgetRequest(
        epsilon0=1.0,
        epsilon=epsilon,
        delta=delta,
        fields=(),
        min_cohort=10**12,
        mechanism="kary_rr",
        mechanism_epsilon0=1.0,
    )
    for answered in range(tries):
        if accountant.check(ledger, policy, req)[0] != Decision.ANSWERED:
            return answered
        accountant.charge(ledger, req, np.array([True]))
    return tries


def test_basic_composition_answers_exactly_allowed_over_epsilon_queries() -> None:
    assert count_answered(BasicComposition(), 0.02) == 50


def test_advanced_composition_answers_more_small_queries_but_never_beyond_its_bound() -> None:
    import math

    from privacy.composition import ApproximateDP, advanced_composition, advanced_composition_epsilon

    k = count_answered(AdvancedComposition(), 0.02)
    # The k-th query fit and the (k+1)-th did not, by the advanced bound with delta' = 1e-6.
    assert advanced_composition(ApproximateDP(0.02, 0.0), k, 1e-6).epsilon <= 1.0
    assert advanced_composition(ApproximateDP(0.02, 0.0), k + 1, 1e-6).epsilon > 1.0
    assert k > 50
    # The running sums the ledger keeps give the same number as the closed form for equal steps.
    assert advanced_composition_epsilon(k * 0.02**2, k * 0.02 * math.expm1(0.02), 1e-6) == pytest.approx(
        advanced_composition(ApproximateDP(0.02, 0.0), k, 1e-6).epsilon, rel=1e-12
    )


def test_advanced_composition_falls_back_to_basic_when_basic_is_smaller() -> None:
    # Two queries of 0.5 fit basic composition exactly; the advanced bound alone would refuse the second.
    assert count_answered(AdvancedComposition(), 0.5) == count_answered(BasicComposition(), 0.5) == 2


def test_the_policy_names_the_accountant_and_an_unknown_one_is_refused() -> None:
    assert isinstance(Accountant.for_policy({"budget": {"accountant": "advanced"}}).composition, AdvancedComposition)
    # A snapshot naming no accountant predates them: it composes basically. New analyses name "tightest".
    assert type(Accountant.for_policy({"budget": {}}).composition) is BasicComposition
    assert isinstance(Accountant.for_policy({"budget": {"accountant": "tightest"}}).composition, TightestComposition)
    with pytest.raises(KeyError):
        Accountant.for_policy({"budget": {"accountant": "renyi-but-misspelt"}})


def test_aggregator_noise_is_refused_unless_the_field_policy_allows_it() -> None:
    plain = request(epsilon0=float("inf"), aggregator_noise=True, min_cohort=1)
    assert (decide(ledger_empty(1), plain) == Decision.FIELD_BUDGET).all()
    allowing = {**POLICY, "fields": {"age": {**POLICY["fields"]["age"], "aggregatorNoise": True}}}
    # Allowed, it still spends the field's epsilon; check 3 has no amplification to ask for.
    assert (decide(ledger_empty(1), plain, allowing) == Decision.ANSWERED).all()
    assert (decide(ledger_empty(1), replace(plain, epsilon=0.31), allowing) == Decision.FIELD_BUDGET).all()


def test_an_infinite_epsilon0_without_aggregator_noise_fails_every_cap() -> None:
    allowing = {**POLICY, "fields": {"age": {**POLICY["fields"]["age"], "aggregatorNoise": True}}}
    assert (decide(ledger_empty(1), request(epsilon0=float("inf")), allowing) == Decision.FIELD_BUDGET).all()


def count_answered_requests(
    composition, req: BudgetRequest, allowed: float = 1.0, tries: int = 400, analysis_delta: float | None = None
) -> int:
    policy = {"budget": {"epsilon": allowed, "reports": 10_000, "delta": analysis_delta or req.delta}, "fields": {}}
    accountant, ledger = Accountant(composition), ledger_empty(1)
    for answered in range(tries):
        if accountant.check(ledger, policy, req)[0] != Decision.ANSWERED:
            return answered
        accountant.charge(ledger, req, np.array([True]))
    return tries


def test_renyi_composition_of_aggregator_noise_queries_stops_exactly_at_its_bound() -> None:
    from privacy.aggregator_noise import HISTOGRAM_L2_SENSITIVITY, AggregatorGaussian
    from privacy.composition import gaussian_rdp, rdp_compose, rdp_epsilon

    req = BudgetRequest(
        epsilon0=float("inf"), epsilon=0.1, delta=1e-6, fields=(), min_cohort=1000, aggregator_noise=True
    )
    k = count_answered_requests(RenyiComposition(), req)
    curve = gaussian_rdp(AggregatorGaussian(0.1, 1e-6).sigma, HISTOGRAM_L2_SENSITIVITY, RENYI_ORDERS)
    # The k-th query fit and the (k+1)-th did not, by RDP composition converted at delta = 1e-6.
    assert rdp_epsilon(rdp_compose([curve] * k), 1e-6) <= 1.0 < rdp_epsilon(rdp_compose([curve] * (k + 1)), 1e-6)
    assert k > count_answered_requests(BasicComposition(), req) == 10


def test_a_discrete_laplace_query_is_charged_as_pure_epsilon_dp() -> None:
    from privacy.composition import pure_dp_rdp, rdp_compose, rdp_epsilon

    req = BudgetRequest(
        epsilon0=float("inf"), epsilon=0.01, delta=0.0, fields=(), min_cohort=1000, aggregator_noise=True
    )
    # Its Renyi curve is that of any epsilon-DP release, min(epsilon, alpha epsilon^2 / 2).
    curve = pure_dp_rdp(0.01, RENYI_ORDERS)
    assert query_rdp(req) == curve.rhos
    assert count_answered_requests(BasicComposition(), req, analysis_delta=1e-6) == 100  # the epsilons add up
    k = count_answered_requests(RenyiComposition(), req, tries=2000, analysis_delta=1e-6)
    # Many small queries: the Renyi account admits more, exactly up to its bound at the analysis delta.
    assert k > 100
    assert rdp_epsilon(rdp_compose([curve] * k), 1e-6) <= 1.0 < rdp_epsilon(rdp_compose([curve] * (k + 1)), 1e-6)
    # The tightest accountant answers at least as many (its PLD account admits more: test_budget_pld.py).
    assert count_answered_requests(TightestComposition(), req, tries=k, analysis_delta=1e-6) == k


def test_renyi_composition_charges_symmetric_rappor_by_its_shuffled_rdp_curve() -> None:
    from privacy.rappor_rdp import symmetric_rappor_rdp

    # 514,700 reports is the closed form's minimum cohort for epsilon0 4 (replacement), 0.2, 1e-6.
    req = BudgetRequest(
        epsilon0=4.0, epsilon=0.2, delta=1e-6, fields=(), min_cohort=514_700,
        mechanism="symmetric_rappor", mechanism_epsilon0=2.0,
    )  # fmt: skip
    curve = query_rdp(req)
    assert curve[3] == symmetric_rappor_rdp(2.0, 514_700, RENYI_ORDERS[3])
    # Every point is below the pure bound of the replacement epsilon0 (4) it is capped by.
    assert all(rho <= 4.0 for rho in curve)
    # The RDP analysis of the shuffled reports is far tighter than Theorem 3.1's 0.2 per query.
    assert count_answered_requests(RenyiComposition(), req, tries=50) == 50
    assert count_answered_requests(BasicComposition(), req) == 5


def test_renyi_composition_falls_back_to_basic_for_randomizers_without_a_shuffled_curve() -> None:
    # asymmetric OHE is credited only its pure epsilon0 = 3 as RDP, far above 0.5: basic decides.
    req = BudgetRequest(epsilon0=3.0, epsilon=0.5, delta=1e-6, fields=(), min_cohort=10**6, mechanism="asymmetric_ohe")
    assert count_answered_requests(RenyiComposition(), req) == count_answered_requests(BasicComposition(), req) == 2


# ---------------------------------------------------------------- the tightest accountant (the default)


@pytest.fixture
def without_pld(monkeypatch):
    """The tightest accountant's three classical accounts alone: its fourth, the PLD account, only
    ever adds answers (a query fits when any account does) and is tested in test_budget_pld.py."""
    monkeypatch.setattr(
        budget, "_pld_bound", lambda ledger, *args, **kwargs: np.full(ledger["epsilon_used"].size, np.inf)
    )


def test_the_tightest_accountant_answers_what_the_best_of_the_three_answers(without_pld) -> None:
    # Small pure queries: advanced composition decides (more than basic's 50).
    assert count_answered(TightestComposition(), 0.02) == count_answered(AdvancedComposition(), 0.02) > 50
    # Large queries: basic decides (advanced alone would refuse the second 0.5).
    assert count_answered(TightestComposition(), 0.5) == count_answered(BasicComposition(), 0.5) == 2
    # Aggregator noise: Renyi composition of the Gaussian curves decides.
    noisy = BudgetRequest(
        epsilon0=float("inf"), epsilon=0.1, delta=1e-6, fields=(), min_cohort=1000, aggregator_noise=True
    )
    renyi = count_answered_requests(RenyiComposition(), noisy)
    assert count_answered_requests(TightestComposition(), noisy) == renyi
    assert renyi > count_answered_requests(AdvancedComposition(), noisy)


def _mixed_history(first_credit: bool, seed: int):
    """Random mixes of local (pure) and aggregator-noise queries, charged to a tightest ledger and,
    alongside, to full basic, advanced and Renyi ledgers over the same answered history. Yields
    (tightest answered, what each full accountant says, the ledgers) per query."""
    rng = np.random.default_rng(seed)
    local = [
        BudgetRequest(epsilon0=1.0, epsilon=eps, delta=1e-6, fields=(), min_cohort=10**12, mechanism="kary_rr")
        for eps in (0.01, 0.05, 0.2)
    ]
    noisy = BudgetRequest(
        epsilon0=float("inf"), epsilon=0.1, delta=1e-6, fields=(), min_cohort=1000, aggregator_noise=True
    )
    kinds = [*local, noisy]
    policy = {"budget": {"epsilon": 1.0, "reports": 10_000, "delta": 1e-6}, "fields": {}}
    ledgers = {c: ledger_empty(1) for c in (BasicComposition, AdvancedComposition, RenyiComposition)}
    tight = ledger_empty(1)
    order = [noisy if first_credit else local[0], *(kinds[i] for i in rng.integers(0, len(kinds), size=120))]
    for req in order:
        fits = {c: Accountant(c()).check(ledgers[c], policy, req)[0] == Decision.ANSWERED for c in ledgers}
        answered = Accountant(TightestComposition()).check(tight, policy, req)[0] == Decision.ANSWERED
        yield answered, fits, tight, ledgers
        if answered:
            Accountant(TightestComposition()).charge(tight, req, np.array([True]))
            for c, ledger in ledgers.items():
                Accountant(c()).charge(ledger, req, np.array([True]))


@pytest.mark.parametrize("seed", range(4))
def test_the_tightest_accountant_answers_within_some_sound_bound_and_whenever_basic_or_advanced_does(
    seed, without_pld
) -> None:
    """Whatever came first: a query is answered only if one of the three accountants, kept in full over
    the same history, would answer it (soundness), and always when basic or advanced would."""
    for first_credit in (True, False):
        for answered, fits, _, _ in _mixed_history(first_credit, seed):
            assert answered <= any(fits.values())
            assert answered >= (fits[BasicComposition] or fits[AdvancedComposition])


@pytest.mark.parametrize("seed", range(4))
def test_opened_by_a_credit_query_the_tightest_accountant_is_exactly_the_best_of_the_three(seed, without_pld) -> None:
    for answered, fits, tight, ledgers in _mixed_history(True, seed):
        assert answered == any(fits.values())
    assert tight["epsilon_used"][0] == ledgers[BasicComposition]["epsilon_used"][0]
    assert tight["epsilon_squares"][0] == ledgers[AdvancedComposition]["epsilon_squares"][0]
    assert tight["rdp_3"][0] == ledgers[RenyiComposition]["rdp_3"][0]


def test_the_tightest_ledger_opens_no_renyi_account_for_local_randomizers_alone() -> None:
    """Twelve floats per device and scope are kept only once a query earns Renyi credit; a device
    that answered before then gets none (+infinity), one that did not starts at zero."""
    policy = {"budget": {"epsilon": 1.0, "reports": 10, "delta": 1e-6}, "fields": {}}
    accountant = Accountant(TightestComposition())
    ledger = ledger_empty(2)
    local = BudgetRequest(epsilon0=1.0, epsilon=0.05, delta=1e-6, fields=(), min_cohort=10**12, mechanism="kary_rr")
    accountant.charge(ledger, local, np.array([True, False]))
    assert not any(name.startswith("rdp_") for name in ledger)
    noisy = BudgetRequest(
        epsilon0=float("inf"), epsilon=0.1, delta=1e-6, fields=(), min_cohort=1000, aggregator_noise=True
    )
    assert (accountant.check(ledger, policy, noisy) == Decision.ANSWERED).all()
    accountant.charge(ledger, noisy, np.array([True, True]))
    assert ledger["rdp_0"][0] == float("inf") and ledger["rdp_0"][1] == query_rdp(noisy)[0]


def test_a_task_privacy_cannot_bound_gets_no_renyi_credit_and_no_crash() -> None:
    """A forged task with an epsilon0 whose exponential overflows: the Renyi curve is infinite, the
    basic account still decides (and check 2's local cap refuses it)."""
    forged = request(epsilon0=900.0, mechanism_epsilon0=900.0, epsilon=0.1)
    assert all(rho == float("inf") for rho in query_rdp(forged))
    assert (Accountant(TightestComposition()).check(ledger_empty(2), POLICY, forged) == Decision.FIELD_BUDGET).all()
