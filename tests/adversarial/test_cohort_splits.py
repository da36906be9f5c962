"""Issue: a cohort split wasted budget silently.

The attack (a careless analyst): split a round by locale where four of five locales fall below
the minimum cohort. The dry run said every device would answer; the run suppressed four locales
and every device spent. Now the editor's validation, the dry run and the API say which batches
are expected below, and the round starts only with an explicit confirmation."""

from __future__ import annotations

import pytest

from analyses.models import Recipe, Round
from devices.models import ShardLedger

pytestmark = pytest.mark.django_db
BELOW = ["locale=de_DE", "locale=en_GB", "locale=es_ES", "locale=fr_FR"]


@pytest.fixture
def split(recipe) -> dict:
    recipe["cohorts"] = ["locale"]
    recipe["privacy"]["minCohort"] = 974  # raised by the recipe: only en_US (half of 5,000) reaches it
    return recipe


def test_validation_and_the_dry_run_name_the_batches_expected_below(api, analysis, split) -> None:
    preview = api.post("/api/analyses/test.ages/recipes/validate/", split, format="json").json()
    assert preview["batches_below"] == BELOW
    dry = api.post("/api/analyses/test.ages/dry-run/", split, format="json").json()
    assert dry["batches_below"] == BELOW and dry["meets_min_cohort"] is False
    by_cohort = {row["cohort"]: row["expected"] for row in dry["cohorts"]}
    assert by_cohort["locale=en_US"] >= 974 and all(by_cohort[c] < 974 for c in BELOW)
    assert not ShardLedger.objects.exists() and not Recipe.objects.exists()


def test_starting_such_a_round_needs_a_confirmation_and_a_refusal_spends_nothing(
    api, analysis, split, django_capture_on_commit_callbacks
) -> None:
    recipe_id = api.post("/api/analyses/test.ages/recipes/", split, format="json").json()["id"]
    refused = api.post(f"/api/recipes/{recipe_id}/rounds/")
    assert refused.status_code == 400
    message = refused.json()["fields"]["confirmSmallCohorts"][0]
    assert "4 of 5 batches" in message and "locale=fr_FR" in message
    assert not Round.objects.exists() and not ShardLedger.objects.exists()
    with django_capture_on_commit_callbacks(execute=True):
        started = api.post(f"/api/recipes/{recipe_id}/rounds/", {"confirmSmallCohorts": True}, format="json")
    assert started.status_code == 202
    assert Round.objects.get().status == Round.Status.RELEASED


def test_the_page_asks_for_the_confirmation_before_it_runs(client, analyst, analysis) -> None:
    client.force_login(analyst)
    form = {
        "field": "age",
        "boundaries": "20, 30, 40, 50, 60, 70, 80",
        "cohorts": ["locale"],
        "noise": "client",
        "mechanism": "asymmetric_ohe",
        "epsilon0": "2",
        "epsilon": "1",
        "delta": "1e-6",
        "sampling_rate": "1",
        "min_cohort": "974",
        "source": "form",
        "action": "run",
    }
    page = client.post("/analyses/test.ages/", form)
    assert page.status_code == 400 and 'id="confirm-small-cohorts"' in page.content.decode()
    assert not Round.objects.exists()
    started = client.post("/analyses/test.ages/", {**form, "confirm_small_cohorts": "on"})
    assert started.status_code == 302 and Round.objects.count() == 1
