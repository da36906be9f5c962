"""API limits: a body over the size limit is a 413; request rates per scope are 429s with Retry-After."""

from __future__ import annotations

import importlib
import sys

import pytest
from django.core.cache import cache
from django.core.exceptions import ImproperlyConfigured
from rest_framework.response import Response
from rest_framework.test import APIClient, APIRequestFactory
from rest_framework.views import APIView

from analyses.models import Recipe, Round
from pfs_base.rates import rate_parse

pytestmark = pytest.mark.django_db


@pytest.fixture
def rates(settings):
    """Set some rates for one test, starting from empty counts."""
    cache.clear()

    def set_rates(**scopes: str) -> None:
        current = dict(settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"])
        settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {**current, **scopes}}

    yield set_rates
    cache.clear()


def test_a_body_over_the_limit_is_a_413_and_creates_nothing(api, analysis, recipe, settings) -> None:
    settings.PFS_API_MAX_BODY_BYTES = 200
    recipe["padding"] = "x" * 200
    response = api.post("/api/analyses/test.ages/recipes/", recipe, format="json")
    assert response.status_code == 413
    assert response.json()["code"] == "payload_too_large" and response.json()["fields"] == {}
    assert Recipe.objects.count() == 0
    del recipe["padding"]
    settings.PFS_API_MAX_BODY_BYTES = 1_048_576
    assert api.post("/api/analyses/test.ages/recipes/", recipe, format="json").status_code == 201


def test_the_body_limit_is_for_the_api_only(client, analyst, analysis, settings) -> None:
    settings.PFS_API_MAX_BODY_BYTES = 10
    client.force_login(analyst)
    response = client.post("/analyses/test.ages/", {"action": "dry-run", "epsilon": "1" * 50})
    assert response.status_code != 413


def test_starting_rounds_is_throttled_per_user_with_retry_after(api, analysis, recipe, other_analyst, rates) -> None:
    rates(round_start="2/minute")
    recipe_id = api.post("/api/analyses/test.ages/recipes/", recipe, format="json").json()["id"]
    assert [api.post(f"/api/recipes/{recipe_id}/rounds/").status_code for _ in range(2)] == [202, 202]
    throttled = api.post(f"/api/recipes/{recipe_id}/rounds/")
    assert throttled.status_code == 429 and throttled.json()["code"] == "throttled"
    assert 1 <= int(throttled["Retry-After"]) <= 60
    assert Round.objects.count() == 2
    # Reads are another scope, and another user has counts of their own.
    assert api.get("/api/rounds/").status_code == 200
    charlie = APIClient()
    charlie.force_authenticate(other_analyst)
    assert charlie.post(f"/api/recipes/{recipe_id}/rounds/").status_code == 404  # not throttled: not his recipe


def test_starting_adaptive_runs_counts_as_starting_rounds_but_listing_them_does_not(api, discovery, rates) -> None:
    rates(round_start="1/minute")
    assert [api.get("/api/adaptive-runs/").status_code for _ in range(3)] == [200, 200, 200]
    from tests.conftest import DISCOVERY_SPEC

    assert api.post("/api/adaptive-runs/", DISCOVERY_SPEC, format="json").status_code == 201
    assert api.post("/api/adaptive-runs/", DISCOVERY_SPEC, format="json").status_code == 429


def test_reads_are_throttled_at_the_user_rate(api, analysis, rates) -> None:
    rates(user="3/minute")
    assert [api.get("/api/analyses/").status_code for _ in range(4)] == [200, 200, 200, 429]


def test_anonymous_requests_are_throttled_per_address(analyst, rates) -> None:
    rates(anon="2/minute")
    client = APIClient()
    answers = [client.post("/api/token/", {"username": "alice", "password": "wrong"}).status_code for _ in range(3)]
    assert answers == [401, 401, 429]  # a wrong password is a failed sign-in, and counts
    other_address = APIClient(REMOTE_ADDR="10.0.0.2")
    assert other_address.post("/api/token/", {"username": "alice", "password": "alice-password"}).status_code == 200


class UploadView(APIView):
    """Stands for the device upload endpoints, which name the uploads scope."""

    authentication_classes: list = []
    permission_classes: list = []
    throttle_scope = "uploads"

    def post(self, request):
        return Response({"stored": True})


def test_a_view_with_the_uploads_scope_is_counted_there_per_address(rates) -> None:
    rates(uploads="3/second", anon="1/minute")
    view = UploadView.as_view()
    factory = APIRequestFactory()
    answers = [view(factory.post("/api/reports/", {}, format="json")).status_code for _ in range(4)]
    # The uploads rate applies, not the anonymous one (which would allow one a minute).
    assert answers == [200, 200, 200, 429]


def test_the_default_upload_rate_allows_a_benchmark_of_2000_reports_a_second() -> None:
    from django.conf import settings as django_settings

    # The production default, not the test settings' one.
    sys.modules.pop("pfs_web.settings", None)
    production = importlib.import_module("pfs_web.settings")
    count, seconds = rate_parse(production.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]["uploads"])
    assert count / seconds >= 2 * 2_000
    assert count / seconds < 100_000
    assert {"user", "anon", "round_start", "uploads"} <= set(django_settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"])


@pytest.mark.parametrize("rate", ["30/minute", "10000/second", "5/s", "1/d"])
def test_rates_parse(rate) -> None:
    count, seconds = rate_parse(rate)
    assert count >= 1 and seconds in (1, 60, 86_400)


@pytest.mark.parametrize(
    "env", [{"PFS_ROUND_START_RATE": "fast"}, {"PFS_UPLOAD_RATE": "0/second"}, {"PFS_API_USER_RATE": "10/week"}]
)
def test_a_bad_rate_in_the_environment_stops_start_up(monkeypatch, env) -> None:
    monkeypatch.setenv("SECRET_KEY", "s")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    sys.modules.pop("pfs_web.settings", None)
    try:
        with pytest.raises(ImproperlyConfigured, match=next(iter(env))):
            importlib.import_module("pfs_web.settings")
    finally:
        sys.modules.pop("pfs_web.settings", None)


def test_the_cache_is_redis_when_there_is_one(monkeypatch) -> None:
    monkeypatch.setenv("SECRET_KEY", "s")
    monkeypatch.setenv("REDIS_URL", "redis://127.0.0.1:6379/3")
    sys.modules.pop("pfs_web.settings", None)
    try:
        production = importlib.import_module("pfs_web.settings")
    finally:
        sys.modules.pop("pfs_web.settings", None)
    assert production.CACHES["default"]["BACKEND"] == "pfs_base.cache.RedisCache"
    assert production.CACHES["default"]["LOCATION"] == "redis://127.0.0.1:6379/3"
