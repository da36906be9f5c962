"""An analyst trying to get around the policy: each attempt is refused, logged, and changes nothing.

The devices' side of the same attacks (a task outside the query class, over budget, under another
snapshot) is in test_device_checks.py and test_rounds.py; malicious reports in
test_report_protocol.py; a sybil flood in test_batch_rules.py (docs/threats.md maps them all).
"""

from __future__ import annotations

import copy
import json
import logging

import pytest
from rest_framework.test import APIClient

from analyses.models import Recipe, Round
from devices.models import ShardLedger
from pfs_base.logs import JsonFormatter

pytestmark = pytest.mark.django_db


def audit_events(caplog) -> list[dict]:
    """The audit lines as a log pipeline reads them: each one JSON, the event's fields at the top."""
    return [json.loads(JsonFormatter().format(r)) for r in caplog.records if r.name == "pfs.audit"]


def field_messages(response) -> dict:
    body = response.json()
    return body.get("fields", body)


def with_privacy(recipe: dict, **privacy) -> dict:
    changed = copy.deepcopy(recipe)
    changed["privacy"].update(privacy)
    return changed


def with_query(recipe: dict, query: str) -> dict:
    return {**copy.deepcopy(recipe), "query": query}


@pytest.mark.parametrize(
    ("attempt", "key", "says"),
    [
        # The analysis allows epsilon 2 in all; one recipe asking for 3 exceeds it at once.
        (lambda r: with_privacy(r, epsilon=3.0, epsilon0=4.0), "privacy.epsilon", "budget"),
        # The field age caps epsilon0 at 4.
        (lambda r: with_privacy(r, epsilon0=6.0), "privacy.epsilon0", "4"),
        # Theorem 3.1 needs 2,935 reports for these parameters; asking for 100 is asking for less privacy.
        (lambda r: with_privacy(r, minCohort=100), "privacy.minCohort", "never lower"),
        # Outside the approved query class: another stream, and a field the class does not list.
        (lambda r: with_query(r, "select perplexity from ModelMetrics"), "query", "query class"),
        # locale may group the answers (a cohort field) but is not a field the class may select.
        (lambda r: with_query(r, "select locale from KeyboardNGrams"), "query", "query class"),
    ],
    ids=["exceed-budget", "exceed-local-epsilon", "lower-min-cohort", "other-stream", "cohort-field-as-data"],
)
def test_a_recipe_beyond_the_policy_is_refused_logged_and_changes_nothing(
    api, analysis, recipe, caplog, attempt, key, says
) -> None:
    caplog.set_level(logging.WARNING, logger="pfs.audit")
    response = api.post("/api/analyses/test.ages/recipes/", attempt(recipe), format="json")
    assert response.status_code == 400
    messages = field_messages(response)
    assert key in messages, messages
    assert says in " ".join(messages[key])
    [event] = audit_events(caplog)
    assert (event["action"], event["user"], event["target"]) == ("recipe.create", "alice", "test.ages")
    assert key in event["reasons"]
    assert not Recipe.objects.exists() and not Round.objects.exists() and not ShardLedger.objects.exists()


def test_reading_another_analysts_analysis_round_or_release_is_a_logged_404(
    api, analysis, recipe, other_analyst, caplog, django_capture_on_commit_callbacks
) -> None:
    recipe_id = api.post("/api/analyses/test.ages/recipes/", recipe, format="json").json()["id"]
    with django_capture_on_commit_callbacks(execute=True):
        round_id = api.post(f"/api/recipes/{recipe_id}/rounds/").json()["id"]
    intruder = APIClient()
    intruder.force_authenticate(other_analyst)
    caplog.set_level(logging.WARNING, logger="pfs.audit")
    for url in (
        "/api/analyses/test.ages/",
        f"/api/recipes/{recipe_id}/",
        f"/api/rounds/{round_id}/",
        f"/api/rounds/{round_id}/release/",
    ):
        assert intruder.get(url).status_code == 404, url
    # Someone else's and nonexistent look the same from outside; only the first is logged.
    assert intruder.get("/api/rounds/999999/").status_code == 404
    events = audit_events(caplog)
    assert [e["target"] for e in events] == [
        "analysis test.ages",
        f"recipe {recipe_id}",
        f"round {round_id}",
        f"round {round_id}",
    ]
    assert {(e["action"], e["user"], e["reasons"]) for e in events} == {("read", "charlie", "owned by another analyst")}


def test_running_another_analysts_recipe_is_refused_and_spends_nothing(
    api, analysis, recipe, other_analyst, caplog
) -> None:
    recipe_id = api.post("/api/analyses/test.ages/recipes/", recipe, format="json").json()["id"]
    intruder = APIClient()
    intruder.force_authenticate(other_analyst)
    caplog.set_level(logging.WARNING, logger="pfs.audit")
    assert intruder.post(f"/api/recipes/{recipe_id}/rounds/").status_code == 404
    assert intruder.post("/api/analyses/test.ages/recipes/", recipe, format="json").status_code == 404
    assert not Round.objects.exists() and not ShardLedger.objects.exists()
    assert [e["target"] for e in audit_events(caplog)] == [f"recipe {recipe_id}", "analysis test.ages"]


def test_a_round_of_an_unapproved_analysis_is_refused_and_logged(api, analysis, recipe, caplog) -> None:
    recipe_id = api.post("/api/analyses/test.ages/recipes/", recipe, format="json").json()["id"]
    analysis.status = analysis.Status.DRAFT
    analysis.save(update_fields=["status"])
    caplog.set_level(logging.WARNING, logger="pfs.audit")
    response = api.post(f"/api/recipes/{recipe_id}/rounds/")
    assert response.status_code in (403, 409)
    assert [(e["action"], e["reasons"]) for e in audit_events(caplog)] == [("round.start", "not approved")]
    assert not Round.objects.exists()
