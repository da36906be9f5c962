"""Every API error answers {"detail", "code", "fields"}: validation, auth, 404, 405, 409, 415, parse errors, crashes."""

from __future__ import annotations

import json
import logging

import pytest
from django.test import RequestFactory
from rest_framework import exceptions
from rest_framework.test import APIClient

from analyses.models import Recipe, Round
from pfs_base.api_errors import api_exception_handler, json_server_error

pytestmark = pytest.mark.django_db


def assert_error(response, status: int, code: str) -> dict:
    assert response.status_code == status, response.content
    assert response["Content-Type"] == "application/json"
    body = response.json()
    assert set(body) == {"detail", "code", "fields"}, body
    assert body["code"] == code
    assert isinstance(body["detail"], str) and body["detail"]
    return body


def test_a_bad_recipe_names_its_fields_in_fields_and_in_the_detail(api, analysis, recipe) -> None:
    recipe["privacy"]["epsilon0"] = 0
    recipe["privacy"]["delta"] = 1.0
    body = assert_error(api.post("/api/analyses/test.ages/recipes/", recipe, format="json"), 400, "invalid")
    assert set(body["fields"]) == {"privacy.epsilon0", "privacy.delta"}
    assert body["detail"].startswith("Invalid input: ") and "privacy.epsilon0" in body["detail"]
    assert all(isinstance(m, str) for messages in body["fields"].values() for m in messages)
    assert Recipe.objects.count() == 0


def test_not_signed_in_is_a_401_with_no_fields(analysis) -> None:
    response = APIClient().get("/api/analyses/")
    body = assert_error(response, 401, "not_authenticated")
    assert body["fields"] == {}
    assert response["WWW-Authenticate"] == "Token"


def test_a_bad_token_is_a_401_authentication_failed(analysis) -> None:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Token not-a-token")
    assert_error(client.get("/api/analyses/"), 401, "authentication_failed")


def test_a_hidden_or_missing_object_is_a_404_not_found(api, analysis, other_analyst) -> None:
    assert_error(api.get("/api/analyses/test.nothing/"), 404, "not_found")
    charlie = APIClient()
    charlie.force_authenticate(other_analyst)
    assert_error(charlie.get("/api/analyses/test.ages/"), 404, "not_found")


def test_an_unknown_api_path_is_a_json_404(api) -> None:
    assert_error(api.get("/api/no-such-thing/"), 404, "not_found")


def test_a_wrong_method_is_a_405(api, analysis) -> None:
    assert_error(api.delete("/api/analyses/test.ages/"), 405, "method_not_allowed")


def test_a_body_that_is_not_json_is_a_415(api, discovery) -> None:
    assert_error(api.post("/api/adaptive-runs/", {"analysis": "t.discovery"}), 415, "unsupported_media_type")


def test_malformed_json_is_a_400_parse_error(api, analysis) -> None:
    response = api.post("/api/analyses/test.ages/recipes/", "{not json", content_type="application/json")
    body = assert_error(response, 400, "parse_error")
    assert body["fields"] == {}


def test_acting_on_an_object_in_the_wrong_state_is_a_409_conflict(api, analysis, recipe) -> None:
    created = api.post("/api/analyses/test.ages/recipes/", recipe, format="json").json()
    round_id = api.post(f"/api/recipes/{created['id']}/rounds/").json()["id"]
    Round.objects.filter(pk=round_id).update(status=Round.Status.RELEASED)
    body = assert_error(api.post(f"/api/rounds/{round_id}/cancel/"), 409, "conflict")
    assert "already released" in body["detail"] and body["fields"] == {}


