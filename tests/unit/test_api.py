"""REST API: create a recipe, start a round, poll it, fetch the release; permissions; bad input."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest
from rest_framework.test import APIClient

from analyses.models import Recipe, Round
from analyses.services import rounds
from devices.models import ShardLedger, ShardRun
from privacy.enforced_cohort import min_cohort_enforced
from tests.conftest import FLEET_SIZE

pytestmark = pytest.mark.django_db


def start_round(api, recipe, django_capture_on_commit_callbacks):
    created = api.post("/api/analyses/test.ages/recipes/", recipe, format="json")
    assert created.status_code == 201, created.json()
    with django_capture_on_commit_callbacks(execute=True):
        started = api.post(f"/api/recipes/{created.json()['id']}/rounds/")
    assert started.status_code == 202
    return started.json()["id"]


def test_recipe_round_and_release_over_the_api(api, analysis, recipe, django_capture_on_commit_callbacks) -> None:
    round_id = start_round(api, recipe, django_capture_on_commit_callbacks)
    polled = api.get(f"/api/rounds/{round_id}/").json()
    assert polled["status"] == "released"
    assert polled["progress"]["shards_done"] == polled["progress"]["shards_total"] == 5
    release = api.get(polled["release_url"]).json()
    assert [b["label"] for b in release["buckets"]][:2] == ["OOV", "[20, 30)"]
    assert len(release["buckets"]) == 8
    assert release["reports"] == FLEET_SIZE
    assert release["min_cohort"] == 736
    assert release["epsilon_spent"] == 1.0
    for bucket in release["buckets"]:
        low, high = bucket["ci95"]
        assert low < bucket["estimate"] < high
        assert high - bucket["estimate"] == pytest.approx(1.959964 * bucket["standard_error"], rel=1e-5)
    # The estimates sum to the number of reports up to noise: 4 standard errors of the sum.
    total_se = sum(b["standard_error"] ** 2 for b in release["buckets"]) ** 0.5
    assert abs(sum(b["estimate"] for b in release["buckets"]) - FLEET_SIZE) < 4 * total_se


def test_release_is_not_found_before_the_round_is_released(api, analysis, recipe) -> None:
    created = api.post("/api/analyses/test.ages/recipes/", recipe, format="json").json()
    started = api.post(f"/api/recipes/{created['id']}/rounds/").json()  # not committed: stays queued
    response = api.get(f"/api/rounds/{started['id']}/release/")
    assert response.status_code == 404
    assert "queued" in response.json()["detail"]


def test_anonymous_requests_are_refused(analysis) -> None:
    assert APIClient().get("/api/analyses/").status_code == 401


def test_token_auth_works(client, analysis, analyst) -> None:
    token = client.post("/api/token/", {"username": "alice", "password": "alice-password"}).json()["token"]
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    assert [a["identifier"] for a in api.get("/api/analyses/").json()["results"]] == ["test.ages"]


def test_another_analyst_can_neither_see_nor_run_the_analysis(analysis, other_analyst, recipe, api) -> None:
    created = api.post("/api/analyses/test.ages/recipes/", recipe, format="json").json()
    charlie = APIClient()
    charlie.force_authenticate(other_analyst)
    assert charlie.get("/api/analyses/").json()["results"] == []
    assert charlie.get("/api/analyses/test.ages/").status_code == 404
    assert charlie.post("/api/analyses/test.ages/recipes/", recipe, format="json").status_code == 404
    assert charlie.post(f"/api/recipes/{created['id']}/rounds/").status_code == 404
    assert Round.objects.count() == 0


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
        ("query", "select height from KeyboardNGrams", "query"),
        ("dataTypeContent.age.boundaries", [30, 20], "dataTypeContent.age.boundaries"),
        ("dataTypeContent.age.boundaries", [20, "thirty"], "dataTypeContent.age.boundaries"),
        ("dataTypeContent.age.boundaries", [], "dataTypeContent.age.boundaries"),
        ("privacy.epsilon0", 0, "privacy.epsilon0"),
        ("privacy.epsilon0", -1.5, "privacy.epsilon0"),
        ("privacy.delta", 1.0, "privacy.delta"),
        ("privacy.delta", 0, "privacy.delta"),
        ("privacy.mechanism", "laplace", "privacy.mechanism"),
        ("privacy.epsilon0", 4.5, "privacy.epsilon0"),  # above the field's local cap of 4
        ("privacy.epsilon", 2.5, "privacy.epsilon"),  # above the analysis budget of 2
        ("privacy.samplingRate", 0.1, "privacy.samplingRate"),  # 500 expected reports < min cohort: raise q
        ("cohorts", ["age"], "cohorts"),
    ],
)
def test_bad_recipes_are_refused_per_field_and_change_nothing(api, analysis, recipe, path, value, error_key) -> None:
    response = api.post("/api/analyses/test.ages/recipes/", set_path(recipe, path, value), format="json")
    assert response.status_code == 400
    assert error_key in response.json()["fields"], response.json()
    assert Recipe.objects.count() == 0
    assert Round.objects.count() == 0
    assert ShardRun.objects.count() == 0
    assert ShardLedger.objects.count() == 0


def test_an_unknown_field_in_the_encoding_is_refused(api, analysis, recipe) -> None:
    recipe["dataTypeContent"] = {"height": {"dataType": "BucketedType", "boundaries": [1, 2]}}
    response = api.post("/api/analyses/test.ages/recipes/", recipe, format="json")
    assert response.status_code == 400
    assert "dataTypeContent" in response.json()["fields"]


def test_a_recipe_beyond_the_remaining_budget_is_refused(
    api, analysis, recipe, django_capture_on_commit_callbacks
) -> None:
    start_round(api, recipe, django_capture_on_commit_callbacks)
    recipe["recipeIdentifier"] = "ages-again"
    # 1 + 1.9 > 2, and no account composes them within 2 (the PLD account would fit 1 + 1.5).
    recipe["privacy"]["epsilon"] = 1.9
    response = api.post("/api/analyses/test.ages/recipes/", recipe, format="json")
    assert response.status_code == 400
    assert "left" in " ".join(response.json()["fields"]["privacy.epsilon"])


def test_a_deletion_model_mechanism_is_charged_twice_its_epsilon0(api, analysis, recipe) -> None:
    # symmetric RAPPOR at epsilon0 = 3 is 6-DP in the replacement model: above the field's cap of 4.
    recipe["privacy"]["mechanism"] = "symmetric_rappor"
    response = api.post("/api/analyses/test.ages/recipes/", recipe, format="json")
    assert response.status_code == 400
    assert "replacement-model epsilon0 of this mechanism: 6" in " ".join(response.json()["fields"]["privacy.epsilon0"])
    # 3 in the replacement model: FMT 2022 at eps0 = 3 needed 736 reports; per coordinate at 1.5, 168
    # (privacy.rappor_shuffling, proven and tested against exact enumeration).
    recipe["privacy"]["epsilon0"] = 1.5
    created = api.post("/api/analyses/test.ages/recipes/", recipe, format="json")
    assert created.status_code == 201 and created.json()["min_cohort"] == 168


def test_a_mechanism_that_cannot_encode_the_buckets_is_refused(api, analysis, recipe) -> None:
    recipe["privacy"]["mechanism"] = "binary_rr"  # two buckets only; the recipe has eight
    response = api.post("/api/analyses/test.ages/recipes/", recipe, format="json")
    assert response.status_code == 400
    assert "Cannot encode 8 buckets" in " ".join(response.json()["fields"]["privacy.mechanism"])


@pytest.mark.parametrize("mechanism", ["symmetric_rappor", "kary_rr", "hadamard_response"])
def test_every_histogram_mechanism_runs_end_to_end(
    api, analysis, recipe, mechanism, django_capture_on_commit_callbacks, monkeypatch
) -> None:
    # A fixed round seed (a round draws its own at random): a statistical check on fixed coins.
    monkeypatch.setattr(rounds, "secrets", SimpleNamespace(randbits=lambda bits: 20_261_126))
    recipe["privacy"].update(mechanism=mechanism, epsilon0=1.5 if mechanism == "symmetric_rappor" else 3.0)
    round_id = start_round(api, recipe, django_capture_on_commit_callbacks)
    release = api.get(f"/api/rounds/{round_id}/release/").json()
    assert release["reports"] == FLEET_SIZE and len(release["buckets"]) == 8
    total_se = sum(b["standard_error"] ** 2 for b in release["buckets"]) ** 0.5
    assert abs(sum(b["estimate"] for b in release["buckets"]) - FLEET_SIZE) < 4 * total_se


def test_release_options_simultaneous_intervals_and_a_clipped_view(
    api, analysis, recipe, django_capture_on_commit_callbacks
) -> None:
    round_id = start_round(api, recipe, django_capture_on_commit_callbacks)
    raw = api.get(f"/api/rounds/{round_id}/release/").json()
    joint = api.get(f"/api/rounds/{round_id}/release/?intervals=simultaneous").json()
    clipped = api.get(f"/api/rounds/{round_id}/release/?view=clipped").json()
    assert raw["intervals"] == "per-bucket" and "simultaneous" in joint["interval"]
    for per_bucket, together in zip(raw["buckets"], joint["buckets"], strict=True):
        assert together["ci95"][0] < per_bucket["ci95"][0] and together["ci95"][1] > per_bucket["ci95"][1]
        assert together["estimate"] == per_bucket["estimate"]
    assert all(b["estimate"] >= 0 and b["ci95"][0] >= 0 for b in clipped["buckets"])
    assert "shown as 0" in clipped["rule"]
    negative = [b for b in raw["buckets"] if b["estimate"] < 0]
    assert bool(raw["notes"]) == bool(negative)


def test_unknown_release_options_are_refused_per_field(
    api, analysis, recipe, django_capture_on_commit_callbacks
) -> None:
    round_id = start_round(api, recipe, django_capture_on_commit_callbacks)
    response = api.get(f"/api/rounds/{round_id}/release/?intervals=joint&view=pretty")
    assert response.status_code == 400 and set(response.json()["fields"]) == {"intervals", "view"}


# ---------------------------------------------------------------- rounds: list, cancel, CSV


def test_a_queued_round_is_cancelled_once_and_then_is_a_conflict(api, analysis, recipe) -> None:
    created = api.post("/api/analyses/test.ages/recipes/", recipe, format="json").json()
    round_id = api.post(f"/api/recipes/{created['id']}/rounds/").json()["id"]  # not committed: stays queued
    cancelled = api.post(f"/api/rounds/{round_id}/cancel/")
    assert cancelled.status_code == 200
    assert cancelled.json()["status"] == "cancelled" and cancelled.json()["finished_at"]
    assert Round.objects.get(pk=round_id).status == Round.Status.CANCELLED
    again = api.post(f"/api/rounds/{round_id}/cancel/")
    assert again.status_code == 409 and again.json()["code"] == "conflict"


def test_another_analyst_cannot_cancel_a_round(api, analysis, recipe, other_analyst) -> None:
    created = api.post("/api/analyses/test.ages/recipes/", recipe, format="json").json()
    round_id = api.post(f"/api/recipes/{created['id']}/rounds/").json()["id"]
    charlie = APIClient()
    charlie.force_authenticate(other_analyst)
    assert charlie.post(f"/api/rounds/{round_id}/cancel/").status_code == 404
    assert Round.objects.get(pk=round_id).status == Round.Status.QUEUED


def test_rounds_are_listed_newest_first_filtered_and_only_ones_own(
    api, analysis, recipe, other_analyst, django_capture_on_commit_callbacks
) -> None:
    released = start_round(api, recipe, django_capture_on_commit_callbacks)
    recipe["recipeIdentifier"] = "ages-again"
    again = api.post("/api/analyses/test.ages/recipes/", recipe, format="json").json()
    queued = api.post(f"/api/recipes/{again['id']}/rounds/").json()["id"]
    listed = api.get("/api/rounds/").json()
    assert listed["count"] == 2 and [r["id"] for r in listed["results"]] == [queued, released]
    assert listed["results"][0]["analysis"] == "test.ages"
    assert [r["id"] for r in api.get("/api/rounds/?status=released").json()["results"]] == [released]
    assert [r["id"] for r in api.get("/api/rounds/?analysis=test.ages&status=queued").json()["results"]] == [queued]
    assert api.get("/api/rounds/?analysis=test.other").json()["results"] == []
    refused = api.get("/api/rounds/?status=done")
    assert refused.status_code == 400 and list(refused.json()["fields"]) == ["status"]
    charlie = APIClient()
    charlie.force_authenticate(other_analyst)
    assert charlie.get("/api/rounds/").json()["results"] == []


def test_the_release_as_csv_is_the_dashboards_csv(
    api, client, analyst, analysis, recipe, django_capture_on_commit_callbacks
) -> None:
    round_id = start_round(api, recipe, django_capture_on_commit_callbacks)
    response = api.get(f"/api/rounds/{round_id}/release.csv?intervals=simultaneous", HTTP_ACCEPT="text/csv")
    assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
    lines = response.content.decode().splitlines()
    assert lines[0] == "cohort,bucket,estimate,standard_error,ci_low,ci_high"
    assert len(lines) == 1 + 8 and lines[1].split(",")[1] == "OOV"
    client.force_login(analyst)
    dashboard = client.get(f"/rounds/{round_id}/release.csv?intervals=simultaneous")
    assert dashboard.content == response.content


def test_the_release_csv_errors_are_json(api, analysis, recipe, django_capture_on_commit_callbacks) -> None:
    created = api.post("/api/analyses/test.ages/recipes/", recipe, format="json").json()
    queued = api.post(f"/api/recipes/{created['id']}/rounds/").json()["id"]
    missing = api.get(f"/api/rounds/{queued}/release.csv", HTTP_ACCEPT="text/csv")
    assert missing.status_code == 404 and "queued" in missing.json()["detail"]
    round_id = start_round(api, {**recipe, "recipeIdentifier": "ages-2"}, django_capture_on_commit_callbacks)
    refused = api.get(f"/api/rounds/{round_id}/release.csv?view=pretty")
    assert refused.status_code == 400 and list(refused.json()["fields"]) == ["view"]


# ---------------------------------------------------------------- analyses filter, fleets


def test_analyses_are_filtered_by_status_and_fleet(api, analysis, analyst) -> None:
    from analyses.services.policy import analysis_create
    from tests.conftest import SPEC

    analysis_create(spec={**SPEC, "identifier": "test.draft"}, owner=analyst)
    identifiers = lambda query: [a["identifier"] for a in api.get(f"/api/analyses/{query}").json()["results"]]  # noqa: E731
    assert identifiers("") == ["test.ages", "test.draft"]
    assert identifiers("?status=draft") == ["test.draft"]
    assert identifiers("?status=approved&fleet=small") == ["test.ages"]
    assert identifiers("?fleet=words") == []
    refused = api.get("/api/analyses/?status=done")
    assert refused.status_code == 400 and list(refused.json()["fields"]) == ["status"]


def test_fleets_show_their_schema_and_only_the_users_analyses(api, analysis, other_analyst) -> None:
    [small] = api.get("/api/fleets/").json()["results"]
    assert small["name"] == "small" and small["size"] == FLEET_SIZE and small["shards"] == 5
    assert small["synthetic"] is True and small["analyses"] == ["test.ages"]
    streams = {s["name"]: s for s in small["streams"]}
    assert {"name": "ngrams", "kind": "text"} in streams["KeyboardNGrams"]["fields"]
    assert streams["KeyboardNGrams"]["retention_days"] == 30 and streams["Profile"]["retention_days"] is None
    # Nothing that is, or regenerates, a device's data.
    assert not {"seed", "vocabularies", "columns", "devices"} & set(small)
    assert api.get("/api/fleets/small/").json() == small
    assert api.get("/api/fleets/nothing/").status_code == 404
    charlie = APIClient()
    charlie.force_authenticate(other_analyst)
    assert charlie.get("/api/fleets/small/").json()["analyses"] == []


def test_hadamard_response_on_three_values_gets_fmt_2022_s_cohort_and_devices_answer_it(
    api, analysis, recipe, django_capture_on_commit_callbacks
) -> None:
    # Issue 30, requirement 4: on at most 3 values Hadamard response meets FMT 2022's condition, so the
    # server and the devices (each from the encoding it parsed itself) both enforce its smaller cohort.
    recipe["privacy"].update(mechanism="hadamard_response", epsilon0=2.0, epsilon=1.0)
    three, eight = copy.deepcopy(recipe), recipe
    three["dataTypeContent"]["age"]["boundaries"] = [30, 60]
    three["recipeIdentifier"] = "ages-three"
    small = min_cohort_enforced(mechanism="hadamard_response", epsilon0=2.0, epsilon=1.0, delta=1e-6, domain_size=3)
    large = min_cohort_enforced(mechanism="hadamard_response", epsilon0=2.0, epsilon=1.0, delta=1e-6)
    assert small.method == "stronger-2022" and large.method == "clones-2020" and small.min_cohort < large.min_cohort
    checked = api.post("/api/analyses/test.ages/recipes/validate/", three, format="json").json()
    assert checked["min_cohort"] == small.min_cohort
    checked = api.post("/api/analyses/test.ages/recipes/validate/", eight, format="json").json()
    assert checked["min_cohort"] == large.min_cohort  # eight buckets: the 2020 bound
    round_id = start_round(api, three, django_capture_on_commit_callbacks)
    release = api.get(f"/api/rounds/{round_id}/release/").json()
    assert release["reports"] == FLEET_SIZE and release["refusals"].get("min_cohort", 0) == 0
