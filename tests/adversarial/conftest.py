"""Every attack the project has faced, performed as it was: through the admin, the REST API, the
pages and the CLI. Each file is one theme; docs/threats.md lists every attack with its test."""

from __future__ import annotations

import pytest
from django.test import Client

from analyses.models import Analysis


def admin_edit(client, analysis: Analysis, **changes) -> object:
    """POST the analysis's admin change form as a privacy officer's browser would, with ``changes``
    (model field names; ``fields`` maps a field policy's name to its changed values)."""
    field_changes = changes.pop("fields", {})
    data = {
        "title": analysis.title,
        "fleet": analysis.fleet_id,
        "owner": analysis.owner_id,
        # The query class as the admin edits it: a stream and its fields (analyses/forms/admin.py).
        "stream": analysis.query_class["stream"],
        "query_fields": analysis.query_class["fields"],
        "cohort_fields": analysis.query_class.get("cohortFields", []),
        "epsilon_allowed": analysis.epsilon_allowed,
        "reports_allowed": analysis.reports_allowed,
        "delta": analysis.delta,
        "accountant": analysis.accountant,
        "min_cohort_floor": analysis.min_cohort_floor or "",
        "max_buckets": analysis.max_buckets or "",
        "identifier": analysis.identifier,
    }
    data.update(changes)
    policies = list(analysis.field_policies.all())
    data.update(
        {
            "field_policies-TOTAL_FORMS": len(policies),
            "field_policies-INITIAL_FORMS": len(policies),
            "field_policies-MIN_NUM_FORMS": 0,
            "field_policies-MAX_NUM_FORMS": 1000,
        }
    )
    for i, policy in enumerate(policies):
        values = {
            "id": policy.pk,
            "analysis": analysis.pk,
            "field": policy.field,
            "local_epsilon": policy.local_epsilon,
            "epsilon": policy.epsilon,
            "reports": policy.reports,
            **field_changes.get(policy.field, {}),
        }
        if values.pop("aggregator_noise", policy.aggregator_noise):
            values["aggregator_noise"] = "on"
        data.update({f"field_policies-{i}-{k}": v for k, v in values.items()})
    return client.post(f"/admin/analyses/analysis/{analysis.pk}/change/", data)


@pytest.fixture
def officer_browser(client, officer):
    client.force_login(officer)
    return client


# The real-device fixtures (a registered fleet, its approved analysis, an open round), shared with
# the attacks on the device protocol.
from tests.unit.test_device_http import central_round, phones, phones_analysis  # noqa: E402, F401


def admin_approve(officer, analysis: Analysis) -> object:
    """Approve ``analysis`` by the admin list's action, as ``officer`` in a browser of their own
    (whoever edited a change cannot approve it: another officer does)."""
    browser = Client()
    browser.force_login(officer)
    return browser.post("/admin/analyses/analysis/", {"action": "approve", "_selected_action": [analysis.pk]})
