"""Issue: an officer's unapproved policy edit leaked into what analysts see and what the server checks.

The attack: the officer raises the analysis budget in the admin and does not approve. Before the
fix the pages, the editor's count of rounds that fit and the server's pre-check used the edit;
a round then started that every device refused (they enforce the approved snapshot).

Issue 31, item 9: the same officer could edit and approve; an edit could not be rejected (it
stayed, unapproved); the history showed neither old → new values nor approvals; "changed
successfully" did not say the change was not in force."""

from __future__ import annotations

import pytest
from django.test import Client

from analyses.models import Analysis, PolicyApproval, PolicyEdit, PolicyRejection, Recipe, Round
from devices.models import Enrollment, PolicySnapshot, ShardLedger
from tests.adversarial.conftest import admin_approve, admin_edit

pytestmark = pytest.mark.django_db


def _edit_budget_without_approving(officer_browser, analysis) -> None:
    response = admin_edit(
        officer_browser,
        analysis,
        epsilon_allowed=9.0,
        reports_allowed=5,
        fields={"age": {"epsilon": 9.0, "reports": 5}},
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    analysis.refresh_from_db()
    assert analysis.epsilon_allowed == 9.0 and analysis.snapshot.content["budget"]["epsilon"] == 2.0


def test_the_analyst_sees_the_approved_budget_and_the_edit_apart_as_pending(officer_browser, api, analysis) -> None:
    _edit_budget_without_approving(officer_browser, analysis)
    body = api.get("/api/analyses/test.ages/").json()
    assert (body["epsilon_allowed"], body["reports_allowed"]) == (2.0, 2)
    assert body["field_policies"]["age"]["epsilon"] == 2.0
    assert "budget.epsilon: 2.0 → 9.0" in body["pending_changes"]
    page = officer_browser.get("/analyses/test.ages/").content.decode()
    assert 'id="pending-policy"' in page and "Pending, not enforced" in page
    assert "/ 2</td>" in page  # reports used / allowed: the approved 2, not the edited 5


def test_the_server_refuses_what_devices_would_refuse_whatever_the_edit_says(
    officer_browser, api, analysis, recipe, django_capture_on_commit_callbacks
) -> None:
    _edit_budget_without_approving(officer_browser, analysis)
    for name in ("one", "two"):  # the approved policy allows 2 reports
        created = api.post("/api/analyses/test.ages/recipes/", {**recipe, "recipeIdentifier": name}, format="json")
        with django_capture_on_commit_callbacks(execute=True):
            assert api.post(f"/api/recipes/{created.json()['id']}/rounds/").status_code == 202
    rounds, ledgers = (
        Round.objects.count(),
        [row.load_state()["reports_used"].tolist() for row in ShardLedger.objects.all()],
    )
    preview = api.post(
        "/api/analyses/test.ages/recipes/validate/", {**recipe, "recipeIdentifier": "three"}, format="json"
    )
    assert preview.status_code == 400 and "used all 2 of its reports" in str(preview.json()["fields"])
    third = api.post("/api/analyses/test.ages/recipes/", {**recipe, "recipeIdentifier": "three"}, format="json")
    assert third.status_code == 400
    assert Round.objects.count() == rounds and not Recipe.objects.filter(identifier="three").exists()
    assert [row.load_state()["reports_used"].tolist() for row in ShardLedger.objects.all()] == ledgers


def test_an_approved_edit_takes_effect(officer_browser, other_officer, api, analysis) -> None:
    _edit_budget_without_approving(officer_browser, analysis)
    admin_approve(other_officer, analysis)
    body = api.get("/api/analyses/test.ages/").json()
    assert (body["epsilon_allowed"], body["reports_allowed"], body["pending_changes"]) == (9.0, 5, [])


def test_a_round_no_batch_of_which_reaches_its_cohort_is_withheld_not_released(
    api, analysis, recipe, client, analyst, django_capture_on_commit_callbacks
) -> None:
    # Split by locale with a minimum cohort above every locale: confirmed, so it runs; nothing is released.
    recipe.update(cohorts=["locale"])
    recipe["privacy"]["minCohort"] = 4_000
    created = api.post("/api/analyses/test.ages/recipes/", recipe, format="json").json()
    with django_capture_on_commit_callbacks(execute=True):
        started = api.post(f"/api/recipes/{created['id']}/rounds/", {"confirmSmallCohorts": True}, format="json")
    round_ = Round.objects.get(pk=started.json()["id"])
    assert round_.status == Round.Status.WITHHELD and "nothing released" in round_.error
    client.force_login(analyst)
    page = client.get(f"/rounds/{round_.pk}/").content.decode()
    assert 'id="withheld"' in page and "plotly" not in page  # no chart on meaningless axes
    assert api.get(f"/api/rounds/{round_.pk}/release/").status_code != 200
    burndown = api.get("/api/analyses/test.ages/budget/").json()["scopes"][0]
    assert burndown["reports_used"] == 1 and burndown["reports_spent_by_devices"] == 1  # devices did answer


def test_budget_views_show_what_devices_spent_apart_from_what_was_requested(api, analysis, recipe) -> None:
    # Started and cancelled before any shard ran: requested in full, spent by no device.
    created = api.post("/api/analyses/test.ages/recipes/", recipe, format="json").json()
    round_id = api.post(f"/api/recipes/{created['id']}/rounds/").json()["id"]
    assert api.post(f"/api/rounds/{round_id}/cancel/").status_code == 200
    scope = api.get("/api/analyses/test.ages/budget/").json()["scopes"][0]
    assert (scope["epsilon_used"], scope["reports_used"]) == (1.0, 1)
    assert (scope["epsilon_spent_by_devices"], scope["reports_spent_by_devices"]) == (0.0, 0)
    assert Analysis.objects.get(pk=analysis.pk).snapshot is not None


APPROVE = "/admin/analyses/analysis/{pk}/approve/"
REJECT = "/admin/analyses/analysis/{pk}/reject/"


def _devices_hold(analysis) -> tuple:
    """What devices enforce: the analysis's snapshot, the fleet's enrollment, every snapshot stored."""
    analysis.refresh_from_db()
    enrollment = Enrollment.objects.get(fleet=analysis.fleet, analysis_identifier=analysis.identifier)
    return analysis.snapshot_id, enrollment.snapshot_id, PolicySnapshot.objects.count(), PolicyApproval.objects.count()


def test_the_officer_who_edited_a_change_cannot_approve_it_another_can(
    officer_browser, other_officer, api, analysis
) -> None:
    _edit_budget_without_approving(officer_browser, analysis)
    held = _devices_hold(analysis)
    page = officer_browser.get(APPROVE.format(pk=analysis.pk)).content.decode()
    assert 'id="own-change"' in page and "Approve: send devices this policy" not in page
    # The button is gone, and the server refuses the POST all the same: by the page and by the action.
    refused = officer_browser.post(APPROVE.format(pk=analysis.pk))
    assert refused.status_code == 403
    assert "You edited this change, so you cannot approve it: another privacy officer must." in refused.content.decode()
    action = officer_browser.post(
        "/admin/analyses/analysis/", {"action": "approve", "_selected_action": [analysis.pk]}, follow=True
    )
    assert "Not approved test.ages: You edited this change" in action.content.decode()
    assert _devices_hold(analysis) == held
    assert api.get("/api/analyses/test.ages/").json()["epsilon_allowed"] == 2.0
    assert PolicyEdit.objects.get().outcome == PolicyEdit.Outcome.PENDING

    assert admin_approve(other_officer, analysis).status_code == 302
    analysis.refresh_from_db()
    assert analysis.approved_by == other_officer and analysis.enforced.epsilon_allowed == 9.0
    assert PolicyEdit.objects.get().outcome == PolicyEdit.Outcome.APPROVED


def test_saving_an_edit_says_it_is_not_in_force_until_approved(officer_browser, analysis) -> None:
    response = admin_edit(officer_browser, analysis, epsilon_allowed=3.0)
    page = officer_browser.get(response["Location"]).content.decode()
    assert "was changed successfully. Not in force until approved" in page
    change_page = officer_browser.get(f"/admin/analyses/analysis/{analysis.pk}/change/").content.decode()
    assert "Edited by <strong>olivia</strong>" in change_page  # who must not approve it


def test_a_rejection_without_a_reason_is_refused_by_its_field(officer_browser, other_officer, analysis) -> None:
    _edit_budget_without_approving(officer_browser, analysis)
    browser = Client()
    browser.force_login(other_officer)
    response = browser.post(REJECT.format(pk=analysis.pk), {"reason": "   "})
    assert response.status_code == 400
    assert response.context["reject_form"].errors["reason"] == [
        "Say why you reject it: the reason is recorded and shown in the analysis's history."
    ]
    analysis.refresh_from_db()
    assert analysis.epsilon_allowed == 9.0 and not PolicyRejection.objects.exists()
    assert PolicyEdit.objects.get().outcome == PolicyEdit.Outcome.PENDING


def test_a_rejection_discards_the_edit_and_devices_keep_their_snapshot(
    officer_browser, other_officer, api, analysis
) -> None:
    _edit_budget_without_approving(officer_browser, analysis)
    held = _devices_hold(analysis)
    browser = Client()
    browser.force_login(other_officer)
    response = browser.post(REJECT.format(pk=analysis.pk), {"reason": "Nine is past what the study agreed."})
    assert response.status_code == 302
    assert _devices_hold(analysis) == held
    assert (analysis.epsilon_allowed, analysis.reports_allowed) == (2.0, 2)
    assert (analysis.field_policies.get(field="age").epsilon, analysis.field_policies.get(field="age").reports) == (
        2.0,
        2,
    )
    assert analysis.pending_changes == [] and api.get("/api/analyses/test.ages/").json()["pending_changes"] == []
    assert PolicyEdit.objects.get().outcome == PolicyEdit.Outcome.REJECTED
    history = browser.get(f"/admin/analyses/analysis/{analysis.pk}/history/").content.decode()
    assert "Reason: Nine is past what the study agreed." in history and "budget.epsilon: 9.0 → 2.0" not in history
    rejected = history[history.index('class="policy-rejected"') :]
    assert "oscar" in rejected[:200] and "budget.epsilon: 2.0 → 9.0" in rejected


def test_the_history_shows_every_edit_old_to_new_and_who_approved_when(
    officer_browser, other_officer, analysis
) -> None:
    _edit_budget_without_approving(officer_browser, analysis)
    admin_approve(other_officer, analysis)
    analysis.refresh_from_db()
    history = officer_browser.get(f"/admin/analyses/analysis/{analysis.pk}/history/").content.decode()
    approved = history[history.index('class="policy-approved"') :]
    assert f"{analysis.approved_at:%Y-%m-%d %H:%M}" in approved[:200] and "oscar" in approved[:200]
    assert "budget.epsilon: 2.0 → 9.0" in approved and "fields.age.reports: 2 → 5" in approved
    edited = history[history.index('class="policy-edited"') :]
    assert "olivia" in edited[:200] and "budget.reports: 2 → 5" in edited and "Approved" in edited
    # Django's own log below says the values too, not only "Changed epsilon allowed".
    log = history[history.index('id="change-history"') :]
    assert "budget.epsilon: 2.0 → 9.0" in log and "Approved: devices enforce snapshot" in log


def test_an_approval_from_a_page_showing_an_older_diff_approves_nothing(
    officer_browser, other_officer, analysis
) -> None:
    _edit_budget_without_approving(officer_browser, analysis)
    browser = Client()
    browser.force_login(other_officer)
    reviewed = browser.get(APPROVE.format(pk=analysis.pk)).context["reviewed"]
    admin_edit(officer_browser, Analysis.objects.get(pk=analysis.pk), epsilon_allowed=20.0)  # saved meanwhile
    held = _devices_hold(analysis)
    response = browser.post(APPROVE.format(pk=analysis.pk), {"reviewed": reviewed})
    assert response.status_code == 409 and "edited since you opened this page" in response.content.decode()
    assert _devices_hold(analysis) == held
    assert browser.post(APPROVE.format(pk=analysis.pk), {"reviewed": response.context["reviewed"]}).status_code == 302
    analysis.refresh_from_db()
    assert analysis.enforced.epsilon_allowed == 20.0
