"""Issue: renaming an approved analysis reset every device's budget, an old recipe could be re-run
past the budget, and concurrent adaptive starts each saw the budget before the others.

The attacks: edit an approved analysis's identifier in the admin and approve again (devices key
their ledgers by it); POST a new round of an old recipe once the budget is spent; start four
adaptive runs at once on an analysis that allows three reports."""

from __future__ import annotations

import copy
import threading

import pytest
from django.core.exceptions import ValidationError
from django.db import connection
from rest_framework.test import APIClient

from analyses.models import AdaptiveRun, Analysis, Round
from devices.models import ShardLedger
from tests.adversarial.conftest import admin_edit
from tests.conftest import DISCOVERY_SPEC


@pytest.mark.django_db
def test_an_approved_identifier_cannot_be_changed_in_the_admin_or_the_model(officer_browser, analysis) -> None:
    response = admin_edit(officer_browser, analysis, identifier="test.renamed")
    assert response.status_code == 302  # the field is read-only: the edit of it is ignored
    officer_browser.post("/admin/analyses/analysis/", {"action": "approve", "_selected_action": [analysis.pk]})
    analysis.refresh_from_db()
    assert analysis.identifier == "test.ages" and analysis.snapshot.content["analysis"] == "test.ages"
    assert (
        'name="identifier"'
        not in officer_browser.get(f"/admin/analyses/analysis/{analysis.pk}/change/").content.decode()
    )
    analysis.identifier = "test.renamed"
    with pytest.raises(ValidationError):
        analysis.save()
    assert Analysis.objects.filter(identifier="test.ages").exists()


@pytest.mark.django_db
def test_an_old_recipe_is_not_run_again_past_the_budget(
    api, analysis, recipe, django_capture_on_commit_callbacks
) -> None:
    recipe_id = api.post("/api/analyses/test.ages/recipes/", recipe, format="json").json()["id"]
    for _ in range(2):  # the policy allows 2 reports
        with django_capture_on_commit_callbacks(execute=True):
            assert api.post(f"/api/recipes/{recipe_id}/rounds/").status_code == 202
    ledgers = sorted(row.load_state()["reports_used"].sum() for row in ShardLedger.objects.all())
    again = api.post(f"/api/recipes/{recipe_id}/rounds/")
    assert again.status_code == 400 and "used all 2 of its reports" in str(again.json()["fields"])
    assert Round.objects.count() == 2
    assert sorted(row.load_state()["reports_used"].sum() for row in ShardLedger.objects.all()) == ledgers


@pytest.mark.django_db(transaction=True)
def test_four_concurrent_adaptive_starts_on_three_reports_accept_only_what_fits(
    discovery, analyst, monkeypatch
) -> None:
    monkeypatch.setattr("pfs_base.task_queue._send", lambda task, args: None)  # admission only: no round runs
    # Two rounds each: the first run starts round 1 and reserves round 2; a second would need 2 of
    # the 1 report left. Checked one at a time, a single run fits.
    spec = {**copy.deepcopy(DISCOVERY_SPEC), "maxLength": 2}
    answers: list[int] = []
    barrier = threading.Barrier(4)

    def start() -> None:
        client = APIClient()
        client.force_authenticate(analyst)
        barrier.wait()
        try:
            answers.append(client.post("/api/adaptive-runs/", spec, format="json").status_code)
        finally:
            connection.close()

    threads = [threading.Thread(target=start) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert sorted(answers) == [201, 400, 400, 400]
    assert AdaptiveRun.objects.count() == 1 and Round.objects.count() == 1
