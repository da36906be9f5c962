"""The analyst's budget burn-down, audit, policy and release-comparison pages and their API twins."""

from __future__ import annotations

import copy
import csv
import io
import math

import pytest
from rest_framework.test import APIClient

from analyses.models import AdaptiveRun, FieldPolicy, Round
from analyses.presenters.releases import release_as_json
from analyses.services.policy import analysis_approve, analysis_create, analysis_spent
from analyses.services.rounds import round_cancel, round_create_and_start
from analyses.templatetags.figures import figure
from privacy.pld import composed_epsilon, shuffled
from tests.conftest import FLEET_SIZE, RECIPE, SPEC

pytestmark = pytest.mark.django_db

Z95 = 1.959964  # the 95% two-sided normal quantile

# Room for three rounds of the test fleet; age's local cap and aggregator noise are this policy's own.
BUDGET_SPEC = {
    **copy.deepcopy(SPEC),
    "identifier": "test.budget",
    "budget": {"epsilon": 4.0, "reports": 4, "delta": 1e-6},
    "fields": {"age": {"localEpsilon": 3.25, "epsilon": 4.0, "reports": 4, "aggregatorNoise": True}},
}
BOUNDARIES = [20, 30, 40, 50, 60, 70, 80]


@pytest.fixture
def budget_analysis(fleet, analyst, officer):
    return analysis_approve(analysis=analysis_create(spec=copy.deepcopy(BUDGET_SPEC), owner=analyst), officer=officer)


def recipe_for(identifier: str, epsilon: float, *, epsilon0: float = 3.0, boundaries=BOUNDARIES, cohorts=()) -> dict:
    recipe = copy.deepcopy(RECIPE)
    recipe.update(recipeIdentifier=identifier, AnalysisIdentifier="test.budget", cohorts=list(cohorts))
    recipe["dataTypeContent"]["age"]["boundaries"] = list(boundaries)
    recipe["privacy"].update(epsilon=epsilon, epsilon0=epsilon0)
    return recipe


def run(analysis, recipe: dict, user, capture) -> Round:
    """A round started and run to its release (tasks inline)."""
    with capture(execute=True):
        round_ = round_create_and_start(analysis=analysis, content=recipe, user=user, confirm_small_cohorts=True)
    round_.refresh_from_db()
    return round_


def start_and_cancel(analysis, recipe: dict, user) -> Round:
    """A round started (its tasks never sent: on_commit does not run here) and cancelled."""
    round_ = round_create_and_start(analysis=analysis, content=recipe, user=user, confirm_small_cohorts=True)
    return round_cancel(round_=round_, user=user)


@pytest.fixture
def three_rounds(budget_analysis, analyst, officer, django_capture_on_commit_callbacks):
    """Released A (ε 1), released B (ε 1.5), cancelled C (ε 1), all by alice: only the owner runs rounds."""
    a = run(budget_analysis, recipe_for("a", 1.0), analyst, django_capture_on_commit_callbacks)
    b = run(budget_analysis, recipe_for("b", 1.5), analyst, django_capture_on_commit_callbacks)
    c = start_and_cancel(budget_analysis, recipe_for("c", 1.0), analyst)
    assert (a.status, b.status, c.status) == (Round.Status.RELEASED, Round.Status.RELEASED, Round.Status.CANCELLED)
    return a, b, c


def fields_of_error(body: dict) -> dict:
    """A 400's messages per field, in DRF's plain shape or the {"detail", "code", "fields"} one."""
    return body.get("fields", body)


# ---------------------------------------------------------------- budget burn-down


