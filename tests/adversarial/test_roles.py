"""Issue: roles were inconsistent. The officer could Run an analyst's analysis (spending its
budget; the audit said "officer") but got a blank 403 when cancelling the analyst's round.

Decided (docs/roles.md): the analysis's owner spends and releases (run, resume, edit the next
round, close a collection); a privacy officer approves policy and may stop rounds (cancel, pause),
never spend. Pages, the API and the CLI ask the same two checks (analyses.rules.roles); a refused page
is a 403 that says why."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from analyses.models import Round
from devices.models import ShardLedger

pytestmark = pytest.mark.django_db


@pytest.fixture
def officer_api(officer) -> APIClient:
    client = APIClient()
    client.force_authenticate(officer)
    return client


def test_an_officer_cannot_run_an_analysts_analysis_from_the_page(officer_browser, analysis) -> None:
    form = {
        "field": "age",
        "boundaries": "20, 30, 40",
        "noise": "client",
        "mechanism": "asymmetric_ohe",
        "epsilon0": "3",
        "epsilon": "1",
        "delta": "1e-6",
        "sampling_rate": "1",
        "source": "form",
        "action": "run",
    }
    page = officer_browser.get("/analyses/test.ages/").content.decode()
    assert 'id="run-hint"' in page  # the Run button says why it is off
    response = officer_browser.post("/analyses/test.ages/", form)
    assert response.status_code == 400 and "Only alice" in response.content.decode()
    assert not Round.objects.exists() and not ShardLedger.objects.exists()


def test_an_officer_cannot_run_it_over_the_api(officer_api, api, analysis, recipe) -> None:
    recipe_id = api.post("/api/analyses/test.ages/recipes/", recipe, format="json").json()["id"]
    refused = officer_api.post(f"/api/recipes/{recipe_id}/rounds/")
    assert refused.status_code == 403 and "Only alice" in refused.json()["detail"]
    assert not Round.objects.exists()


def test_an_officer_may_cancel_an_analysts_round_on_the_page_and_the_api(
    officer_browser, officer_api, api, analysis, recipe
) -> None:
    recipe_id = api.post("/api/analyses/test.ages/recipes/", recipe, format="json").json()["id"]
    first = api.post(f"/api/recipes/{recipe_id}/rounds/").json()["id"]
    assert officer_browser.post(f"/rounds/{first}/cancel/").status_code == 302
    second = api.post(f"/api/recipes/{recipe_id}/rounds/").json()["id"]
    assert officer_api.post(f"/api/rounds/{second}/cancel/").status_code == 200
    assert set(Round.objects.values_list("status", flat=True)) == {Round.Status.CANCELLED}


def test_a_refused_page_action_is_a_403_that_says_why(client, other_analyst, officer, analysis, api, recipe) -> None:
    # An analyst who does not own the analysis cannot even see it (404); an officer may not close a
    # collection (it releases): a 403 page with the reason, not a blank one.
    recipe_id = api.post("/api/analyses/test.ages/recipes/", recipe, format="json").json()["id"]
    round_id = api.post(f"/api/recipes/{recipe_id}/rounds/").json()["id"]
    client.force_login(officer)
    response = client.post(f"/rounds/{round_id}/close/")
    assert response.status_code == 403
    assert 'id="forbidden-reason"' in response.content.decode() and "Only alice" in response.content.decode()
    client.force_login(other_analyst)
    assert client.post(f"/rounds/{round_id}/cancel/").status_code == 404
