"""The privacy officer's admin: edit budgets, approve; devices enforce the snapshot taken at approval."""

from __future__ import annotations

import copy

import pytest

from aggregation.models import CollectionRules, ReportRejection
from analyses.models import Analysis, FieldPolicy
from analyses.services.policy import analysis_create
from tests.conftest import SPEC

pytestmark = pytest.mark.django_db


def test_officer_approves_an_analysis_from_the_admin(client, fleet, analyst, officer) -> None:
    draft = analysis_create(spec=copy.deepcopy(SPEC), owner=analyst)
    client.force_login(officer)
    assert client.get(f"/admin/analyses/analysis/{draft.pk}/change/").status_code == 200
    response = client.post("/admin/analyses/analysis/", {"action": "approve", "_selected_action": [draft.pk]})
    assert response.status_code == 302
    draft.refresh_from_db()
    assert draft.is_approved and draft.approved_by == officer
    # A spec naming no accountant gets the default: the tightest composition.
    assert draft.snapshot.content["budget"] == {"epsilon": 2.0, "reports": 2, "delta": 1e-6, "accountant": "tightest"}


def test_an_analyst_cannot_use_the_admin(client, analysis, analyst) -> None:
    client.force_login(analyst)
    assert client.get("/admin/analyses/analysis/").status_code == 302


def test_a_policy_edit_after_approval_does_not_change_what_devices_enforce(analysis) -> None:
    FieldPolicy.objects.filter(analysis=analysis, field="age").update(epsilon=50.0)
    Analysis.objects.filter(pk=analysis.pk).update(epsilon_allowed=50.0)
    analysis.refresh_from_db()
    assert analysis.snapshot.content["fields"]["age"]["epsilon"] == 2.0
    assert analysis.snapshot.content["budget"]["epsilon"] == 2.0


def test_operators_read_the_aggregators_rules_and_rejections(client, django_user_model) -> None:
    CollectionRules.objects.create(key="k", length=8, min_cohort=3, weight_bound=4)
    ReportRejection.objects.create(role="leader", collection_key="k", reason="token_reused", count=2)
    # The helper's rejections as it answered them in its jobs, kept by the leader.
    ReportRejection.objects.create(role="helper", collection_key="k", reason="proof_invalid", count=1)
    admin_user = django_user_model.objects.create_superuser("root", password="root-password")
    client.force_login(admin_user)
    page = client.get("/admin/aggregation/reportrejection/").content
    assert b"token_reused" in page and b"proof_invalid" in page
    # The leader's admin has no page of the helper's store: its process cannot open it.
    assert client.get("/admin/aggregation/helperreportrejection/").status_code == 404