def test_burndown_points_are_the_cumulative_recipe_epsilons_and_match_analysis_spent(
    api, budget_analysis, three_rounds
) -> None:
    a, b, c = three_rounds
    body = api.get("/api/analyses/test.budget/budget/").json()
    analysis_scope, age = body["scopes"]
    assert (analysis_scope["field"], age["field"]) == (None, "age")
    assert [p["round"] for p in analysis_scope["points"]] == [a.pk, b.pk, c.pk]
    assert [p["epsilon"] for p in analysis_scope["points"]] == [1.0, 2.5, 3.5]
    assert [p["reports"] for p in analysis_scope["points"]] == [1, 2, 3]
    assert age["points"] == analysis_scope["points"]  # every round read age
    spent = analysis_spent(budget_analysis)
    assert analysis_scope["epsilon_used"] == pytest.approx(spent["epsilon"]) == 3.5
    assert analysis_scope["reports_used"] == spent["reports"] == 3
    assert age["epsilon_used"] == pytest.approx(spent["fields"]["age"]["epsilon"])
    assert (analysis_scope["epsilon_allowed"], analysis_scope["epsilon_remaining"]) == (4.0, 0.5)
    assert (analysis_scope["reports_allowed"], analysis_scope["reports_remaining"]) == (4, 1)


def test_burndown_sums_in_nano_epsilon_so_small_epsilons_add_up_exactly(api, budget_analysis, analyst, officer) -> None:
    # Ten rounds of 0.1 (aggregator noise: no minimum cohort to meet) end at exactly 1.0, not 0.9999999999999999.
    budget_analysis.reports_allowed = 10
    budget_analysis.save(update_fields=["reports_allowed"])
    FieldPolicy.objects.filter(analysis=budget_analysis).update(reports=10)
    analysis_approve(analysis=budget_analysis, officer=officer)  # an edit counts once approved
    for i in range(10):
        content = recipe_for(f"small-{i}", 0.1)
        content["privacy"] = {"noise": "aggregator", "epsilon": 0.1, "delta": 1e-6, "samplingRate": 1.0}
        round_create_and_start(analysis=budget_analysis, content=content, user=analyst, confirm_small_cohorts=True)
    points = api.get("/api/analyses/test.budget/budget/").json()["scopes"][0]["points"]
    assert points[-1]["epsilon"] == 1.0 and points[2]["epsilon"] == 0.3


def test_the_allowance_steps_where_an_officer_approved_a_new_budget(
    api, client, analyst, officer, budget_analysis, django_capture_on_commit_callbacks
) -> None:
    # A round under the first approval (ε 4, 4 reports), then a second approval raising the budget.
    run(budget_analysis, recipe_for("a", 1.0), analyst, django_capture_on_commit_callbacks)
    budget_analysis.epsilon_allowed, budget_analysis.reports_allowed = 6.0, 5
    budget_analysis.save(update_fields=["epsilon_allowed", "reports_allowed"])
    FieldPolicy.objects.filter(analysis=budget_analysis).update(epsilon=5.0)
    analysis_approve(analysis=budget_analysis, officer=officer)
    body = api.get("/api/analyses/test.budget/budget/").json()
    analysis_scope, age = body["scopes"]
    steps = analysis_scope["allowed_steps"]
    assert [(s["epsilon"], s["reports"]) for s in steps] == [(4.0, 4), (6.0, 5)]
    first, second = (s["at"] for s in steps)
    assert body["allowance_from"] == first < analysis_scope["points"][0]["created_at"] < second
    # The field's budget changed only in epsilon; its reports stayed 4.
    assert [(s["epsilon"], s["reports"]) for s in age["allowed_steps"]] == [(4.0, 4), (5.0, 4)]
    # An approval that changes nothing draws no step.
    analysis_approve(analysis=budget_analysis, officer=officer)
    again = api.get("/api/analyses/test.budget/budget/").json()["scopes"][0]["allowed_steps"]
    assert [(s["epsilon"], s["reports"]) for s in again] == [(4.0, 4), (6.0, 5)]
    client.force_login(analyst)
    page = client.get("/analyses/test.budget/budget/").content.decode()
    caption = page.split('id="allowance-caption"')[1].split("</p>")[0]
    assert "step where a privacy officer approved a new budget" in caption
    assert "ε 4.0, 4 reports from" in caption and "ε 6.0, 5 reports from" in caption


