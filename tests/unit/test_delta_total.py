"""The officer's cap on the total delta (issue 30, requirement 1): budget.deltaTotal.

Devices enforce it in check 1 beside epsilon: a query fits only if the largest total delta any of
their accounts could state afterwards (the queries' deltas, plus delta' where the accountant is not
basic) stays within the cap. The server's pre-check runs the same accountant, so a round that would
pass the cap is refused before anything is written or spent.
"""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest

from analyses.models import Analysis, Recipe, Round
from analyses.reads.analysis_reads import delta_total_max
from analyses.services.policy import analysis_approve, analysis_create
from pfs_base.errors import ValidationFailed
from pfs_device.budget import (
    Accountant,
    BasicComposition,
    BudgetRequest,
    Decision,
    TightestComposition,
    ledger_empty,
)
from tests.conftest import RECIPE, SPEC

DELTA = 1e-6


def policy(cap: float | None, accountant: str = "basic") -> dict:
    budget = {"epsilon": 100.0, "reports": 50, "delta": DELTA, "accountant": accountant}
    if cap is not None:
        budget["deltaTotal"] = cap
    return {"budget": budget, "fields": {"age": {"localEpsilon": 4.0, "epsilon": 100.0, "reports": 50}}}


def request(delta: float = DELTA) -> BudgetRequest:
    return BudgetRequest(
        epsilon0=2.0, epsilon=0.5, delta=delta, fields=("age",), min_cohort=20_000,
        mechanism="asymmetric_ohe", mechanism_epsilon0=2.0,
    )  # fmt: skip


def answered_in_a_row(accountant: Accountant, spec: dict, query: BudgetRequest, ledger=None) -> tuple[int, int]:
    """How many queries in a row one device answers, and the decision that stops it."""
    ledger = ledger_empty(1) if ledger is None else ledger
    for count in range(100):
        decision = accountant.check(ledger, spec, query)[0]
        if decision != Decision.ANSWERED:
            return count, int(decision)
        accountant.charge(ledger, query, np.ones(1, dtype=bool))
    return 100, int(Decision.ANSWERED)


def test_basic_composition_answers_until_the_sum_of_deltas_would_pass_the_cap() -> None:
    # Decimal deltas add up exactly: five queries of 1e-6 fit a cap of 5e-6, the sixth does not.
    count, stopped_by = answered_in_a_row(Accountant(BasicComposition()), policy(5e-6), request())
    assert (count, stopped_by) == (5, Decision.ANALYSIS_BUDGET)


def test_an_accountant_that_may_state_delta_prime_counts_it_once() -> None:
    # Tightest may state (eps, sum delta_i + delta'): four queries of 1e-6 plus delta' = 1e-6 fit 5e-6.
    count, stopped_by = answered_in_a_row(Accountant(TightestComposition()), policy(5e-6, "tightest"), request())
    assert (count, stopped_by) == (4, Decision.ANALYSIS_BUDGET)


def test_without_a_cap_only_the_reports_bound_the_total() -> None:
    count, stopped_by = answered_in_a_row(Accountant(TightestComposition()), policy(None, "tightest"), request())
    assert count == 50


def test_smaller_deltas_buy_more_queries_under_the_same_cap() -> None:
    count, _ = answered_in_a_row(Accountant(BasicComposition()), policy(5e-6), request(delta=1e-7))
    assert count == 50  # 50 x 1e-7 = 5e-6: the report count stops it first, exactly at the cap


def test_a_refusal_spends_nothing_and_the_device_keeps_the_exact_sum() -> None:
    accountant, spec = Accountant(BasicComposition()), policy(2e-6)
    ledger = ledger_empty(3)
    accountant.charge(ledger, request(), np.array([True, True, False]))
    accountant.charge(ledger, request(), np.array([True, False, False]))
    before = {name: column.copy() for name, column in ledger.items()}
    decisions = accountant.check(ledger, spec, request())
    assert decisions.tolist() == [Decision.ANALYSIS_BUDGET, Decision.ANSWERED, Decision.ANSWERED]
    assert all(np.array_equal(before[name], ledger[name]) for name in ledger)  # check only reads
    assert ledger["delta_used"].tolist() == [2 * 10**12, 10**12, 0]  # atto-units: 1e-6 is 10^12


def test_a_ledger_from_before_the_sum_was_kept_fails_closed_under_a_cap() -> None:
    accountant = Accountant(BasicComposition())
    ledger = ledger_empty(2)
    ledger["reports_used"][0] = 1  # answered once, sum unknown
    ledger["epsilon_used"][0] = 500_000_000
    assert accountant.check(ledger, policy(1e-3), request()).tolist() == [Decision.ANALYSIS_BUDGET, Decision.ANSWERED]
    assert accountant.check(ledger, policy(None), request()).tolist() == [Decision.ANSWERED, Decision.ANSWERED]


