"""Issue: a typo in a key silently changed a recipe.

The attack: ``"samplingrate": 0.1`` (for ``samplingRate``) was shown Valid and the dry run used
q = 1: every device would answer and spend. An unknown top-level key was accepted too."""

from __future__ import annotations

import copy
import json

import pytest
from django.core.management import CommandError, call_command

from analyses.models import AdaptiveRun, Analysis, Recipe, Round
from devices.models import ShardLedger
from tests.conftest import DISCOVERY_SPEC, SPEC

pytestmark = pytest.mark.django_db


def _typo(recipe: dict) -> dict:
    recipe["privacy"]["samplingrate"] = 0.1
    return recipe


@pytest.mark.parametrize("endpoint", ["recipes/validate/", "dry-run/", "recipes/"])
def test_a_mistyped_privacy_key_is_refused_naming_the_key_it_resembles(api, analysis, recipe, endpoint) -> None:
    response = api.post(f"/api/analyses/test.ages/{endpoint}", _typo(recipe), format="json")
    assert response.status_code == 400
    assert response.json()["fields"]["privacy.samplingrate"] == ["Unknown key; did you mean 'samplingRate'?"]
    assert not Recipe.objects.exists() and not ShardLedger.objects.exists()


def test_an_unknown_top_level_key_is_refused(api, analysis, recipe) -> None:
    response = api.post("/api/analyses/test.ages/recipes/", {**recipe, "cohort": ["locale"]}, format="json")
    assert response.status_code == 400
    assert response.json()["fields"]["cohort"] == ["Unknown key; did you mean 'cohorts'?"]


def test_an_unknown_schema_key_is_refused_at_its_path(api, analysis, recipe) -> None:
    recipe["dataTypeContent"]["age"]["boundary"] = [1, 2]
    response = api.post("/api/analyses/test.ages/recipes/validate/", recipe, format="json")
    assert response.json()["fields"]["dataTypeContent.age.boundary"] == ["Unknown key; did you mean 'boundaries'?"]


def test_an_adaptive_spec_with_a_typo_is_refused_and_starts_nothing(api, discovery) -> None:
    spec = {**copy.deepcopy(DISCOVERY_SPEC), "maxlength": 3}
    response = api.post("/api/adaptive-runs/", spec, format="json")
    assert response.status_code == 400 and "maxlength" in response.json()["fields"]
    spec = copy.deepcopy(DISCOVERY_SPEC)
    spec["privacy"]["epsilon_per_round"] = 0.5
    response = api.post("/api/adaptive-runs/", spec, format="json")
    assert response.status_code == 400 and not AdaptiveRun.objects.exists() and not Round.objects.exists()


@pytest.mark.parametrize(
    ("path", "body"),
    [("/api/recipes/{recipe}/rounds/", {"confirmSmallCohort": True}), ("/api/rounds/{round}/close/", {"when": "now"})],
)
def test_an_api_body_with_an_unknown_key_is_refused(api, analysis, recipe, path, body) -> None:
    recipe_id = api.post("/api/analyses/test.ages/recipes/", recipe, format="json").json()["id"]
    round_id = api.post(f"/api/recipes/{recipe_id}/rounds/").json()["id"] if "round}" in path else 0
    rounds = Round.objects.count()
    response = api.post(path.format(recipe=recipe_id, round=round_id), body, format="json")
    assert response.status_code == 400 and list(response.json()["fields"]) == list(body)
    assert Round.objects.count() == rounds


def test_a_token_request_with_an_unknown_key_is_refused(client, analyst) -> None:
    response = client.post(
        "/api/token/", json.dumps({"username": "alice", "pasword": "x"}), content_type="application/json"
    )
    assert response.status_code == 400 and "pasword" in response.json()["fields"]


def test_an_analysis_spec_with_a_typo_is_refused_by_the_cli_with_exit_code_2(fleet, analyst, tmp_path) -> None:
    spec = copy.deepcopy(SPEC)
    spec["budget"]["epsilonn"] = 5.0
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    with pytest.raises(CommandError) as refused:
        call_command("create_analysis", str(path), "--owner", "alice")
    assert refused.value.returncode == 2  # what manage.py exits with
    assert "budget.epsilonn: Unknown key; did you mean 'epsilon'?" in str(refused.value)
    assert not Analysis.objects.exists()