def test_an_allowance_approved_again_after_another_steps_back_at_its_latest_approval(
    api, officer, budget_analysis
) -> None:
    # A (ε 4) → B (ε 6) → A again: A's snapshot is reused (content-addressed), its return still drawn.
    for epsilon in (6.0, 4.0):
        budget_analysis.epsilon_allowed = epsilon
        budget_analysis.save(update_fields=["epsilon_allowed"])
        analysis_approve(analysis=budget_analysis, officer=officer)
    steps = api.get("/api/analyses/test.budget/budget/").json()["scopes"][0]["allowed_steps"]
    assert [s["epsilon"] for s in steps] == [4.0, 6.0, 4.0]
    assert steps[0]["at"] < steps[1]["at"] < steps[2]["at"]


def test_every_return_to_an_earlier_allowance_is_drawn(api, officer, budget_analysis) -> None:
    # A (ε 4) → B (ε 6) → A → B: the snapshots are only A and B, the approvals are four.
    for epsilon in (6.0, 4.0, 6.0):
        budget_analysis.epsilon_allowed = epsilon
        budget_analysis.save(update_fields=["epsilon_allowed"])
        analysis_approve(analysis=budget_analysis, officer=officer)
    steps = api.get("/api/analyses/test.budget/budget/").json()["scopes"][0]["allowed_steps"]
    assert [s["epsilon"] for s in steps] == [4.0, 6.0, 4.0, 6.0]
    assert [s["at"] for s in steps] == sorted(s["at"] for s in steps)


def test_budget_page_shows_the_burndown_table_and_what_remains_without_js(
    client, analyst, budget_analysis, three_rounds
) -> None:
    client.force_login(analyst)
    page = client.get("/analyses/test.budget/budget/").content.decode()
    assert 'id="burndown-table"' in page and 'id="epsilon-chart"' in page and "js/budget.js" in page
    # The table holds the chart's numbers: after the third round, 3.5 of epsilon and 3 reports.
    assert page.count("3.5 (3)") == 2  # the analysis and its field age
    assert "4.0 (4)" in page  # the allowed line
    remaining = page.split('id="budget-remaining"')[1].split("</table>")[0]
    assert '<td class="num">0.5</td>' in remaining and '<td class="num">1</td>' in remaining


def test_what_was_spent_is_stated_as_one_guarantee_with_its_total_delta(
    api, client, analyst, budget_analysis, three_rounds
) -> None:
    # Issue 30: three rounds of delta 1e-6 each. Their epsilons (1, 1.5, 1) sum to 3.5 (basic: total
    # delta 3e-6); the tightest accountant's smallest account is the PLD composition of the three
    # rounds' clone pairs (asymmetric OHE at eps0 3 over each round's minimum cohort), whose delta is
    # delta' = the analysis delta alone. Recomputed here from privacy.pld.
    rounds = [a for a in three_rounds]
    pairs = [(shuffled(3.0, r.recipe.privacy.min_cohort, "stronger-2022"), 1) for r in rounds]
    exact = composed_epsilon(pairs, 1e-6)
    assert exact < 3.5
    body = api.get("/api/analyses/test.budget/budget/").json()
    for scope in body["scopes"]:
        assert scope["guarantee"]["account"] == "pld"
        assert scope["guarantee"]["epsilon"] == pytest.approx(exact, rel=1e-9)
        assert scope["guarantee"]["delta"] == pytest.approx(1e-6, rel=1e-9)
    assert "total delta" in body["counting"]
    client.force_login(analyst)
    page = client.get("/analyses/test.budget/budget/").content.decode()
    remaining = page.split('id="budget-remaining"')[1].split("</table>")[0]
    shown = f"ε = {figure(body['scopes'][0]['guarantee']['epsilon'])}, δ = 0.000001"
    assert remaining.count(shown) == 2  # the analysis and its field age
    detail = client.get("/analyses/test.budget/").content.decode()
    assert "Analysis (δ of each round ≤ 0.000001)" in detail
    stated = detail.split('id="analysis-guarantee"')[1].split("</p>")[0]
    assert shown in stated and "pld composition" in stated and "δ is the total" in stated
    # The officer sees the most the policy lets the total delta reach: 4 reports of 1e-6, plus delta'.
    policy = client.get("/analyses/test.budget/policy/").content.decode()
    assert 'id="policy-delta-total">0.000005<' in policy
    assert api.get("/api/analyses/test.budget/policy/").json()["delta_total_max"] == pytest.approx(5e-6)


