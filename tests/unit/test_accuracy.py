"""Accuracy first (issue 30, requirement 6): every recipe's expected error per bucket next to its cost,
and a recipe too noisy for its buckets starts only with the same go-ahead as small cohorts."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from analyses.forms.recipe_editor import RecipeForm
from analyses.models import Analysis, Recipe, Round
from analyses.services.accuracy import EPSILONS, _base, _Search, recipe_propose, target_parse
from analyses.services.policy import analysis_approve, analysis_create
from analyses.services.recipes import recipe_create, recipe_validate
from analyses.services.rounds import round_create_and_start, round_dry_run, round_start
from devices.fleet_io import fleet_create
from devices.models import ShardLedger, ShardRun
from pfs_base.errors import ValidationFailed
from privacy.accuracy import ExpectedError
from tests.conftest import SPEC
from tests.unit.test_dashboard import FORM

pytestmark = pytest.mark.database

ISSUE_DEVICES = 100_000
ISSUE_BUCKETS = 20_000


def bucketed(recipe: dict, buckets: int) -> dict:
    """``recipe`` over ``buckets`` buckets of age (buckets - 1 boundaries)."""
    changed = copy.deepcopy(recipe)
    boundaries = np.round(np.linspace(0.0, 100.0, buckets - 1, endpoint=False) + 0.001, 4).tolist()
    changed["dataTypeContent"] = {"age": {"dataType": "BucketedType", "boundaries": boundaries}}
    changed.pop("recipeIdentifier", None)
    return changed


@pytest.fixture
def issue_analysis(db, analyst, officer) -> Analysis:
    """The issue's fleet: 100,000 devices."""
    fleet_create(name="issue", size=ISSUE_DEVICES, seed=30, shard_size=50_000)
    spec = {**copy.deepcopy(SPEC), "identifier": "test.issue30", "fleet": "issue"}
    return analysis_approve(analysis=analysis_create(spec=spec, owner=analyst), officer=officer)


@pytest.fixture
def issue_recipe(recipe) -> dict:
    """20,000 buckets, asymmetric OHE at epsilon0 = 2: about 5 devices a bucket against a standard error of 269."""
    content = bucketed(recipe, ISSUE_BUCKETS)
    content["AnalysisIdentifier"] = "test.issue30"
    content["privacy"]["epsilon0"] = 2.0
    return content


def test_the_issues_recipe_is_flagged_by_the_dry_run(issue_analysis, issue_recipe) -> None:
    result = round_dry_run(analysis=issue_analysis, content=issue_recipe)
    error = result["expected_error"]
    assert result["too_noisy"] is True
    assert error["buckets"] == ISSUE_BUCKETS and error["per_bucket"] == pytest.approx(5.0)
    assert error["standard_error"] == pytest.approx(269.093229, rel=1e-6)
    assert error["half_width"] == pytest.approx(527.413038, rel=1e-6)
    assert "exceeds what most buckets can hold" in result["too_noisy_reason"]
    assert result["epsilon"] == 1.0  # the cost, next to the error


def test_the_issues_recipe_is_refused_without_confirmation_and_nothing_is_written(
    issue_analysis, issue_recipe, analyst
) -> None:
    with pytest.raises(ValidationFailed) as refused:
        round_create_and_start(analysis=issue_analysis, content=issue_recipe, user=analyst)
    [message] = refused.value.errors["confirmSmallCohorts"]
    assert "±527 devices per bucket at 95% against about 5 devices a bucket" in message
    assert not Recipe.objects.exists() and not Round.objects.exists()
    assert not ShardRun.objects.exists() and not ShardLedger.objects.exists()


def test_the_issues_recipe_starts_when_confirmed(issue_analysis, issue_recipe, analyst) -> None:
    round_ = round_create_and_start(
        analysis=issue_analysis, content=issue_recipe, user=analyst, confirm_small_cohorts=True
    )
    assert round_.status == Round.Status.QUEUED


def test_a_healthy_recipe_is_not_flagged_and_starts_without_confirmation(analysis, recipe, analyst) -> None:
    result = round_dry_run(analysis=analysis, content=recipe)
    assert result["too_noisy"] is False and result["too_noisy_reason"] is None
    assert result["expected_error"]["half_width"] < result["expected_error"]["per_bucket"]
    assert round_create_and_start(analysis=analysis, content=recipe, user=analyst).status == Round.Status.QUEUED