def test_an_unhandled_exception_is_a_logged_json_500(api, analysis, recipe, monkeypatch, caplog) -> None:
    def crash(**kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr("analyses.api.views.round_dry_run", crash)
    with caplog.at_level(logging.ERROR, logger="pfs_web.api"):
        response = api.post("/api/analyses/test.ages/dry-run/", recipe, format="json")
    body = assert_error(response, 500, "server_error")
    assert "boom" not in body["detail"]  # the cause goes to the log, not to the client
    [record] = [r for r in caplog.records if r.name == "pfs_web.api"]
    assert "/api/analyses/test.ages/dry-run/" in record.getMessage() and record.exc_info[1].args == ("boom",)


def test_a_crash_outside_the_api_views_answers_json_under_api_only() -> None:
    factory = RequestFactory()
    api_answer = json_server_error(factory.get("/api/rounds/"))
    assert api_answer.status_code == 500 and api_answer["Content-Type"] == "application/json"
    page = json_server_error(factory.get("/rounds/1/"))
    assert page.status_code == 500 and page["Content-Type"].startswith("text/html")


@pytest.mark.parametrize(
    ("exception", "fields", "detail"),
    [
        (exceptions.ValidationError(["Pick one."]), {"non_field_errors": ["Pick one."]}, "Pick one."),
        (exceptions.ValidationError("Pick one."), {"non_field_errors": ["Pick one."]}, "Pick one."),
        (
            exceptions.ValidationError({"privacy": {"epsilon": ["Too large."]}, "query": ["Unknown field."]}),
            {"privacy.epsilon": ["Too large."], "query": ["Unknown field."]},
            "Invalid input: privacy.epsilon, query.",
        ),
        (
            exceptions.ValidationError({"items": [{}, {"name": ["Required."]}]}),
            {"items.1.name": ["Required."]},
            "Invalid input: items.1.name.",
        ),
    ],
)
def test_validation_errors_of_every_shape_become_fields(exception, fields, detail) -> None:
    response = api_exception_handler(exception, {})
    assert response.status_code == 400
    assert response.data == {"detail": detail, "code": "invalid", "fields": fields}


def test_a_throttled_answer_says_when_to_retry() -> None:
    response = api_exception_handler(exceptions.Throttled(wait=12.3), {})
    assert response.status_code == 429 and response["Retry-After"] == "13"  # rounded up
    assert response.data["code"] == "throttled" and response.data["fields"] == {}


@pytest.mark.parametrize(
    "body",
    [
        "[" * 100_000 + "]" * 100_000,  # the json module would run out of stack: was a 500
        '{"a":' * 50_000 + "1" + "}" * 50_000,
        "[" * 40 + "]" * 40,  # parses, but deeper than any recipe
    ],
)
@pytest.mark.parametrize("path", ["/api/analyses/test.ages/recipes/", "/api/adaptive-runs/", "/api/token/"])
def test_json_nested_too_deep_is_a_400_parse_error_not_a_crash(api, analysis, body, path) -> None:
    response = api.post(path, body, content_type="application/json")
    assert_error(response, 400, "parse_error")
    assert "nested deeper than 32 levels" in response.json()["detail"]
    assert Recipe.objects.count() == 0


def test_json_as_deep_as_allowed_is_parsed(api, analysis, recipe) -> None:
    recipe["version"] = json_nested(30)  # stored as given (Figure 4); unknown keys are refused
    response = api.post("/api/analyses/test.ages/recipes/", recipe, format="json")
    assert response.status_code == 201, response.json()


def json_nested(levels: int):
    value: object = 1
    for _ in range(levels):
        value = [value]
    return value


# ---------------------------------------------------------------- found by schemathesis on PostgreSQL


@pytest.mark.parametrize(
    ("path", "field"),
    [
        ("/api/rounds/?analysis=a%00b", "analysis"),  # PostgreSQL cannot compare text with NUL: was a 500
        ("/api/analyses/?fleet=%00", "fleet"),
        ("/api/adaptive-runs/?analysis=x%00", "analysis"),
        ("/api/analyses/test%00ages/", "path"),
    ],
)
def test_a_nul_character_in_the_path_or_query_is_a_400(api, analysis, path, field) -> None:
    body = assert_error(api.get(path), 400, "invalid")
    assert body["fields"] == {field: ["Must not contain NUL characters."]}


@pytest.mark.parametrize(
    ("path", "content_type", "data"),
    [
        ("/api/analyses/test.ages/recipes/", "application/json", '{"recipeIdentifier": "a\\u0000b"}'),
        ("/api/adaptive-runs/", "application/json", '{"analysis": "\\u0000"}'),
        ("/api/token/", "application/x-www-form-urlencoded", "username=alice%00&password=x"),
        (
            "/api/analyses/test.ages/recipes/",
            "multipart/form-data; boundary=B",
            '--B\r\nContent-Disposition: form-data; name="recipeIdentifier"\r\n\r\na\x00b\r\n--B--\r\n',
        ),
    ],
)
def test_a_nul_character_in_the_body_is_a_400_and_changes_nothing(api, analysis, path, content_type, data) -> None:
    body = assert_error(api.post(path, data, content_type=content_type), 400, "invalid")
    assert body["fields"] == {"body": ["Must not contain NUL characters."]}
    assert Recipe.objects.count() == 0


def test_a_body_without_nul_still_reaches_the_view_after_the_check(api, analysis, recipe) -> None:
    response = api.post("/api/analyses/test.ages/recipes/", json.dumps(recipe), content_type="application/json")
    assert response.status_code == 201


def test_too_many_query_parameters_is_a_400_not_a_crash(api, analysis) -> None:
    query = "&".join(f"p{i}=1" for i in range(1_100))  # over Django's DATA_UPLOAD_MAX_NUMBER_FIELDS
    assert_error(api.get(f"/api/rounds/?{query}"), 400, "parse_error")