def test_budget_page_of_an_analysis_without_rounds_says_nothing_was_spent(client, analyst, budget_analysis) -> None:
    client.force_login(analyst)
    page = client.get("/analyses/test.budget/budget/").content.decode()
    assert "No rounds started yet" in page and "js/budget.js" not in page


# ---------------------------------------------------------------- audit


def test_audit_lists_who_started_each_round_with_its_parameters_including_a_cancelled_one(
    api, budget_analysis, three_rounds
) -> None:
    a, b, c = three_rounds
    body = api.get("/api/analyses/test.budget/audit/").json()
    assert body["count"] == 3
    rows = {row["round"]: row for row in body["results"]}
    assert [row["round"] for row in body["results"]] == [c.pk, b.pk, a.pk]  # newest first
    assert rows[c.pk]["status"] == "cancelled" and rows[c.pk]["created_by"] == "alice"
    assert rows[c.pk]["reports_released"] is None and rows[c.pk]["error"] == "cancelled by alice"
    assert rows[b.pk]["created_by"] == "alice" and rows[b.pk]["reports_released"] == FLEET_SIZE
    assert {k: rows[b.pk][k] for k in ("recipe", "field", "noise", "mechanism", "epsilon0", "epsilon")} == {
        "recipe": "b",
        "field": "age",
        "noise": "client",
        "mechanism": "asymmetric_ohe",
        "epsilon0": 3.0,
        "epsilon": 1.5,
    }
    assert (rows[b.pk]["delta"], rows[b.pk]["sampling_rate"], rows[b.pk]["min_cohort"]) == (1e-6, 1.0, 420)


def test_audit_page_shows_the_cancelled_round_and_who_started_each(
    client, analyst, budget_analysis, three_rounds
) -> None:
    a, b, c = three_rounds
    client.force_login(analyst)
    page = client.get("/analyses/test.budget/audit/").content.decode()
    table = page.split('id="audit-table"')[1].split("</table>")[0]
    assert table.count("<tr>") == 4  # header + 3 rounds
    assert "Cancelled" in table and "cancelled by alice" in table
    assert "alice" in table and "<code>b</code>" in table
    assert f">{FLEET_SIZE}<" in table


def test_audit_is_paginated_fifty_rounds_a_page(api, client, analyst, budget_analysis, three_rounds) -> None:
    a = three_rounds[0]
    Round.objects.bulk_create(Round(recipe=a.recipe, seed=i, created_by=analyst) for i in range(48))
    first = api.get("/api/analyses/test.budget/audit/").json()
    assert first["count"] == 51 and len(first["results"]) == 50 and first["next"]
    last = api.get(first["next"]).json()
    assert [row["round"] for row in last["results"]] == [a.pk]  # the oldest
    client.force_login(analyst)
    page = client.get("/analyses/test.budget/audit/?page=2").content.decode()
    assert "Page 2 of 2" in page and page.split('id="audit-table"')[1].split("</table>")[0].count("<tr>") == 2


def test_audit_csv_has_every_round(client, analyst, budget_analysis, three_rounds) -> None:
    a, b, c = three_rounds
    client.force_login(analyst)
    response = client.get("/analyses/test.budget/audit.csv")
    assert response["Content-Type"] == "text/csv"
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert [(int(r["round"]), r["status"], r["created_by"]) for r in rows] == [
        (c.pk, "cancelled", "alice"),
        (b.pk, "released", "alice"),
        (a.pk, "released", "alice"),
    ]
    assert rows[1]["epsilon"] == "1.5" and rows[0]["reports_released"] == ""


