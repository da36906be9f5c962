"""The recipe editor: validation as you type, the curve of aggregate epsilon, and the form's JSON side."""

from __future__ import annotations

import copy
import html
import json
import math
import re

import pytest
from rest_framework.test import APIClient

from analyses.forms.recipe_editor import RecipeForm
from analyses.models import FieldPolicy, Recipe, Round
from analyses.rules.enforced_policy import AGGREGATOR_NOISE_MIN_COHORT
from analyses.services.policy import analysis_approve, analysis_spent
from analyses.services.recipes import recipe_create
from analyses.services.rounds import round_start
from devices.models import ShardLedger, ShardRun
from privacy.aggregator_noise import AggregatorGaussian
from privacy.shuffling import amplified_epsilon
from tests.conftest import FLEET_SIZE
from tests.unit.test_dashboard import FORM

pytestmark = pytest.mark.django_db

VALIDATE = "/api/analyses/test.ages/recipes/validate/"
CURVE = "/api/privacy/curve/"


def fields(body: dict) -> dict:
    """Messages by field, in the API's error format or the older bare one."""
    return body.get("fields", body)


def textarea(page: str, name: str) -> str:
    match = re.search(rf'<textarea name="{name}"[^>]*>(.*?)</textarea>', page, re.DOTALL)
    assert match, f"no textarea {name}"
    return html.unescape(match.group(1))


def nothing_changed(analysis, spent_before: dict) -> bool:
    return (
        not Recipe.objects.exists()
        and not Round.objects.exists()
        and not ShardRun.objects.exists()
        and not ShardLedger.objects.exists()
        and analysis_spent(analysis) == spent_before
    )


# ---------------------------------------------------------------- POST .../recipes/validate/


def test_validate_answers_the_recipe_figures_and_what_it_would_cost(api, analysis, recipe) -> None:
    spent_before = analysis_spent(analysis)
    response = api.post(VALIDATE, recipe, format="json")
    assert response.status_code == 200
    body = response.json()
    assert (body["field"], body["buckets"], body["min_cohort"]) == ("age", 8, 736)
    assert (body["devices"], body["devices_expected"]) == (FLEET_SIZE, FLEET_SIZE)
    assert body["budget"]["analysis"] == {
        "name": "test.ages",
        "epsilon": 1.0,
        "left": 2.0,
        "remaining": 1.0,
        "reports": 1,
        "reports_left": 2,
        "reports_remaining": 1,
    }
    assert [(f["name"], f["epsilon"], f["left"], f["remaining"]) for f in body["budget"]["fields"]] == [
        ("age", 1.0, 2.0, 1.0)
    ]
    assert body["budget"]["rounds_that_fit"] == 2
    assert body["summary"].startswith(
        "This round will spend ε = 1 of the 2 left for the analysis; field age: 1 of 2 left."
    )
    assert nothing_changed(analysis, spent_before)


def test_validate_counts_the_rounds_already_started(api, analysis, recipe, analyst) -> None:
    round_start(recipe=recipe_create(analysis=analysis, content=recipe, user=analyst), user=analyst)
    del recipe["recipeIdentifier"]  # the first recipe holds that name
    body = api.post(VALIDATE, recipe, format="json").json()
    assert body["summary"].startswith(
        "This round will spend ε = 1 of the 1 left for the analysis; field age: 1 of 1 left."
    )
    assert body["budget"]["analysis"]["remaining"] == 0
    assert body["budget"]["rounds_that_fit"] == 1  # two reports allowed, one used


def test_validate_gives_the_mechanisms_standard_error_for_the_fleet(api, analysis, recipe) -> None:
    recipe["privacy"]["samplingRate"] = 0.8
    body = api.post(VALIDATE, recipe, format="json").json()
    n = round(FLEET_SIZE * 0.8)
    # Asymmetric OHE (seed 000 Theorem A.2): Var = n 4e^eps0/(e^eps0 - 1)^2 + f(d), here eps0 = 3.
    e = math.exp(3.0)
    assert body["standard_error"]["devices"] == n
    assert body["standard_error"]["empty_bucket"] == pytest.approx(math.sqrt(n * 4 * e / (e - 1) ** 2), rel=1e-12)
    assert body["standard_error"]["full_bucket"] == pytest.approx(math.sqrt(n * 4 * e / (e - 1) ** 2 + n), rel=1e-12)


