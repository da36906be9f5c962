"""The officer's analysis page in the admin: messages in words by field, the query class as a
stream and its fields, and an Approve button that shows the snapshot diff it sends devices."""

from __future__ import annotations

import copy

import pytest

from analyses.models import Analysis, FieldPolicy
from analyses.services.policy import analysis_create
from tests.conftest import SPEC

pytestmark = pytest.mark.django_db

CHANGE = "/admin/analyses/analysis/{pk}/change/"
APPROVE = "/admin/analyses/analysis/{pk}/approve/"


def change_post(analysis: Analysis, **changes) -> dict:
    """The change page's form as the browser posts it, with ``changes``."""
    policies = list(analysis.field_policies.all())
    data = {
        "identifier": analysis.identifier,
        "title": analysis.title,
        "fleet": analysis.fleet_id,
        "owner": analysis.owner_id,
        "stream": analysis.query_class["stream"],
        "query_fields": analysis.query_class["fields"],
        "cohort_fields": analysis.query_class.get("cohortFields", []),
        "epsilon_allowed": analysis.epsilon_allowed,
        "reports_allowed": analysis.reports_allowed,
        "delta": analysis.delta,
        "accountant": analysis.accountant,
        "min_cohort_floor": "",
        "max_buckets": "",
        "field_policies-TOTAL_FORMS": len(policies),
        "field_policies-INITIAL_FORMS": len(policies),
        "field_policies-MIN_NUM_FORMS": 0,
        "field_policies-MAX_NUM_FORMS": 1000,
    }
    for i, p in enumerate(policies):
        data.update(
            {
                f"field_policies-{i}-id": p.pk,
                f"field_policies-{i}-analysis": analysis.pk,
                f"field_policies-{i}-field": p.field,
                f"field_policies-{i}-local_epsilon": p.local_epsilon,
                f"field_policies-{i}-epsilon": p.epsilon,
                f"field_policies-{i}-reports": p.reports,
            }
        )
    data.update(changes)
    return data


@pytest.fixture
def draft(fleet, analyst):
    return analysis_create(spec=copy.deepcopy(SPEC), owner=analyst)


def test_a_zero_epsilon_is_refused_under_its_field_in_words_not_as_a_constraint(client, analysis, officer) -> None:
    client.force_login(officer)
    response = client.post(CHANGE.format(pk=analysis.pk), change_post(analysis, epsilon_allowed="0", delta="1"))
    assert response.status_code == 200
    page = response.content.decode()
    assert "Constraint" not in page and "is violated" not in page
    form = response.context["adminform"].form
    assert form.errors["epsilon_allowed"] == ["Must be greater than 0: a budget of ε 0 allows no round."]
    assert form.errors["delta"][0].startswith("Must lie strictly between 0 and 1")
    analysis.refresh_from_db()
    assert analysis.epsilon_allowed == 2.0


def test_a_zero_field_budget_is_refused_in_words(client, analysis, officer) -> None:
    client.force_login(officer)
    response = client.post(CHANGE.format(pk=analysis.pk), change_post(analysis, **{"field_policies-0-epsilon": "0"}))
    page = response.content.decode()
    assert "Must be greater than 0: a field budget of ε 0 allows no round on it." in page
    assert "Constraint" not in page
    assert FieldPolicy.objects.get(analysis=analysis).epsilon == 2.0


def test_the_query_class_is_edited_as_a_stream_and_its_fields(client, analysis, officer) -> None:
    client.force_login(officer)
    page = client.get(CHANGE.format(pk=analysis.pk)).content.decode()
    assert 'name="query_class"' not in page
    assert 'name="stream"' in page and 'name="query_fields"' in page and 'name="cohort_fields"' in page
    response = client.post(CHANGE.format(pk=analysis.pk), change_post(analysis, query_fields=["ngrams", "age"]))
    assert response.status_code == 302
    analysis.refresh_from_db()
    # Unchanged order: the approval's diff does not list a reordering as a change.
    assert analysis.query_class == {"stream": "KeyboardNGrams", "fields": ["age", "ngrams"], "cohortFields": ["locale"]}
    assert analysis.pending_changes == []


def test_a_field_outside_the_stream_is_refused_by_name(client, analysis, officer) -> None:
    client.force_login(officer)
    response = client.post(CHANGE.format(pk=analysis.pk), change_post(analysis, query_fields=["age", "perplexity"]))
    assert response.context["adminform"].form.errors["query_fields"] == [
        "Not in the KeyboardNGrams stream: perplexity. Its fields are age, locale, ngrams."
    ]
    analysis.refresh_from_db()
    assert analysis.query_class["fields"] == ["age", "ngrams"]


