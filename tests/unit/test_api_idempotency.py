"""Idempotency-Key on the requests that start rounds: a repeat replays, another body is refused, keys are per user."""

from __future__ import annotations

import copy

import pytest
from rest_framework.test import APIClient

from analyses.models import AdaptiveRun, IdempotentRequest, Recipe, Round
from analyses.rules import idempotency
from analyses.rules.idempotency import Answer, idempotent_answer
from devices.services import ledger_totals
from tests.conftest import DISCOVERY_SPEC

pytestmark = pytest.mark.django_db


@pytest.fixture
def recipe_id(api, analysis, recipe) -> int:
    created = api.post("/api/analyses/test.ages/recipes/", recipe, format="json")
    assert created.status_code == 201
    return created.json()["id"]


def start(client, recipe_id: int, key: str | None, body=None):
    headers = {"HTTP_IDEMPOTENCY_KEY": key} if key is not None else {}
    return client.post(f"/api/recipes/{recipe_id}/rounds/", body, format="json", **headers)


def test_a_repeated_key_replays_the_first_round_and_starts_no_other(
    api, analysis, recipe_id, django_capture_on_commit_callbacks
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        first = start(api, recipe_id, "start-ages-1")
        second = start(api, recipe_id, "start-ages-1")
    assert first.status_code == second.status_code == 202
    assert second.json() == first.json() and second.json()["id"] == Round.objects.get().pk
    assert second["Idempotent-Replayed"] == "true" and "Idempotent-Replayed" not in first
    # One round dispatched, so its devices spend budget once.
    assert ledger_totals(fleet=analysis.fleet, analysis_identifier="test.ages")["max:reports_used"] == 1
    assert Round.objects.get().status == Round.Status.RELEASED


def test_without_a_key_every_request_starts_a_round(api, recipe_id) -> None:
    start(api, recipe_id, None)
    start(api, recipe_id, None)
    assert Round.objects.count() == 2 and not IdempotentRequest.objects.exists()


def test_the_same_key_with_another_body_or_endpoint_is_a_422(api, analysis, recipe, recipe_id) -> None:
    assert start(api, recipe_id, "k1").status_code == 202
    other_body = start(api, recipe_id, "k1", {"confirmSmallCohorts": True})  # a valid body, another one
    assert other_body.status_code == 422 and other_body.json()["code"] == "idempotency_conflict"
    recipe["recipeIdentifier"] = "ages-2"
    other_recipe = api.post("/api/analyses/test.ages/recipes/", recipe, format="json").json()["id"]
    other_endpoint = start(api, other_recipe, "k1")
    assert other_endpoint.status_code == 422 and other_endpoint.json()["code"] == "idempotency_conflict"
    assert Round.objects.count() == 1


def test_keys_are_per_user(api, officer, recipe_id) -> None:
    olivia = APIClient()  # a privacy officer sees every recipe (but may not run an analyst's)
    olivia.force_authenticate(officer)
    assert start(api, recipe_id, "shared-key").status_code == 202
    # Her key is hers: she is not answered with alice's stored round, she is asked on her own.
    assert start(olivia, recipe_id, "shared-key").status_code == 403
    assert Round.objects.count() == 1


@pytest.mark.parametrize("key", ["", "x" * 256, "tab\there", "é"])
def test_a_malformed_key_is_refused_by_field(api, recipe_id, key) -> None:
    response = api.post(f"/api/recipes/{recipe_id}/rounds/", HTTP_IDEMPOTENCY_KEY=key.encode().decode("latin-1"))
    assert response.status_code == 400 and list(response.json()["fields"]) == ["Idempotency-Key"]
    assert Round.objects.count() == 0


def test_an_adaptive_run_started_twice_with_a_key_is_one_run(api, discovery) -> None:
    spec = copy.deepcopy(DISCOVERY_SPEC)
    first = api.post("/api/adaptive-runs/", spec, format="json", HTTP_IDEMPOTENCY_KEY="discover-1")
    second = api.post("/api/adaptive-runs/", spec, format="json", HTTP_IDEMPOTENCY_KEY="discover-1")
    assert first.status_code == second.status_code == 201
    assert second.json()["id"] == first.json()["id"] and second["Location"] == first["Location"]
    assert second["Idempotent-Replayed"] == "true"
    assert AdaptiveRun.objects.count() == 1 and Round.objects.count() == 1
    # Body keys in another order are the same request.
    reordered = dict(reversed(list(spec.items())))
    assert api.post("/api/adaptive-runs/", reordered, format="json", HTTP_IDEMPOTENCY_KEY="discover-1").json() == (
        first.json()
    )


def test_a_refused_request_does_not_use_up_its_key(api, discovery) -> None:
    spec = copy.deepcopy(DISCOVERY_SPEC)
    bad = {**spec, "maxLength": 0}
    refused = api.post("/api/adaptive-runs/", bad, format="json", HTTP_IDEMPOTENCY_KEY="try-1")
    assert refused.status_code == 400 and not IdempotentRequest.objects.exists()
    started = api.post("/api/adaptive-runs/", spec, format="json", HTTP_IDEMPOTENCY_KEY="try-1")
    assert started.status_code == 201 and AdaptiveRun.objects.count() == 1


def test_a_concurrent_duplicate_reads_the_winners_answer_and_does_no_work(analyst, monkeypatch) -> None:
    # The winner committed between this request's lookup and its insert: the unique constraint
    # refuses the insert, the work rolls back with it, and the winner's answer is replayed.
    IdempotentRequest.objects.create(
        user=analyst,
        key="race",
        endpoint="round-start:recipe=1",
        request_digest=idempotency.request_digest({}),
        response_status=202,
        response_body={"id": 41},
    )
    lookups = iter([None])
    real_stored = idempotency._stored
    monkeypatch.setattr(idempotency, "_stored", lambda user, key: next(lookups, real_stored(user, key)))
    calls = []

    answer = idempotent_answer(
        user=analyst,
        key="race",
        endpoint="round-start:recipe=1",
        payload={},
        respond=lambda: calls.append(1) or Answer(202, {"id": 42}),
    )
    assert answer == Answer(202, {"id": 41}, {}, replayed=True)
    assert calls == [] and IdempotentRequest.objects.count() == 1


def test_a_recipe_store_repeated_with_its_key_answers_the_stored_recipe(api, analysis, recipe) -> None:
    # A notebook cell re-run, or a retry after a lost answer: without the key the second store is
    # refused (the recipe identifier exists); with it the first answer comes back.
    headers = {"HTTP_IDEMPOTENCY_KEY": "store-ages"}
    first = api.post("/api/analyses/test.ages/recipes/", recipe, format="json", **headers)
    again = api.post("/api/analyses/test.ages/recipes/", recipe, format="json", **headers)
    assert first.status_code == again.status_code == 201
    assert again.json() == first.json() and again["Idempotent-Replayed"] == "true"
    assert Recipe.objects.count() == 1
    unkeyed = api.post("/api/analyses/test.ages/recipes/", recipe, format="json")
    assert unkeyed.status_code == 400 and "recipeIdentifier" in unkeyed.json()["fields"]


def test_the_stored_recipes_are_listed_newest_first_and_only_to_their_owner(
    api, analysis, recipe, other_analyst
) -> None:
    for identifier in ("first", "second"):
        assert (
            api.post(
                "/api/analyses/test.ages/recipes/", {**recipe, "recipeIdentifier": identifier}, format="json"
            ).status_code
            == 201
        )
    listed = api.get("/api/analyses/test.ages/recipes/").json()
    assert [r["identifier"] for r in listed["results"]] == ["second", "first"] and listed["count"] == 2
    intruder = APIClient()
    intruder.force_authenticate(other_analyst)
    assert intruder.get("/api/analyses/test.ages/recipes/").status_code == 404