def test_validate_gives_the_aggregators_noise_as_the_standard_error(api, analysis, recipe, officer) -> None:
    FieldPolicy.objects.filter(analysis=analysis, field="age").update(aggregator_noise=True)
    analysis_approve(analysis=analysis, officer=officer)  # an edit counts once approved
    recipe["privacy"] = {"noise": "aggregator", "epsilon": 1.0, "delta": 1e-6}
    body = api.post(VALIDATE, recipe, format="json").json()
    error = AggregatorGaussian(1.0, 1e-6).standard_error()
    assert body["standard_error"]["empty_bucket"] == body["standard_error"]["full_bucket"] == pytest.approx(error)
    assert body["min_cohort"] == AGGREGATOR_NOISE_MIN_COHORT


def test_validate_gives_the_discrete_laplaces_exact_standard_error(api, analysis, recipe, officer) -> None:
    FieldPolicy.objects.filter(analysis=analysis, field="age").update(aggregator_noise=True)
    analysis_approve(analysis=analysis, officer=officer)
    recipe["privacy"] = {"noise": "aggregator", "noiseDistribution": "laplace", "epsilon": 1.0}
    body = api.post(VALIDATE, recipe, format="json").json()
    # Two aggregators' discrete Laplace noise of scale b = 2: 2 Var, Var = 2 e^(-1/2) / (1 - e^(-1/2))^2.
    error = math.sqrt(2 * 2 * math.exp(-0.5) / (1 - math.exp(-0.5)) ** 2)
    assert body["standard_error"]["empty_bucket"] == body["standard_error"]["full_bucket"] == pytest.approx(error)
    assert body["delta"] == 0


def test_validate_refuses_a_bad_recipe_by_key_and_changes_nothing(api, analysis, recipe) -> None:
    spent_before = analysis_spent(analysis)
    recipe["privacy"]["epsilon"] = 0
    recipe["dataTypeContent"]["age"]["boundaries"] = [30, 20]
    response = api.post(VALIDATE, recipe, format="json")
    assert response.status_code == 400
    messages = fields(response.json())
    assert messages["privacy.epsilon"] == ["Must be greater than 0."]
    assert "dataTypeContent.age.boundaries" in messages
    assert nothing_changed(analysis, spent_before)


def test_validate_refuses_a_recipe_over_the_budget_and_spends_nothing(api, analysis, recipe) -> None:
    spent_before = analysis_spent(analysis)
    recipe["privacy"]["epsilon"] = 2.5
    response = api.post(VALIDATE, recipe, format="json")
    assert response.status_code == 400
    assert "Exceeds the analysis budget: 2 of its epsilon 2 left" in " ".join(
        fields(response.json())["privacy.epsilon"]
    )
    assert nothing_changed(analysis, spent_before)


def test_validate_refuses_a_body_that_is_not_a_recipe(api, analysis) -> None:
    response = api.post(VALIDATE, [1, 2], format="json")
    assert response.status_code == 400
    assert fields(response.json()) == {"recipe": ["Must be a JSON object."]}


def test_validate_answers_404_for_another_analysts_analysis(analysis, other_analyst, recipe) -> None:
    client = APIClient()
    client.force_authenticate(other_analyst)
    assert client.post(VALIDATE, recipe, format="json").status_code == 404


def test_validate_refuses_anonymous_requests(analysis, recipe) -> None:
    assert APIClient().post(VALIDATE, recipe, format="json").status_code in (401, 403)


# ---------------------------------------------------------------- GET /api/privacy/curve/


@pytest.mark.parametrize("method", ["closed-form", "stronger-2022"])
def test_curve_gives_amplified_epsilon_at_log_spaced_cohorts(api, method) -> None:
    response = api.get(CURVE, {"epsilon0": "3", "delta": "1e-6", "method": method, "points": "7"})
    assert response.status_code == 200
    body = response.json()
    assert [p["n"] for p in body["points"]] == [10**k for k in range(2, 9)]
    for point in body["points"]:
        expected = amplified_epsilon(3.0, point["n"], 1e-6, method=method)
        assert point["epsilon"] == (None if math.isinf(expected) else expected)
    if method == "closed-form":  # Theorem 3.1 says nothing below its validity condition
        assert body["points"][0]["epsilon"] is None and body["points"][-1]["epsilon"] is not None