def test_a_stored_recipe_too_noisy_is_refused_at_start_until_confirmed(analysis, recipe, analyst) -> None:
    stored = recipe_create(analysis=analysis, content=bucketed(recipe, 1_000), user=analyst)  # 5 devices a bucket
    with pytest.raises(ValidationFailed) as refused:
        round_start(recipe=stored, user=analyst)
    assert "most buckets" in refused.value.errors["confirmSmallCohorts"][0]
    assert not Round.objects.exists()
    assert round_start(recipe=stored, user=analyst, confirm_small_cohorts=True).recipe == stored


def test_the_api_shows_the_expected_error_and_refuses_a_noisy_start_until_confirmed(api, analysis, recipe) -> None:
    noisy = bucketed(recipe, 1_000)
    dry = api.post("/api/analyses/test.ages/dry-run/", noisy, format="json").json()
    assert dry["too_noisy"] is True and dry["expected_error"]["buckets"] == 1_000
    checked = api.post("/api/analyses/test.ages/recipes/validate/", noisy, format="json").json()
    assert checked["expected_error"]["too_noisy"] is True

    stored = api.post("/api/analyses/test.ages/recipes/", noisy, format="json").json()
    assert stored["expected_error"]["too_noisy"] is True and stored["epsilon"] == 1.0  # next to its cost
    listed = api.get("/api/analyses/test.ages/recipes/").json()
    assert listed["results"][0]["expected_error"] == api.get(f"/api/recipes/{stored['id']}/").json()["expected_error"]
    refused = api.post(f"/api/recipes/{stored['id']}/rounds/", {}, format="json")
    assert refused.status_code == 400
    assert "most buckets" in refused.json()["fields"]["confirmSmallCohorts"][0]
    assert not Round.objects.exists()
    started = api.post(f"/api/recipes/{stored['id']}/rounds/", {"confirmSmallCohorts": True}, format="json")
    assert started.status_code == 202


def test_the_page_shows_the_expected_error_and_asks_to_confirm_a_noisy_run(client, analyst, analysis) -> None:
    client.force_login(analyst)
    noisy = {**FORM, "boundaries": ", ".join(str(b) for b in range(1, 1_000))}  # 1,000 buckets
    dry = client.post("/analyses/test.ages/", {**noisy, "action": "dry-run"}).content.decode()
    assert 'id="dry-run-accuracy"' in dry and "Too noisy:" in dry

    refused = client.post("/analyses/test.ages/", {**noisy, "action": "run"})
    assert refused.status_code == 400
    page = refused.content.decode()
    assert "exceeds what most buckets can hold" in page and 'name="confirm_small_cohorts"' in page
    assert not Round.objects.exists()

    started = client.post("/analyses/test.ages/", {**noisy, "action": "run", "confirm_small_cohorts": "on"})
    assert started.status_code == 302 and Round.objects.count() == 1


# ---------------------------------------------------------------------- proposals from a target


@pytest.fixture
def central(fleet, analyst, officer) -> Analysis:
    """test.ages with aggregator noise allowed on age."""
    spec = copy.deepcopy(SPEC)
    spec["identifier"] = "test.central"
    spec["fields"]["age"]["aggregatorNoise"] = True
    return analysis_approve(analysis=analysis_create(spec=spec, owner=analyst), officer=officer)


@pytest.mark.parametrize("target", [{"halfWidth": 100.0}, {"relativeError": 0.1}])
def test_a_proposal_is_the_least_epsilon_that_meets_the_target_and_a_valid_recipe(analysis, recipe, target) -> None:
    answer = recipe_propose(analysis=analysis, content=recipe, target=target)
    assert answer["met"] is True and answer["target"] == target
    proposal = answer["proposal"]
    goal = target_parse(target)
    assert goal.shortfall(_error(proposal)) <= 1
    parsed = recipe_validate(analysis=analysis, content=answer["recipe"])  # a recipe the analysis accepts
    assert parsed.privacy.epsilon == proposal["privacy"]["epsilon"]
    # No smaller epsilon of the grid meets it, at any sampling rate or epsilon0 the policy allows.
    search = _Search(analysis, _base(analysis, recipe))
    for epsilon in [e for e in EPSILONS if e < proposal["privacy"]["epsilon"]]:
        found = search.best(epsilon, goal, 8)
        assert found is None or not goal.met_by(found.error), epsilon


def test_a_target_no_policy_allows_says_so_with_the_best_within_it(analysis, recipe) -> None:
    answer = recipe_propose(analysis=analysis, content=recipe, target={"relativeError": 0.01})
    assert answer["met"] is False and answer["proposal"] is None
    assert answer["message"].startswith(
        "No parameters within the policy meet a relative error of 0.01 on the largest bucket at 95%: the best is ±"
    )
    assert answer["best"]["privacy"]["epsilon"] == 2.0  # the most the analysis allows
    assert answer["best"]["expected_error"]["relative_error"] > 0.01


