"""REST API of adaptive runs: start a discovery, poll it, pause, edit the next round, resume; bad specs."""

from __future__ import annotations

import copy

import pytest
from rest_framework.test import APIClient

from analyses.models import AdaptiveRun, Recipe, Round
from analyses.services.policy import analysis_approve, analysis_create
from tests.conftest import DISCOVERY_POLICY, DISCOVERY_SPEC

pytestmark = pytest.mark.django_db

RUNS = "/api/adaptive-runs/"

ANALYSIS, SPEC = DISCOVERY_POLICY, DISCOVERY_SPEC


@pytest.fixture
def spec() -> dict:
    return copy.deepcopy(SPEC)


@pytest.fixture
def charlie(other_analyst) -> APIClient:
    client = APIClient()
    client.force_authenticate(other_analyst)
    return client


def assert_nothing_created() -> None:
    assert AdaptiveRun.objects.count() == 0
    assert Recipe.objects.count() == 0
    assert Round.objects.count() == 0


def test_a_discovery_runs_from_start_to_finish(api, discovery, spec, django_capture_on_commit_callbacks) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        created = api.post(RUNS, spec, format="json")
    assert created.status_code == 201, created.json()
    body = created.json()
    assert created["Location"] == f"{RUNS}{body['id']}/" == body["url"]
    assert body["analysis"] == "t.discovery" and body["kind"] == "ngram_discovery"
    assert [p["epsilon"] for p in body["plan"]] == [1.0, 1.0]

    run = api.get(body["url"]).json()
    assert run["status"] == "finished", run
    assert run["current_round"] is None and run["finished_at"]
    assert [level["length"] for level in run["levels"]] == [1, 2]
    assert run["epsilon_spent"] == 2.0
    assert "2 rounds" in run["stop_reason"]
    first, second = run["levels"]
    assert first["reports"] == second["reports"] == 30_000
    assert 0 < len(first["kept"]) <= 10
    assert all(k["estimate"] > 3.0 * k["standard_error"] for k in first["kept"])
    # Round 2 asks only for the extensions of the words kept at length 1.
    kept_words = {k["ngram"] for k in first["kept"]}
    assert {k["ngram"].split()[0] for k in second["kept"]} <= kept_words
    assert Round.objects.filter(status=Round.Status.RELEASED).count() == 2


def test_the_detail_shows_the_running_round_and_its_progress(api, discovery, spec) -> None:
    created = api.post(RUNS, spec, format="json").json()  # not committed: round 1 stays queued
    run = api.get(created["url"]).json()
    assert run["status"] == "running" and run["levels"] == []
    current = run["current_round"]
    assert current["status"] == "queued" and current["id"] == Round.objects.get().pk
    assert set(current["progress"]) >= {"shards_done", "shards_total", "devices_answered", "devices_not_answering"}


def test_runs_are_listed_newest_first_and_filtered(api, discovery, spec, django_capture_on_commit_callbacks) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        first = api.post(RUNS, spec, format="json").json()["id"]
    spec["maxLength"] = 1  # what the budget has left: one round of epsilon 1
    second = api.post(RUNS, spec, format="json").json()["id"]  # not committed: stays running
    listed = api.get(RUNS).json()
    assert listed["count"] == 2 and [r["id"] for r in listed["results"]] == [second, first]
    assert [r["id"] for r in api.get(f"{RUNS}?analysis=t.discovery&status=finished").json()["results"]] == [first]
    assert [r["id"] for r in api.get(f"{RUNS}?status=running").json()["results"]] == [second]
    assert api.get(f"{RUNS}?analysis=test.ages").json()["results"] == []
    refused = api.get(f"{RUNS}?status=done")
    assert refused.status_code == 400 and "status" in refused.json()["fields"]


def set_path(document: dict, path: str, value) -> dict:
    *parents, leaf = path.split(".")
    node = document
    for key in parents:
        node = node[key]
    node[leaf] = value
    return document