def test_curve_takes_its_range_and_defaults_to_figure_1s(api) -> None:
    body = api.get(CURVE, {"epsilon0": "6", "delta": "1e-6", "method": "closed-form"}).json()
    assert (body["n_min"], body["n_max"], len(body["points"])) == (100, 10**8, 25)
    body = api.get(CURVE, {"epsilon0": "6", "delta": "1e-6", "n_min": "10", "n_max": "1e3", "points": "3"}).json()
    assert [p["n"] for p in body["points"]] == [10, 100, 1000]


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("epsilon0", "0", "Must be greater than 0."),
        ("delta", "1", "Must lie strictly between 0 and 1."),
        ("method", "fastest", "Must be one of stronger-2022, clones-2020, closed-form."),
        ("points", "1", "Must be between 2 and 50."),
        ("points", "51", "Must be between 2 and 50."),
        ("points", "2.5", "A whole number is required."),
        ("n_min", "0", "Must be at least 1."),
        ("n_max", "10", "Must be greater than n_min."),
    ],
)
def test_curve_refuses_a_bad_parameter_naming_it(api, name, value, message) -> None:
    params = {"epsilon0": "3", "delta": "1e-6", "n_min": "100", "n_max": "1000", name: value}
    response = api.get(CURVE, params)
    assert response.status_code == 400
    assert fields(response.json()) == {name: [message]}


def test_curve_reports_every_bad_parameter_at_once(api) -> None:
    response = api.get(CURVE, {"epsilon0": "x", "points": "many"})
    assert response.status_code == 400
    assert set(fields(response.json())) == {"epsilon0", "delta", "points"}


# ---------------------------------------------------------------- the dashboard form's JSON side


def test_the_page_shows_the_forms_recipe_as_json_and_the_curve_as_a_table(client, analysis, analyst) -> None:
    client.force_login(analyst)
    page = client.get("/analyses/test.ages/").content.decode()
    shown = json.loads(textarea(page, "recipe_json"))
    assert shown["query"] == "select age from KeyboardNGrams"
    assert shown["dataTypeContent"]["age"]["boundaries"] == [20, 30, 40, 50, 60, 70, 80]
    assert shown["privacy"] == {
        "noise": "client",
        "mechanism": "asymmetric_ohe",
        "epsilon0": 2.0,
        "epsilon": 0.3,
        "delta": 1e-6,
        "samplingRate": 1.0,
    }
    # The table alternative of the curve, there without JavaScript: n = 10^2 ... 10^8.
    table = page[page.index('id="curve-table"') : page.index("</table>", page.index('id="curve-table"'))]
    assert table.count("<tr>") == 1 + 7 and "100,000,000" in table
    assert f"{amplified_epsilon(2.0, 10**4, 1e-6, method='stronger-2022'):.4f}" in table
    assert f"{amplified_epsilon(2.0, 10**4, 1e-6, method='closed-form'):.4f}" in table
    assert 'id="recipe-paths"' in page and '"epsilon": "privacy.epsilon"' in page


def test_the_curve_table_shows_the_bound_devices_enforce_for_the_randomizer(analysis, recipe) -> None:
    """Check 3 uses FMT 2020 for Hadamard response (privacy.enforced_cohort.BOUNDS): so does the curve."""
    hadamard = copy.deepcopy(recipe)
    hadamard["privacy"] = {**hadamard["privacy"], "mechanism": "hadamard_response", "epsilon0": 2.0}
    table = RecipeForm(analysis=analysis, initial={"recipe_json": json.dumps(hadamard)}).curve_table
    assert table["enforced_label"] == "FMT 2020 numerical bound"
    row = next(row for row in table["rows"] if row["n"] == 10**4)
    assert row["enforced"] == amplified_epsilon(2.0, 10**4, 1e-6, method="clones-2020")
    assert row["enforced"] > amplified_epsilon(2.0, 10**4, 1e-6, method="stronger-2022")
    ohe = copy.deepcopy(recipe)
    ohe["privacy"] = {**ohe["privacy"], "mechanism": "asymmetric_ohe", "epsilon0": 2.0}
    table = RecipeForm(analysis=analysis, initial={"recipe_json": json.dumps(ohe)}).curve_table
    assert table["enforced_label"] == "FMT 2022 numerical bound"
    assert next(r for r in table["rows"] if r["n"] == 10**4)["enforced"] == amplified_epsilon(
        2.0, 10**4, 1e-6, method="stronger-2022"
    )


def test_the_curve_table_of_symmetric_rappor_is_fmt_2022_at_its_replacement_epsilon0(analysis, recipe) -> None:
    """Its per-coordinate bound (privacy.rappor_shuffling) has no curve: the table shows the one above it."""
    rappor = copy.deepcopy(recipe)
    rappor["privacy"] = {**rappor["privacy"], "mechanism": "symmetric_rappor", "epsilon0": 1.0}
    table = RecipeForm(analysis=analysis, initial={"recipe_json": json.dumps(rappor)}).curve_table
    assert table["epsilon0"] == 2.0
    assert "above the per-coordinate bound" in table["enforced_label"]
    row = next(row for row in table["rows"] if row["n"] == 10**4)
    assert row["enforced"] == amplified_epsilon(2.0, 10**4, 1e-6, method="stronger-2022")