def test_audit_names_the_adaptive_run_that_started_a_round(api, client, analyst, budget_analysis, three_rounds) -> None:
    a, b, c = three_rounds
    run = AdaptiveRun.objects.create(
        analysis=budget_analysis,
        kind=AdaptiveRun.Kind.BUCKET_REFINEMENT,
        spec={},
        plan=[],
        levels=[{"round": a.pk}],
        current_round=c,
        status=AdaptiveRun.Status.FAILED,
        created_by=analyst,
    )
    body = api.get("/api/analyses/test.budget/audit/").json()
    started_by = {row["round"]: row["adaptive_run"] for row in body["results"]}
    assert started_by[a.pk] == started_by[c.pk] == {"id": run.pk, "kind": "bucket_refinement"}
    assert started_by[b.pk] is None
    assert body["adaptive_runs"][0]["rounds"] == sorted([a.pk, c.pk])
    client.force_login(analyst)
    assert f'href="/adaptive/{run.pk}/">run {run.pk}</a>' in client.get("/analyses/test.budget/audit/").content.decode()


# ---------------------------------------------------------------- policy


def test_policy_shows_the_approved_field_caps_and_snapshot(api, client, analyst, budget_analysis) -> None:
    body = api.get("/api/analyses/test.budget/policy/").json()
    assert body["policy"]["fields"]["age"] == {
        "localEpsilon": 3.25,
        "epsilon": 4.0,
        "reports": 4,
        "aggregatorNoise": True,
    }
    assert body["approved_by"] == "olivia" and body["snapshot_digest"] == budget_analysis.snapshot.digest
    assert body["pending_changes"] is None
    client.force_login(analyst)
    page = client.get("/analyses/test.budget/policy/").content.decode()
    fields = page.split('id="policy-fields"')[1].split("</table>")[0]
    assert '<td class="num">3.25</td>' in fields and "allowed (devices may send it" in fields
    assert "No field policy" in fields  # ngrams, in the query class without a budget
    assert budget_analysis.snapshot.digest in page and "olivia" in page
    assert "only a privacy officer can change" in page and "/admin/" not in page


def test_policy_page_links_the_admin_for_privacy_officers_only(client, officer, budget_analysis) -> None:
    client.force_login(officer)
    page = client.get("/analyses/test.budget/policy/").content.decode()
    assert f'href="/admin/analyses/analysis/{budget_analysis.pk}/change/"' in page


def test_policy_shows_the_snapshot_devices_enforce_until_an_edit_is_approved(
    api, client, analyst, officer, budget_analysis
) -> None:
    FieldPolicy.objects.filter(analysis=budget_analysis, field="age").update(local_epsilon=1.5)
    body = api.get("/api/analyses/test.budget/policy/").json()
    assert body["policy"]["fields"]["age"]["localEpsilon"] == 3.25  # what devices still enforce
    assert body["pending_changes"]["fields"]["age"]["localEpsilon"] == 1.5
    client.force_login(analyst)
    assert "edited after approval" in client.get("/analyses/test.budget/policy/").content.decode()
    analysis_approve(analysis=budget_analysis, officer=officer)
    body = api.get("/api/analyses/test.budget/policy/").json()
    assert body["policy"]["fields"]["age"]["localEpsilon"] == 1.5 and body["pending_changes"] is None


# ---------------------------------------------------------------- compare