def test_the_most_the_total_can_reach_is_capped_on_the_policy_page_figure() -> None:
    budget = {"delta": DELTA, "reports": 50, "accountant": "tightest"}
    assert delta_total_max(budget) == pytest.approx(51e-6)
    assert delta_total_max({**budget, "deltaTotal": 5e-6}) == 5e-6


# ---------------------------------------------------------------- the policy and the server


def spec_with(cap, accountant: str = "tightest") -> dict:
    spec = copy.deepcopy(SPEC)
    spec["identifier"] = "test.delta"
    spec["budget"] = {"epsilon": 10.0, "reports": 10, "delta": DELTA, "accountant": accountant, "deltaTotal": cap}
    spec["fields"]["age"].update(epsilon=10.0, reports=10)
    return spec


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("cap", "accountant", "message"),
    [
        (0.0, "tightest", "Must lie strictly between 0 and 1."),
        (1.5, "basic", "Must lie strictly between 0 and 1."),
        ("5e-6", "basic", "Must be a finite number."),
        (math.nan, "basic", "Must be a finite number."),
        (1.5e-6, "tightest", "At least 2e-06"),  # one query's delta plus delta'
        (0.5e-6, "basic", "At least 1e-06"),
    ],
)
def test_a_cap_no_query_could_fit_or_a_bad_number_is_refused_and_nothing_is_created(
    fleet, analyst, cap, accountant, message
) -> None:
    with pytest.raises(ValidationFailed) as refused:
        analysis_create(spec=spec_with(cap, accountant), owner=analyst)
    assert any(message in m for m in refused.value.errors["budget.deltaTotal"])
    assert not Analysis.objects.filter(identifier="test.delta").exists()


@pytest.mark.django_db
def test_the_cap_reaches_the_snapshot_devices_enforce_and_the_policy_api(api, fleet, analyst, officer) -> None:
    analysis = analysis_approve(analysis=analysis_create(spec=spec_with(3e-6), owner=analyst), officer=officer)
    assert analysis.snapshot.content["budget"]["deltaTotal"] == 3e-6
    body = api.get("/api/analyses/test.delta/policy/").json()
    assert body["policy"]["budget"]["deltaTotal"] == 3e-6
    assert body["delta_total_max"] == 3e-6


@pytest.mark.django_db
def test_a_round_that_would_pass_the_cap_is_refused_with_why_and_writes_nothing(
    api, fleet, analyst, officer, django_capture_on_commit_callbacks
) -> None:
    # Tightest with delta' = 1e-6 and a cap of 3e-6: two rounds of delta 1e-6 fit (2e-6 + 1e-6), a third does not.
    analysis_approve(analysis=analysis_create(spec=spec_with(3e-6), owner=analyst), officer=officer)
    recipe = copy.deepcopy(RECIPE)
    recipe["AnalysisIdentifier"] = "test.delta"
    for n in range(2):
        recipe["recipeIdentifier"] = f"ages-{n}"
        created = api.post("/api/analyses/test.delta/recipes/", recipe, format="json")
        assert created.status_code == 201, created.json()
        started = api.post(f"/api/recipes/{created.json()['id']}/rounds/", {"confirmSmallCohorts": True}, format="json")
        assert started.status_code == 202, started.json()
    rounds, recipes = Round.objects.count(), Recipe.objects.count()
    recipe["recipeIdentifier"] = "ages-2"
    refused = api.post("/api/analyses/test.delta/recipes/validate/", recipe, format="json")
    assert refused.status_code == 400
    messages = " ".join(refused.json().get("fields", refused.json())["privacy.delta"])
    assert "Exceeds the analysis's total δ of 3e-06" in messages and "spent 2e-06" in messages
    created = api.post("/api/analyses/test.delta/recipes/", recipe, format="json")
    if created.status_code == 201:  # a recipe may be saved; its round must not start
        started = api.post(f"/api/recipes/{created.json()['id']}/rounds/", {"confirmSmallCohorts": True}, format="json")
        assert started.status_code == 400
        recipes += 1
    else:
        assert created.status_code == 400
    assert (Round.objects.count(), Recipe.objects.count()) == (rounds, recipes)