@pytest.mark.parametrize(
    ("path", "value", "error_key"),
    [
        ("threshold.zScore", 0, "threshold.zScore"),
        ("maxLength", 0, "maxLength"),
        ("maxLength", 13, "maxLength"),
        ("kind", "guess", "kind"),
        ("analysis", "test.nothing", "analysis"),
        ("privacy.delta", 1.0, "privacy.delta"),
        ("privacy.epsilonPerRound", [1.0, 1.0, 1.0], "privacy.epsilonPerRound"),  # three for two rounds
        ("vocabulary", [], "vocabulary"),
        # Five rounds of epsilon 1 on a policy of 3: refused at start, before any round is sent.
        ("maxLength", 5, "privacy.epsilonPerRound"),
    ],
)
def test_bad_specs_are_refused_per_field_and_create_nothing(api, discovery, spec, path, value, error_key) -> None:
    response = api.post(RUNS, set_path(spec, path, value), format="json")
    assert response.status_code == 400
    assert error_key in response.json()["fields"], response.json()
    assert_nothing_created()


def test_a_budget_plan_beyond_the_policy_names_the_round(api, discovery, spec) -> None:
    spec["maxLength"] = 5
    messages = api.post(RUNS, spec, format="json").json()["fields"]["privacy.epsilonPerRound"]
    assert "exceeds the policy of t.discovery at round 4 of 5" in " ".join(messages)


def test_a_spec_that_is_not_an_object_is_refused(api, discovery) -> None:
    response = api.post(RUNS, [1, 2], format="json")
    assert response.status_code == 400 and "spec" in response.json()["fields"]
    assert api.post(RUNS, {"analysis": "t.discovery"}).status_code == 415  # a form, not JSON
    assert_nothing_created()


def test_another_analyst_can_neither_start_see_nor_steer_a_run(
    api, charlie, discovery, spec, django_capture_on_commit_callbacks
) -> None:
    # Someone else's analysis reads as a missing one: no hint that it exists, nothing created.
    response = charlie.post(RUNS, spec, format="json")
    assert response.status_code == 400
    assert response.json() == {
        "detail": "Invalid input: analysis.",
        "code": "invalid",
        "fields": {"analysis": ["No analysis 't.discovery'."]},
    }
    assert_nothing_created()

    created = api.post(RUNS, spec, format="json").json()
    run_url = created["url"]
    assert charlie.get(RUNS).json()["results"] == []
    assert charlie.get(run_url).status_code == 404
    assert charlie.post(f"{run_url}pause/").status_code == 404
    assert charlie.post(f"{run_url}resume/").status_code == 404
    assert charlie.put(f"{run_url}next-recipe/", {}, format="json").status_code == 404
    assert AdaptiveRun.objects.get().status == AdaptiveRun.Status.RUNNING


def test_a_baseline_in_another_analysts_analysis_is_refused(api, other_analyst, officer, discovery, spec) -> None:
    # Same fleet and the same policy, but charlie's: alice must not spend its budget.
    theirs = {**copy.deepcopy(ANALYSIS), "identifier": "charlie.static"}
    analysis_approve(analysis=analysis_create(spec=theirs, owner=other_analyst), officer=officer)
    spec["baseline"] = {"analysis": "charlie.static", "rows": 2, "columns": 256, "topK": 5}
    response = api.post(RUNS, spec, format="json")
    assert response.status_code == 400
    assert response.json()["fields"] == {"baseline.analysis": ["No analysis 'charlie.static'."]}
    assert_nothing_created()


def test_a_discovery_with_a_static_baseline_is_compared(
    api, analyst, officer, discovery, spec, django_capture_on_commit_callbacks
) -> None:
    twin = {**copy.deepcopy(ANALYSIS), "identifier": "t.discovery-static"}
    analysis_approve(analysis=analysis_create(spec=twin, owner=analyst), officer=officer)
    spec["baseline"] = {"analysis": "t.discovery-static", "rows": 2, "columns": 256, "topK": 5}
    with django_capture_on_commit_callbacks(execute=True):
        created = api.post(RUNS, spec, format="json")
    assert created.status_code == 201, created.json()
    run = api.get(created.json()["url"]).json()
    assert run["status"] == "finished", run["stop_reason"]
    comparison = run["comparison"]
    assert comparison["available"] and comparison["top_k"] == 5 and comparison["length"] == 2
    assert comparison["interactive"]["rounds"] == comparison["static"]["rounds"] == 2
    assert Round.objects.filter(recipe__analysis__identifier="t.discovery-static").count() == 2