def test_compare_computes_each_difference_and_its_standard_error_from_the_two_releases(
    api, budget_analysis, three_rounds
) -> None:
    a, b, _ = three_rounds
    body = api.get(f"/api/compare/?a={a.pk}&b={b.pk}").json()
    assert (body["a"]["epsilon"], body["b"]["epsilon"]) == (1.0, 1.5)
    assert (body["a"]["epsilon0"], body["a"]["mechanism"], body["b"]["reports"]) == (3.0, "asymmetric_ohe", FLEET_SIZE)
    release_a, release_b = release_as_json(a.release), release_as_json(b.release)
    [cohort] = body["cohorts"]
    assert [row["label"] for row in cohort["buckets"]] == [x["label"] for x in release_a["buckets"]]
    for row, x, y in zip(cohort["buckets"], release_a["buckets"], release_b["buckets"], strict=True):
        assert row["a"]["estimate"] == x["estimate"] and row["b"]["ci95"] == y["ci95"]
        assert row["difference"] == pytest.approx(y["estimate"] - x["estimate"])
        se = math.sqrt(x["standard_error"] ** 2 + y["standard_error"] ** 2)
        assert row["standard_error"] == pytest.approx(se)
        assert row["significant"] == (abs(y["estimate"] - x["estimate"]) > Z95 * se)


def test_compare_page_shows_both_epsilons_a_chart_and_the_table_without_js(
    client, analyst, budget_analysis, three_rounds
) -> None:
    a, b, _ = three_rounds
    client.force_login(analyst)
    response = client.get(f"/compare/?a={a.pk}&b={b.pk}")
    assert response.status_code == 200
    page = response.content.decode()
    assert f"Release A: round #{a.pk} (ε = 1.0) · Release B: round #{b.pk} (ε = 1.5)" in page
    assert "asymmetric_ohe, ε₀ = 3" in page and 'id="compare-chart-0"' in page and "js/compare.js" in page
    table = page.split('id="compare-table-0"')[1].split("</table>")[0]
    assert table.count("<tr>") == 1 + len(BOUNDARIES) + 1 and "[20, 30)" in table and " ± " in table


def test_compare_aligns_buckets_by_label_and_shows_a_missing_one_as_a_dash(
    api, client, analyst, budget_analysis, django_capture_on_commit_callbacks
) -> None:
    a = run(budget_analysis, recipe_for("wide", 1.0), analyst, django_capture_on_commit_callbacks)
    b = run(
        budget_analysis, recipe_for("narrow", 1.0, boundaries=[20, 30, 90]), analyst, django_capture_on_commit_callbacks
    )
    [cohort] = api.get(f"/api/compare/?a={a.pk}&b={b.pk}").json()["cohorts"]
    rows = {row["label"]: row for row in cohort["buckets"]}
    assert list(rows)[:3] == ["OOV", "[20, 30)", "[30, 40)"] and list(rows)[-2:] == ["[30, 90)", "[90, ∞)"]
    assert rows["[20, 30)"]["difference"] is not None  # in both
    assert rows["[30, 40)"]["b"] is None and rows["[30, 40)"]["difference"] is None
    assert rows["[30, 90)"]["a"] is None and rows["[30, 90)"]["b"]["estimate"] is not None
    client.force_login(analyst)
    table = client.get(f"/compare/?a={a.pk}&b={b.pk}").content.decode().split('id="compare-table-0"')[1]
    row = table.split("[30, 40)")[1].split("</tr>")[0]
    assert row.count("—") == 4  # B, the difference, its error, significance
    # Both releases' first bucket is below 20 or missing: the page says so, the API keeps "OOV".
    assert '<th scope="row">below 20 or missing</th>' in table and ">OOV<" not in table