@pytest.mark.django_db
def test_each_release_states_the_analysis_spend_once_its_round_started_and_keeps_it(
    api, client, fleet, analyst, officer, django_capture_on_commit_callbacks
) -> None:
    analysis_approve(analysis=analysis_create(spec=spec_with(None, "basic"), owner=analyst), officer=officer)
    recipe = copy.deepcopy(RECIPE)
    recipe["AnalysisIdentifier"] = "test.delta"
    released = []
    for n, delta in enumerate((1e-6, 1e-7)):
        recipe["recipeIdentifier"] = f"ages-{n}"
        recipe["privacy"]["delta"] = delta
        created = api.post("/api/analyses/test.delta/recipes/", recipe, format="json").json()
        with django_capture_on_commit_callbacks(execute=True):
            started = api.post(f"/api/recipes/{created['id']}/rounds/", {"confirmSmallCohorts": True}, format="json")
        released.append(started.json()["id"])
    first, second = (api.get(f"/api/rounds/{pk}/release/").json()["analysis_spent"] for pk in released)
    # Basic composition: (sum eps_i, sum delta_i), rounded up by a relative 1e-12 (never below).
    assert first == {"epsilon": pytest.approx(1.0), "delta": pytest.approx(1e-6), "account": "basic",
                     "accountant": "basic", "rounds": 1}  # fmt: skip
    assert (second["epsilon"], second["delta"], second["rounds"]) == (pytest.approx(2.0), pytest.approx(1.1e-6), 2)
    assert first["epsilon"] >= 1.0 and second["delta"] >= 1.1e-6
    client.force_login(analyst)
    page = client.get(f"/rounds/{released[1]}/").content.decode()
    assert 'id="release-analysis-spent">(ε, δ) = (2, 0.0000011) over 2 rounds, by the basic account' in page


# ---------------------------------------------------------------- a field's own cap (check 2)


def test_a_field_s_cap_refuses_in_check_2_while_the_analysis_has_room() -> None:
    spec = policy(None)
    spec["fields"]["age"]["deltaTotal"] = 3e-6
    count, stopped_by = answered_in_a_row(Accountant(BasicComposition()), spec, request())
    assert (count, stopped_by) == (3, Decision.FIELD_BUDGET)
    # The field's sum is its own: a query reading another field does not count against age's cap.
    other = BudgetRequest(**{**request().__dict__, "fields": ("locale",)})
    spec["fields"]["locale"] = {"localEpsilon": 4.0, "epsilon": 100.0, "reports": 50}
    accountant, ledger = Accountant(BasicComposition()), ledger_empty(1)
    for _ in range(5):
        accountant.charge(ledger, other, np.ones(1, dtype=bool))
    assert accountant.check(ledger, spec, request())[0] == Decision.ANSWERED
    assert ledger["field:locale:delta_used"][0] == 5 * 10**12 and "field:age:delta_used" not in ledger


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("cap", "message"), [(1e-7, "At least 2e-06"), (2.0, "Must lie strictly between 0 and 1."), ("x", "finite")]
)
def test_a_field_cap_no_query_could_fit_is_refused_by_its_path(fleet, analyst, cap, message) -> None:
    spec = spec_with(None)
    spec["fields"]["age"]["deltaTotal"] = cap
    with pytest.raises(ValidationFailed) as refused:
        analysis_create(spec=spec, owner=analyst)
    assert any(message in m for m in refused.value.errors["fields.age.deltaTotal"])
    assert not Analysis.objects.filter(identifier="test.delta").exists()


@pytest.mark.django_db
def test_a_round_that_would_pass_a_field_s_cap_is_refused_naming_the_field(
    api, client, fleet, analyst, officer, django_capture_on_commit_callbacks
) -> None:
    spec = spec_with(None, "basic")
    spec["fields"]["age"]["deltaTotal"] = 1e-6
    analysis = analysis_approve(analysis=analysis_create(spec=spec, owner=analyst), officer=officer)
    assert analysis.snapshot.content["fields"]["age"]["deltaTotal"] == 1e-6
    recipe = copy.deepcopy(RECIPE)
    recipe["AnalysisIdentifier"] = "test.delta"
    created = api.post("/api/analyses/test.delta/recipes/", recipe, format="json")
    started = api.post(f"/api/recipes/{created.json()['id']}/rounds/", {"confirmSmallCohorts": True}, format="json")
    assert started.status_code == 202
    recipe["recipeIdentifier"] = "ages-again"
    refused = api.post("/api/analyses/test.delta/recipes/validate/", recipe, format="json")
    assert refused.status_code == 400
    messages = " ".join(refused.json().get("fields", refused.json())["privacy.delta"])
    assert "Exceeds field age's total δ of 1e-06: the rounds started have spent 1e-06 on it" in messages
    client.force_login(analyst)
    page = client.get("/analyses/test.delta/policy/").content.decode()
    assert '<td class="num">0.000001</td>' in page.split('id="policy-fields"')[1].split("</table>")[0]