def test_a_privacy_officer_sees_every_run(api, officer, discovery, spec) -> None:
    created = api.post(RUNS, spec, format="json").json()
    client = APIClient()
    client.force_authenticate(officer)
    assert [r["id"] for r in client.get(RUNS).json()["results"]] == [created["id"]]
    assert client.get(created["url"]).status_code == 200


def test_pause_edit_the_next_round_and_resume(api, discovery, spec, django_capture_on_commit_callbacks) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        created = api.post(RUNS, spec, format="json").json()
        paused = api.post(f"{created['url']}pause/")  # before round 1 is even dispatched
    assert paused.status_code == 200 and paused.json()["status"] == "paused"

    # Round 1 finished while paused: round 2 waits, its recipe built from level 1.
    run = api.get(created["url"]).json()
    assert run["status"] == "paused" and len(run["levels"]) == 1 and run["current_round"] is None
    waiting = run["next_recipe"]
    assert waiting["analysis"] == "t.discovery"
    recipe = waiting["recipe"]
    assert recipe["privacy"]["epsilon"] == 1.0

    # Pausing twice is a state conflict (409, as for any action the object's state forbids).
    again = api.post(f"{created['url']}pause/")
    assert again.status_code == 409 and again.json()["code"] == "conflict" and "running" in again.json()["detail"]

    # The budget split is fixed at start: another privacy is refused, and the waiting recipe kept.
    greedy = copy.deepcopy(recipe)
    greedy["privacy"]["epsilon"] = 2.0
    refused = api.put(f"{created['url']}next-recipe/", greedy, format="json")
    assert refused.status_code == 400 and "privacy" in refused.json()["fields"]
    assert api.get(created["url"]).json()["next_recipe"]["recipe"] == recipe
    not_an_object = api.put(f"{created['url']}next-recipe/", [recipe], format="json")
    assert not_an_object.status_code == 400 and "recipe" in not_an_object.json()["fields"]

    edited = copy.deepcopy(recipe)
    edited["recipeIdentifier"] = "level2-edited"
    response = api.put(f"{created['url']}next-recipe/", edited, format="json")
    assert response.status_code == 200, response.json()
    assert response.json()["next_recipe"]["recipe"]["recipeIdentifier"] == "level2-edited"

    with django_capture_on_commit_callbacks(execute=True):
        resumed = api.post(f"{created['url']}resume/")
    assert resumed.status_code == 200
    run = api.get(created["url"]).json()
    assert run["status"] == "finished" and [level["length"] for level in run["levels"]] == [1, 2]
    assert Round.objects.get(pk=run["levels"][1]["round"]).recipe.identifier == "level2-edited"

    # A finished run can be neither paused, resumed nor edited.
    for action in ("pause", "resume"):
        assert api.post(f"{created['url']}{action}/").status_code == 409
    assert api.put(f"{created['url']}next-recipe/", edited, format="json").status_code == 409


def test_the_next_round_cannot_be_edited_while_running(api, discovery, spec) -> None:
    created = api.post(RUNS, spec, format="json").json()
    response = api.put(f"{created['url']}next-recipe/", {}, format="json")
    assert response.status_code == 409 and "paused" in response.json()["detail"]
    assert api.post(f"{created['url']}resume/").status_code == 409


def test_anonymous_requests_are_refused(discovery, spec) -> None:
    anonymous = APIClient()
    assert anonymous.get(RUNS).status_code == 401
    assert anonymous.post(RUNS, spec, format="json").status_code == 401
    assert anonymous.get(f"{RUNS}1/").status_code == 401
    assert anonymous.post(f"{RUNS}1/pause/").status_code == 401
    assert_nothing_created()