def test_the_form_runs_the_json_when_the_json_is_the_source(
    client, analysis, analyst, recipe, django_capture_on_commit_callbacks
) -> None:
    client.force_login(analyst)
    recipe["recipeIdentifier"] = "written-as-json"  # a key the form has no field for
    recipe["privacy"]["epsilon0"] = 2.5  # the form says 3
    post = {**FORM, "epsilon": "not a number", "source": "json", "recipe_json": json.dumps(recipe)}
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post("/analyses/test.ages/", post)
    assert response.status_code == 302
    stored = Recipe.objects.get()
    assert (stored.identifier, stored.privacy.epsilon0) == ("written-as-json", 2.5)
    assert stored.content == recipe


def test_json_that_does_not_parse_says_where_and_keeps_the_form(client, analysis, analyst) -> None:
    client.force_login(analyst)
    broken = '{\n  "version": "1",\n  "query" "select age from KeyboardNGrams"\n}'
    response = client.post(
        "/analyses/test.ages/", {**FORM, "boundaries": "18, 25", "source": "json", "recipe_json": broken}
    )
    assert response.status_code == 400
    page = response.content.decode()
    assert "Not valid JSON: Expecting &#x27;:&#x27; delimiter (line 3, column 11)." in page
    assert 'value="18, 25"' in page and textarea(page, "recipe_json") == broken
    assert not Recipe.objects.exists() and not Round.objects.exists()


def test_json_recipe_errors_show_with_the_json_by_key(client, analysis, analyst, recipe) -> None:
    client.force_login(analyst)
    recipe["privacy"]["epsilon"] = 2.5
    response = client.post("/analyses/test.ages/", {**FORM, "source": "json", "recipe_json": json.dumps(recipe)})
    assert response.status_code == 400
    assert "privacy.epsilon: Exceeds the analysis budget" in response.content.decode()
    assert not Recipe.objects.exists()


def test_the_form_alone_still_runs_without_the_json_side(
    client, analysis, analyst, django_capture_on_commit_callbacks
) -> None:
    """A post as the page sends it without JavaScript: the fields, no source, any JSON ignored."""
    client.force_login(analyst)
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post("/analyses/test.ages/", {**FORM, "recipe_json": "{ not even json"})
    assert response.status_code == 302
    stored = Recipe.objects.get()
    assert stored.content["privacy"] == {
        "noise": "client",
        "mechanism": "asymmetric_ohe",
        "epsilon0": 3.0,
        "epsilon": 1.0,
        "delta": 1e-6,
        "samplingRate": 1.0,
    }


def test_after_a_refused_form_post_the_json_shows_the_posted_fields(client, analysis, analyst) -> None:
    client.force_login(analyst)
    response = client.post("/analyses/test.ages/", {**FORM, "epsilon": "2.5", "source": "form", "recipe_json": "{}"})
    assert response.status_code == 400
    assert "Exceeds the analysis budget" in response.content.decode()
    shown = json.loads(textarea(response.content.decode(), "recipe_json"))
    assert shown["privacy"]["epsilon"] == 2.5 and shown["privacy"]["epsilon0"] == 3.0


def test_a_dry_run_from_the_json_side_spends_nothing(client, analysis, analyst, recipe) -> None:
    client.force_login(analyst)
    post = {**FORM, "action": "dry-run", "source": "json", "recipe_json": json.dumps(copy.deepcopy(recipe))}
    page = client.post("/analyses/test.ages/", post).content.decode()
    assert f"{FLEET_SIZE:,} of {FLEET_SIZE:,} devices would answer" in page
    assert not Recipe.objects.exists() and not ShardLedger.objects.exists()


def test_a_form_prefilled_with_a_recipes_json_shows_it_and_runs_it(analysis, recipe) -> None:
    """A drill-down passes its refined recipe as the form's initial JSON: the JSON side then runs."""
    written = json.dumps(recipe, indent=2)
    form = RecipeForm(analysis=analysis, initial={"recipe_json": written, "epsilon": 1.0})
    assert form.json_text == written
    assert 'value="json" id="id_source_1" checked' in str(form["source"])


def test_a_form_prefilled_with_fields_shows_their_recipe(analysis) -> None:
    form = RecipeForm(analysis=analysis, initial={"boundaries": "18, 65", "epsilon": 0.7})
    shown = json.loads(form.json_text)
    assert shown["dataTypeContent"]["age"]["boundaries"] == [18, 65]
    assert shown["privacy"]["epsilon"] == 0.7
    assert 'value="form" id="id_source_0" checked' in str(form["source"])
