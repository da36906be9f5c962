"""Small things a first visit meets: the icon, and a POST-only address opened as a link."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db


def test_the_favicon_is_the_apps_own_and_every_page_names_it(client, analyst) -> None:
    response = client.get("/favicon.ico")
    assert response.status_code == 302 and response["Location"].endswith("favicon.svg")
    client.force_login(analyst)
    assert 'rel="icon"' in client.get("/").content.decode()


def test_a_post_only_address_opened_as_a_link_says_so_in_words(client, analyst, analysis) -> None:
    client.force_login(analyst)
    response = client.get("/rounds/1/cancel/")
    assert response.status_code == 405 and response["Allow"] == "POST"
    page = response.content.decode()
    assert 'id="method-not-allowed"' in page and "It takes POST, not GET" in page


def test_the_api_keeps_its_own_405(api, analysis) -> None:
    response = api.get("/api/rounds/1/cancel/")
    assert response.status_code == 405 and response.json()["code"] == "method_not_allowed"