def test_the_approve_page_shows_the_snapshot_diff_and_another_officer_approving_sends_it(
    client, analysis, officer, other_officer
) -> None:
    client.force_login(officer)
    response = client.post(CHANGE.format(pk=analysis.pk), change_post(analysis, epsilon_allowed="3"))
    assert response.status_code == 302
    change_page = client.get(CHANGE.format(pk=analysis.pk)).content.decode()
    assert f'href="{APPROVE.format(pk=analysis.pk)}"' in change_page
    assert "budget.epsilon: 2.0 → 3.0" in change_page
    client.force_login(other_officer)  # whoever edited a change cannot approve it
    page = client.get(APPROVE.format(pk=analysis.pk)).content.decode()
    assert "budget.epsilon: 2.0 → 3.0" in page and "Approve: send devices this policy" in page
    analysis.refresh_from_db()
    assert analysis.enforced.epsilon_allowed == 2.0  # looking changes nothing
    response = client.post(APPROVE.format(pk=analysis.pk), follow=True)
    analysis.refresh_from_db()
    assert analysis.enforced.epsilon_allowed == 3.0 and analysis.pending_changes == []
    assert "Approved test.ages: devices of fleet small now enforce its policy." in response.content.decode()


def test_a_first_approval_lists_every_value_it_sends(client, draft, officer) -> None:
    client.force_login(officer)
    page = client.get(APPROVE.format(pk=draft.pk)).content.decode()
    assert "has never been approved" in page
    assert "budget.epsilon: — → 2.0" in page and "fields.age.reports: — → 2" in page


def test_approving_with_nothing_pending_sends_nothing(client, analysis, officer) -> None:
    client.force_login(officer)
    snapshot = analysis.snapshot_id
    assert "Nothing to approve" in client.get(APPROVE.format(pk=analysis.pk)).content.decode()
    client.post(APPROVE.format(pk=analysis.pk))
    analysis.refresh_from_db()
    assert analysis.snapshot_id == snapshot


def test_an_analyst_cannot_reach_the_approve_page(client, draft, analyst) -> None:
    client.force_login(analyst)
    assert client.post(APPROVE.format(pk=draft.pk)).status_code == 302  # to the admin's sign-in
    draft.refresh_from_db()
    assert not draft.is_approved


def test_an_officer_adds_an_analysis_with_the_structured_query_class(client, fleet, analyst, officer) -> None:
    client.force_login(officer)
    assert client.get("/admin/analyses/analysis/add/").status_code == 200
    data = {
        "identifier": "test.new",
        "title": "",
        "fleet": fleet.pk,
        "owner": analyst.pk,
        "stream": "ModelMetrics",
        "query_fields": ["perplexity"],
        "cohort_fields": ["locale"],
        "epsilon_allowed": "1",
        "reports_allowed": "1",
        "delta": "1e-6",
        "accountant": "basic",
        "min_cohort_floor": "",
        "max_buckets": "",
        "field_policies-TOTAL_FORMS": 1,
        "field_policies-INITIAL_FORMS": 0,
        "field_policies-MIN_NUM_FORMS": 0,
        "field_policies-MAX_NUM_FORMS": 1000,
        "field_policies-0-field": "perplexity",
        "field_policies-0-local_epsilon": "4",
        "field_policies-0-epsilon": "1",
        "field_policies-0-reports": "1",
    }
    response = client.post("/admin/analyses/analysis/add/", data)
    assert response.status_code == 302, response.content.decode()[:3000]
    created = Analysis.objects.get(identifier="test.new")
    assert created.query_class == {"stream": "ModelMetrics", "fields": ["perplexity"], "cohortFields": ["locale"]}
    assert not created.is_approved
    # Adding is an edit too: its officer cannot approve it (four eyes), another can.
    assert client.post(APPROVE.format(pk=created.pk)).status_code == 403
    created.refresh_from_db()
    assert not created.is_approved


def test_a_field_policy_for_a_field_queries_cannot_read_is_refused_by_name(client, analysis, officer) -> None:
    client.force_login(officer)
    response = client.post(CHANGE.format(pk=analysis.pk), change_post(analysis, query_fields=["ngrams"]))
    assert response.status_code == 200
    assert "Not a field queries may read (ngrams): tick it above, or delete this policy." in response.content.decode()
    analysis.refresh_from_db()
    assert analysis.query_class["fields"] == ["age", "ngrams"]
