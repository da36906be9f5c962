"""The histogram editor puts each refusal under the field that caused it, in plain words; a refusal
no field caused (the policy's report count) goes above the fields."""

from __future__ import annotations

import copy
import json

import pytest

from analyses.models import Recipe, Round
from analyses.services.policy import analysis_approve, analysis_create
from analyses.services.rounds import round_create_and_start
from tests.conftest import SPEC
from tests.unit.test_dashboard import FORM

pytestmark = pytest.mark.django_db


def post(client, analyst, identifier: str = "test.ages", **changes: str):
    client.force_login(analyst)
    return client.post(f"/analyses/{identifier}/", {**FORM, "source": "form", **changes})


def spend_reports(analysis, recipe: dict, analyst, times: int) -> None:
    for i in range(times):
        round_create_and_start(analysis=analysis, content={**recipe, "recipeIdentifier": f"r{i}"}, user=analyst)


def test_a_refusal_for_the_report_count_shows_above_the_fields_not_under_epsilon(
    client, analysis, analyst, recipe
) -> None:
    spend_reports(analysis, recipe, analyst, 2)
    response = post(client, analyst)
    assert response.status_code == 400
    form = response.context["form"]
    assert form.non_field_errors() == [
        "The analysis has used all 2 of its reports: each device answers it at most 2 times, "
        "and every round started counts one."
    ]
    assert "epsilon" not in form.errors
    assert Round.objects.count() == 2  # the refusal started nothing


def test_a_one_report_policy_says_its_only_report_is_used_not_all_1_of(client, fleet, analyst, officer, recipe) -> None:
    spec = copy.deepcopy(SPEC)
    spec.update(identifier="test.once", budget={"epsilon": 2.0, "reports": 1, "delta": 1e-6})
    spec["fields"]["age"]["reports"] = 1
    once = analysis_approve(analysis=analysis_create(spec=spec, owner=analyst), officer=officer)
    spend_reports(once, {**recipe, "AnalysisIdentifier": "test.once"}, analyst, 1)
    response = post(client, analyst, "test.once")
    page = response.content.decode()
    assert "has used its only report: each device answers it once" in page
    assert "all 1 of" not in page
    assert "epsilon" not in response.context["form"].errors


def test_a_minimum_cohort_above_the_fleet_shows_under_minimum_cohort_not_under_epsilon(
    client, analysis, analyst
) -> None:
    response = post(client, analyst, min_cohort="200000")
    assert response.status_code == 400
    errors = response.context["form"].errors
    assert list(errors) == ["min_cohort"]
    assert errors["min_cohort"] == [
        "More than this fleet can reach: the fleet's 5,000 devices at sampling rate 1 give about 5,000 reports, "
        "fewer than 200,000, so nothing would be released. Lower it, or raise the sampling rate."
    ]
    assert not Recipe.objects.exists()


def test_an_epsilon_too_small_for_the_fleet_shows_under_epsilon_and_says_what_to_change(
    client, analysis, analyst
) -> None:
    response = post(client, analyst, epsilon="0.05")
    assert response.status_code == 400
    errors = response.context["form"].errors
    assert list(errors) == ["epsilon"]
    assert errors["epsilon"][0].startswith(
        "Too small for this fleet: at this ε, ε₀ and δ devices need a minimum cohort of "
    )
    assert errors["epsilon"][0].endswith(
        "but the fleet's 5,000 devices at sampling rate 1 give about 5,000 reports. Raise ε, or lower ε₀."
    )


def test_a_sampling_rate_too_small_for_the_cohort_shows_under_it_with_the_smallest_that_works(
    client, analysis, analyst
) -> None:
    """Issue 31, item 6: q = 0.001 was blamed on Aggregate epsilon and never suggested raising q."""
    response = post(client, analyst, sampling_rate="0.001")
    assert response.status_code == 400
    errors = response.context["form"].errors
    assert list(errors) == ["sampling_rate"]
    # epsilon0 3, epsilon 1, delta 1e-6: devices enforce 736; 736 / 5,000 = 0.1472, up to 0.15.
    assert errors["sampling_rate"] == [
        "Too small for the cohort: at this ε, ε₀ and δ devices need a minimum cohort of 736 reports, but the "
        "fleet's 5,000 devices at sampling rate 0.001 give about 5 reports. Raise the sampling rate to at least "
        "0.15 (or raise ε, or lower ε₀, for a smaller cohort)."
    ]
    assert post(client, analyst, sampling_rate="0.15", action="dry-run").status_code == 200  # and it does work


def test_the_api_names_the_report_count_refusal_by_its_own_key(api, analysis, analyst, recipe) -> None:
    spend_reports(analysis, recipe, analyst, 2)
    response = api.post("/api/analyses/test.ages/recipes/validate/", {**recipe, "recipeIdentifier": "x"}, format="json")
    assert response.status_code == 400
    assert list(response.json()["fields"]) == ["budget.reports"]


def test_too_many_buckets_for_the_policy_shows_under_the_boundaries(client, analysis, analyst, officer) -> None:
    analysis.max_buckets = 4
    analysis.save(update_fields=["max_buckets"])
    analysis_approve(analysis=analysis, officer=officer)
    response = post(client, analyst)  # 7 boundaries: 8 buckets
    errors = response.context["form"].errors
    assert list(errors) == ["boundaries"]
    assert errors["boundaries"][0].startswith("8 buckets; this analysis allows at most 4")


def test_a_json_post_in_sync_with_the_fields_puts_the_error_under_the_field(client, analysis, analyst, recipe) -> None:
    """What the page's script posts: the JSON runs, and the fields show the same values."""
    recipe["privacy"]["minCohort"] = 200000
    response = post(client, analyst, min_cohort="200000", source="json", recipe_json=json.dumps(recipe))
    errors = response.context["form"].errors
    assert list(errors) == ["min_cohort"] and errors["min_cohort"][0].startswith("More than this fleet can reach")
    assert not Recipe.objects.exists()


def test_a_json_key_the_fields_do_not_show_keeps_its_error_with_the_json(client, analysis, analyst, recipe) -> None:
    recipe["privacy"]["minCohort"] = 200000  # the form's Minimum cohort is empty
    response = post(client, analyst, source="json", recipe_json=json.dumps(recipe))
    errors = response.context["form"].errors
    assert list(errors) == ["recipe_json"]
    assert errors["recipe_json"][0].startswith("privacy.minCohort: More than this fleet can reach")


def test_an_aggregator_noise_floor_the_fleet_cannot_reach_says_it_is_the_analysiss(
    api, analysis, officer, recipe
) -> None:
    analysis.field_policies.update(aggregator_noise=True)
    analysis_approve(analysis=analysis, officer=officer)
    recipe["privacy"] = {"noise": "aggregator", "epsilon": 1.0, "delta": 1e-6, "samplingRate": 0.1}
    response = api.post("/api/analyses/test.ages/recipes/validate/", recipe, format="json")
    assert response.status_code == 400
    assert response.json()["fields"] == {
        "privacy.minCohort": [
            "This analysis's minimum cohort of 1,000 (its floor, or 1,000 with aggregator noise) is more than this "
            "fleet can reach: the fleet's 5,000 devices at sampling rate 0.1 give about 500 reports. "
            "Raise the sampling rate to at least 0.2."
        ]
    }