def test_the_issues_recipe_is_proposed_fewer_buckets(issue_analysis, issue_recipe) -> None:
    answer = recipe_propose(analysis=issue_analysis, content=issue_recipe, target={"relativeError": 0.5})
    assert answer["met"] is False
    fewer = answer["fewer_buckets"]
    assert fewer is not None and fewer["buckets"] < ISSUE_BUCKETS and fewer["expected_error"]["relative_error"] <= 0.5
    assert f"With {fewer['buckets']:,} buckets (merge boundaries) it is met" in answer["message"]


def test_a_proposal_with_laplace_aggregator_noise_keeps_pure_dp(central, recipe) -> None:
    recipe["AnalysisIdentifier"] = "test.central"
    recipe["privacy"] = {"noise": "aggregator", "noiseDistribution": "laplace", "epsilon": 1.0}
    answer = recipe_propose(analysis=central, content=recipe, target={"halfWidth": 20})
    privacy = answer["proposal"]["privacy"]
    assert answer["met"] is True and privacy["noiseDistribution"] == "laplace" and "delta" not in privacy
    assert answer["proposal"]["expected_error"]["half_width"] <= 20
    assert recipe_validate(analysis=central, content=answer["recipe"]).privacy.delta == 0


@pytest.mark.parametrize(
    ("privacy", "key"),
    [
        ({"mechanism": ["asymmetric_ohe"]}, "privacy.mechanism"),
        ({"mechanism": "nope"}, "privacy.mechanism"),
        ({"noise": "both"}, "privacy.noise"),
        ({"delta": 2}, "privacy.delta"),
        ({"samplingrate": 0.1}, "privacy.samplingrate"),  # a typo is named, never dropped silently
    ],
)
def test_a_proposal_for_a_bad_recipe_is_refused_by_key(analysis, recipe, privacy, key) -> None:
    recipe["privacy"].update(privacy)
    with pytest.raises(ValidationFailed) as refused:
        recipe_propose(analysis=analysis, content=recipe, target={"halfWidth": 100})
    assert key in refused.value.errors


def test_a_proposal_when_the_budget_is_spent_says_why_by_key(analysis, recipe, analyst) -> None:
    for _ in range(2):  # the analysis allows two reports
        round_create_and_start(analysis=analysis, content={**recipe, "recipeIdentifier": f"r{_}"}, user=analyst)
    with pytest.raises(ValidationFailed) as refused:
        recipe_propose(analysis=analysis, content=recipe, target={"halfWidth": 100})
    assert "budget.reports" in refused.value.errors


def test_a_proposal_for_noise_the_policy_forbids_is_refused_by_key(analysis, recipe) -> None:
    recipe["privacy"] = {"noise": "aggregator", "epsilon": 1.0, "delta": 1e-6}
    with pytest.raises(ValidationFailed) as refused:
        recipe_propose(analysis=analysis, content=recipe, target={"halfWidth": 20})
    assert "does not allow aggregator noise" in refused.value.errors["privacy.noise"][0]


@pytest.mark.parametrize(
    ("target", "key"),
    [
        ({"halfWidth": 0}, "target.halfWidth"),
        ({"halfWidth": -5}, "target.halfWidth"),
        ({"halfWidth": float("nan")}, "target.halfWidth"),
        ({"halfWidth": float("inf")}, "target.halfWidth"),
        ({"halfWidth": True}, "target.halfWidth"),
        ({"halfWidth": "10"}, "target.halfWidth"),
        ({"relativeError": 0}, "target.relativeError"),
        ({"halfWidth": 10, "relativeError": 0.1}, "target"),
        ({}, "target"),
        ({"halfwidth": 10}, "target.halfwidth"),
        ([10], "target"),
    ],
)
def test_a_bad_target_is_refused_by_key(analysis, recipe, target, key) -> None:
    with pytest.raises(ValidationFailed) as refused:
        recipe_propose(analysis=analysis, content=recipe, target=target)
    assert key in refused.value.errors


def test_an_enormous_target_is_met_at_the_least_epsilon_that_is_not_too_noisy(analysis, recipe) -> None:
    answer = recipe_propose(analysis=analysis, content=recipe, target={"halfWidth": 1e300})
    proposal = answer["proposal"]
    assert answer["met"] is True and proposal["expected_error"]["too_noisy"] is False
    # Its epsilon is the least at which any candidate is not too noisy (a too-noisy one is never proposed).
    search = _Search(analysis, _base(analysis, recipe))
    anything = target_parse({"halfWidth": 1e300})
    for epsilon in [e for e in EPSILONS if e < proposal["privacy"]["epsilon"]]:
        assert search.best(epsilon, anything, 8) is None, epsilon