def test_compare_matches_cohorts_by_key(api, budget_analysis, analyst, django_capture_on_commit_callbacks) -> None:
    # A minimum cohort of 974 (raised by the recipes): en_US (half the fleet) is released, the other locales suppressed.
    split = {"epsilon0": 2.0, "cohorts": ["locale"]}
    recipes = [recipe_for(name, 1.0, **split) for name in ("by-locale-1", "by-locale-2")]
    for recipe in recipes:
        recipe["privacy"]["minCohort"] = 974
    a = run(budget_analysis, recipes[0], analyst, django_capture_on_commit_callbacks)
    b = run(budget_analysis, recipes[1], analyst, django_capture_on_commit_callbacks)
    whole = run(budget_analysis, recipe_for("whole", 1.0), analyst, django_capture_on_commit_callbacks)
    body = api.get(f"/api/compare/?a={a.pk}&b={b.pk}").json()
    batches_a = {x["cohort"]: x for x in release_as_json(a.release)["batches"]}
    batches_b = {x["cohort"]: x for x in release_as_json(b.release)["batches"]}
    assert [c["cohort"] for c in body["cohorts"]] == list(batches_a)
    released = [c for c in body["cohorts"] if not c["a"]["suppressed"]]
    suppressed = [c for c in body["cohorts"] if c["a"]["suppressed"]]
    assert released and suppressed
    for cohort in released:
        x, y = batches_a[cohort["cohort"]]["buckets"], batches_b[cohort["cohort"]]["buckets"]
        assert [row["difference"] for row in cohort["buckets"]] == pytest.approx(
            [q["estimate"] - p["estimate"] for p, q in zip(x, y, strict=True)]
        )
    for cohort in suppressed:
        assert cohort["a"]["reason"] and all(row["difference"] is None for row in cohort["buckets"])
    # A release split by locale against a whole one: the split one's total over its released cohorts
    # is derived and differenced; the locales have no counterpart. Suppressed locales are missing
    # from that total, so it undercounts and no difference is called significant.
    mixed = api.get(f"/api/compare/?a={a.pk}&b={whole.pk}").json()
    assert [c["cohort"] for c in mixed["cohorts"]] == ["", *batches_a]
    derived = mixed["cohorts"][0]["a"]["derived"]
    assert derived["from"] == [c["cohort"] for c in released] and derived["missing"] == [
        c["cohort"] for c in suppressed
    ]
    assert all(row["difference"] is not None and row["significant"] is None for row in mixed["cohorts"][0]["buckets"])
    assert all(row["difference"] is None for c in mixed["cohorts"][1:] for row in c["buckets"])
    assert any("different cohorts" in note for note in mixed["notes"])
    assert any("the derived total undercounts" in note for note in mixed["notes"])


def test_compare_refuses_a_round_not_released_with_a_clear_400(
    api, client, analyst, budget_analysis, three_rounds
) -> None:
    a, _, cancelled = three_rounds
    response = api.get(f"/api/compare/?a={a.pk}&b={cancelled.pk}")
    assert response.status_code == 400
    assert fields_of_error(response.json())["b"] == [
        f"Round {cancelled.pk} is cancelled, not released: only released rounds can be compared."
    ]
    client.force_login(analyst)
    page = client.get(f"/compare/?a={a.pk}&b={cancelled.pk}")
    assert page.status_code == 400
    assert f"Release B: Round {cancelled.pk} is cancelled, not released" in page.content.decode()


@pytest.mark.parametrize(
    ("query", "errors"),
    [
        ("", {"a": ["Required: the id of a released round."], "b": ["Required: the id of a released round."]}),
        ("?a=1&b=x", {"b": ["Must be a round id (a positive whole number)."]}),
        ("?a=-3&b=2", {"a": ["Must be a round id (a positive whole number)."]}),
        ("?a=7&b=7", {"b": ["Must be another round than a."]}),
    ],
)
def test_compare_api_answers_bad_or_missing_ids_with_400_by_parameter(api, query, errors) -> None:
    response = api.get(f"/api/compare/{query}")
    assert response.status_code == 400
    assert fields_of_error(response.json()) == errors


def test_compare_page_with_one_round_offers_the_choice_of_the_other(
    client, analyst, budget_analysis, three_rounds
) -> None:
    a, b, cancelled = three_rounds
    client.force_login(analyst)
    response = client.get(f"/compare/?a={a.pk}")
    assert response.status_code == 200
    chooser = response.content.decode().split('id="compare-a"')[1].split("</select>")[0]
    assert f'<option value="{a.pk}" selected>' in chooser and f'value="{b.pk}"' in chooser
    assert f'value="{cancelled.pk}"' not in chooser  # only released rounds can be chosen
    assert client.get("/compare/?a=x").status_code == 400


