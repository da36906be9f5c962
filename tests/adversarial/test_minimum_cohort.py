"""Issue: a recipe lowered the minimum cohort.

The attack: an aggregator-noise recipe with ``"minCohort": 1`` was accepted and released cohorts
of 6 and 3 devices. Now a per-analysis floor, set by the privacy officer (default 1,000 for
aggregator noise; what devices compute for client noise), is never lowered by a recipe, and the
devices refuse a task below the floor of the snapshot they hold."""

from __future__ import annotations

import numpy as np
import pytest

from analyses.models import FieldPolicy, Recipe
from analyses.services.policy import analysis_approve
from pfs_device.budget import Decision, ledger_empty
from pfs_device.decision import decide
from tests.adversarial.conftest import admin_approve, admin_edit

pytestmark = pytest.mark.django_db


@pytest.fixture
def aggregator_noise_allowed(analysis, officer):
    FieldPolicy.objects.filter(analysis=analysis, field="age").update(aggregator_noise=True)
    return analysis_approve(analysis=analysis, officer=officer)


def _aggregator_recipe(recipe: dict, min_cohort: int) -> dict:
    recipe["privacy"] = {"noise": "aggregator", "epsilon": 1.0, "delta": 1e-6, "minCohort": min_cohort}
    return recipe


def test_an_aggregator_noise_recipe_cannot_lower_the_default_floor_of_1000(
    api, aggregator_noise_allowed, recipe
) -> None:
    response = api.post("/api/analyses/test.ages/recipes/", _aggregator_recipe(recipe, 1), format="json")
    assert response.status_code == 400
    assert "floor of 1,000" in response.json()["fields"]["privacy.minCohort"][0]
    assert not Recipe.objects.exists()


def test_the_officers_floor_binds_client_noise_recipes_too(
    officer_browser, other_officer, api, analysis, recipe
) -> None:
    admin_edit(officer_browser, analysis, min_cohort_floor=4000)
    admin_approve(other_officer, analysis)
    recipe["privacy"]["minCohort"] = 3000  # above the 736 devices compute, below the officer's floor
    response = api.post("/api/analyses/test.ages/recipes/validate/", recipe, format="json")
    assert "floor of 4,000" in response.json()["fields"]["privacy.minCohort"][0]
    del recipe["privacy"]["minCohort"]
    assert api.post("/api/analyses/test.ages/recipes/validate/", recipe, format="json").json()["min_cohort"] == 4000


def test_devices_refuse_a_task_below_the_floor_of_their_snapshot(aggregator_noise_allowed, recipe) -> None:
    from analyses.services.recipes import recipe_device_task, recipe_unsaved, recipe_validate

    content = _aggregator_recipe(recipe, 1000)
    parsed = recipe_validate(analysis=aggregator_noise_allowed, content=content)
    task = recipe_device_task(recipe_unsaved(aggregator_noise_allowed, content, parsed, None), task_key="k", seed=1)
    policy = {**aggregator_noise_allowed.snapshot.content}
    policy["budget"] = {**policy["budget"], "minCohort": 1001}  # a server that lowered it below the floor
    decision, _ = decide(
        task=task, policy=policy, fleet_name="small", ledger=ledger_empty(3), sampled=np.ones(3, dtype=bool)
    )
    assert (decision == Decision.MIN_COHORT).all()