def test_a_proposal_is_never_too_noisy(issue_analysis, issue_recipe) -> None:
    answer = recipe_propose(analysis=issue_analysis, content=issue_recipe, target={"halfWidth": 1e300})
    assert answer["met"] is False and answer["best"] is None  # 20,000 buckets: every candidate is too noisy
    assert "every recipe within it is too noisy for this many buckets" in answer["message"]
    assert answer["fewer_buckets"]["expected_error"]["too_noisy"] is False


def test_the_api_proposes_and_refuses_bad_input(api, analysis, recipe) -> None:
    url = "/api/analyses/test.ages/recipes/propose/"
    answer = api.post(url, {"recipe": recipe, "target": {"relativeError": 0.1}}, format="json")
    assert answer.status_code == 200 and answer.json()["met"] is True
    stored = api.post("/api/analyses/test.ages/recipes/", answer.json()["recipe"], format="json")
    assert stored.status_code == 201
    assert api.post(url, {"recipe": recipe, "target": {"halfWidth": -1}}, format="json").status_code == 400
    refused = api.post(url, {"recipe": recipe, "target": {"halfWidth": 1}, "extra": 1}, format="json")
    assert refused.status_code == 400 and "extra" in refused.json()["fields"]
    assert api.post(url, {"target": {"halfWidth": 1}}, format="json").status_code == 400
    assert api.post("/api/analyses/nope/recipes/propose/", {}, format="json").status_code == 404
    assert Recipe.objects.count() == 1 and not Round.objects.exists()


def _error(proposal: dict) -> ExpectedError:
    fields = ("reports", "buckets", "per_bucket", "standard_error", "half_width")
    return ExpectedError(**{name: proposal["expected_error"][name] for name in fields})


# ---------------------------------------------------------------------- the editor


def test_the_editor_proposes_parameters_that_fill_the_form(client, analyst, analysis) -> None:
    client.force_login(analyst)
    page = client.post("/analyses/test.ages/", {**FORM, "target_relative_error": "0.1", "action": "propose"})
    assert page.status_code == 200
    html = page.content.decode()
    assert 'id="proposal"' in html and "The cheapest parameters that meet a relative error of 0.1" in html
    form = page.context["form"]
    assert form["epsilon"].value() == "0.75" and form["epsilon0"].value() == "4.0"  # the proposal's, in the fields
    assert '"epsilon": 0.75' in form.json_text
    assert not Recipe.objects.exists() and not Round.objects.exists()


def test_the_editor_says_when_no_parameters_meet_the_target(client, analyst, analysis) -> None:
    client.force_login(analyst)
    page = client.post("/analyses/test.ages/", {**FORM, "target_half_width": "1", "action": "propose"})
    html = page.content.decode()
    assert "No parameters within the policy meet ±1 devices per bucket at 95%: the best is ±" in html
    assert page.context["form"]["epsilon"].value() == "1"  # left as it was


@pytest.mark.parametrize(
    ("posted", "field"), [({}, "target_half_width"), ({"target_half_width": "0"}, "target_half_width")]
)
def test_the_editor_refuses_a_missing_or_zero_target_under_its_field(client, analyst, analysis, posted, field) -> None:
    client.force_login(analyst)
    page = client.post("/analyses/test.ages/", {**FORM, **posted, "action": "propose"})
    assert page.status_code == 400 and page.context["form"].errors[field]


def test_the_editor_offers_the_discrete_laplace_for_aggregator_noise(client, analyst, central) -> None:
    client.force_login(analyst)
    laplace = {**FORM, "noise": "aggregator", "noise_distribution": "laplace", "min_cohort": "1000", "epsilon": "1"}
    page = client.get("/analyses/test.central/").content.decode()
    assert 'name="noise_distribution"' in page and "Discrete Laplace: pure ε-DP (δ = 0)" in page
    started = client.post("/analyses/test.central/", {**laplace, "action": "run"})
    assert started.status_code == 302
    recipe = Recipe.objects.get()
    assert recipe.content["privacy"]["noiseDistribution"] == "laplace" and "delta" not in recipe.content["privacy"]
    assert recipe.privacy.delta == 0 and recipe.privacy.noise_distribution == "laplace"


def test_the_editors_laplace_choice_writes_a_recipe_without_delta(central) -> None:
    posted = {**FORM, "noise": "aggregator", "noise_distribution": "laplace", "epsilon": "1"}
    form = RecipeForm(posted, analysis=central)
    assert form.is_valid(), form.errors
    assert form.recipe()["privacy"] == {
        "noise": "aggregator",
        "noiseDistribution": "laplace",
        "epsilon": 1.0,
        "samplingRate": 1.0,
    }