def test_detail_page_links_the_pages_and_offers_a_and_b_for_released_rounds_only(
    client, analyst, budget_analysis, three_rounds
) -> None:
    a, b, cancelled = three_rounds
    client.force_login(analyst)
    page = client.get("/analyses/test.budget/").content.decode()
    for url in ("budget/", "audit/", "policy/"):
        assert f'href="/analyses/test.budget/{url}"' in page
    form = page.split('id="compare-form"')[1].split("</form>")[0]
    assert f'name="a" value="{a.pk}"' in form and f'name="b" value="{b.pk}"' in form
    assert f'value="{cancelled.pk}"' not in form
    assert f'href="/compare/?a={a.pk}"' in client.get(f"/rounds/{a.pk}/").content.decode()


# ---------------------------------------------------------------- access


def test_another_analyst_gets_404_on_every_page_and_endpoint(
    other_analyst, client, budget_analysis, three_rounds
) -> None:
    a, b, _ = three_rounds
    client.force_login(other_analyst)
    api = APIClient()
    api.force_authenticate(other_analyst)
    for url in ("budget/", "audit/", "audit.csv", "policy/"):
        assert client.get(f"/analyses/test.budget/{url}").status_code == 404, url
    for url in ("budget/", "audit/", "policy/"):
        assert api.get(f"/api/analyses/test.budget/{url}").status_code == 404, url
    assert client.get(f"/compare/?a={a.pk}&b={b.pk}").status_code == 404
    assert api.get(f"/api/compare/?a={a.pk}&b={b.pk}").status_code == 404
    # Nothing of alice's is offered to choose from either.
    assert f'value="{a.pk}"' not in client.get("/compare/").content.decode()


def test_pages_need_sign_in_and_the_api_a_user(client, budget_analysis) -> None:
    for url in ("/analyses/test.budget/budget/", "/analyses/test.budget/audit/", "/compare/?a=1&b=2"):
        assert client.get(url).status_code == 302
    assert APIClient().get("/api/analyses/test.budget/budget/").status_code in (401, 403)


def test_compare_pressed_with_nothing_chosen_says_so_instead_of_reloading(
    client, analyst, budget_analysis, three_rounds
) -> None:
    a, _, _ = three_rounds
    client.force_login(analyst)
    # The analysis page's Compare button sends "compare" and the radios chosen: here none.
    response = client.get("/compare/?compare=1")
    assert response.status_code == 400
    page = response.content.decode()
    assert "Nothing to compare yet:" in page and "Release A: Not chosen" in page and "Release B: Not chosen" in page
    # One chosen: the other is named.
    page = client.get(f"/compare/?compare=1&a={a.pk}").content.decode()
    assert "Release B: Not chosen" in page and "Release A: Not chosen" not in page
    # A link to the page (no button pressed) offers the choice without an error.
    assert client.get("/compare/").status_code == 200


def test_comparing_with_a_release_that_released_nothing_says_that(
    budget_analysis, analyst, django_capture_on_commit_callbacks
) -> None:
    # A release with no count (no batch, or every batch suppressed: a round normally ends withheld
    # then, but a release read back may hold it) is not "split into different cohorts".
    from analyses.reads.analysis_reads import _compare_notes

    a = run(budget_analysis, recipe_for("whole", 1.0), analyst, django_capture_on_commit_callbacks)
    batches_a = {batch["cohort"]: batch for batch in release_as_json(a.release)["batches"]}
    for empty in ({}, {"de_DE": {"cohort": "de_DE", "suppressed": True}}):
        notes = _compare_notes(a, a, {"a": batches_a, "b": empty})
        assert any(note.startswith("Release B released no count") for note in notes), notes
        assert not any("different cohorts" in note for note in notes)
    notes = _compare_notes(a, a, {"a": {}, "b": {}})
    assert any(note.startswith("Release A and Release B released no count") for note in notes)
