"""The OpenAPI schema: generated without a warning, served at /api/schema/, read by vendored Swagger UI and ReDoc."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from django.contrib.staticfiles import finders
from django.core.management import call_command
from rest_framework.test import APIClient

pytestmark = pytest.mark.django_db


def test_the_schema_generates_and_validates_without_a_warning(tmp_path) -> None:
    out = tmp_path / "schema.yaml"
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(out))
    schema = yaml.safe_load(out.read_text())
    assert schema["openapi"].startswith("3.")
    for path in (
        "/api/rounds/",
        "/api/rounds/{id}/cancel/",
        "/api/rounds/{id}/release.csv",
        "/api/fleets/",
        "/api/fleets/{name}/",
        "/api/recipes/{id}/rounds/",
        "/api/adaptive-runs/",
    ):
        assert path in schema["paths"], path


def test_the_schema_is_served_with_the_error_format_and_token_auth() -> None:
    response = APIClient().get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert response.status_code == 200
    schema = response.json()
    error = schema["components"]["schemas"]["Error"]
    assert set(error["required"]) == {"detail", "code", "fields"}
    assert schema["components"]["securitySchemes"]["tokenAuth"]["in"] == "header"
    start = schema["paths"]["/api/recipes/{id}/rounds/"]["post"]
    assert {"202", "409", "422", "429"} <= set(start["responses"])
    assert start["responses"]["409"]["content"]["application/json"]["schema"]["$ref"].endswith("/Error")
    assert "Idempotency-Key" in [p["name"] for p in start["parameters"]]


@pytest.mark.parametrize(
    ("page", "asset"),
    [
        ("/api/docs/", "drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js"),
        ("/api/redoc/", "vendor/redoc.standalone.js"),
    ],
)
def test_the_readers_load_vendored_files_not_a_cdn(page, asset) -> None:
    html = APIClient().get(page).content.decode()
    assert f"/static/{asset}" in html
    # No address of another host: no scheme, no scheme-relative //host. (Not the letters "cdn"
    # anywhere: the page carries a random CSRF token, which now and then contains them.)
    assert "http://" not in html and "https://" not in html
    assert not re.search(r"""["'(=]\s*//[a-z0-9]""", html, re.IGNORECASE)
    assert finders.find(asset) is not None


def test_the_vendored_redoc_loads_no_logo_from_a_cdn() -> None:
    # The sidecar's bundle draws Redocly's logo from cdn.redoc.ly; the Makefile's copy does not.
    bundle = Path(finders.find("vendor/redoc.standalone.js")).read_text()
    assert "cdn.redoc.ly" not in bundle
    assert not re.search(r'src:"https?://', bundle)
