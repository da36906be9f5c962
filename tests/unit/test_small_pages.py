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


@pytest.mark.parametrize("debug", [True, False])
def test_a_missing_page_reads_in_words_with_debug_on_as_in_production(client, analyst, settings, debug) -> None:
    # `make run` serves with DEBUG on: Django's technical 404 (URL patterns, settings) is not for analysts.
    settings.DEBUG = debug
    client.force_login(analyst)
    response = client.get("/no-such-page/")
    assert response.status_code == 404
    page = response.content.decode()
    assert 'id="not-found"' in page and "<code>/no-such-page/</code>" in page
    assert "DEBUG = True" not in page and "URLconf" not in page


def test_a_views_own_404_and_the_apis_stay_as_they_are(client, api, analyst, settings) -> None:
    settings.DEBUG = True
    response = api.get("/api/no-such-endpoint/")
    assert response.status_code == 404 and response.json()["code"] == "not_found"
    client.force_login(analyst)
    response = client.get("/analyses/no-such-analysis/")  # the view's Http404: the same page
    assert response.status_code == 404 and 'id="not-found"' in response.content.decode()
