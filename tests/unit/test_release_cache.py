"""Releases are rendered once per view and served from the cache, and never served stale."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
import redis
from django.core.cache import cache

from analyses.models import Analysis, Release, Round
from analyses.presenters import releases
from analyses.reads import release_cache
from analyses.services import rounds
from analyses.services.policy import analysis_approve
from pfs_base.cache import RedisCache

pytestmark = pytest.mark.django_db


@pytest.fixture
def released(analysis, recipe, analyst, django_capture_on_commit_callbacks) -> Round:
    cache.clear()
    with django_capture_on_commit_callbacks(execute=True):
        round_ = rounds.round_create_and_start(analysis=analysis, content=recipe, user=analyst)
    round_.refresh_from_db()
    assert round_.status == Round.Status.RELEASED
    yield round_
    cache.clear()


def counting(monkeypatch, name: str) -> list[int]:
    """Count the calls to releases.<name> from now on."""
    calls: list[int] = []
    original = getattr(releases, name)

    def counted(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(releases, name, counted)
    return calls


def release_section(page: bytes) -> str:
    return re.search(r'<section aria-labelledby="release-h".*?</section>', page.decode(), re.S)[0]


def test_the_api_computes_a_release_once_per_view(api, released, monkeypatch) -> None:
    computed = counting(monkeypatch, "release_as_json")
    url = f"/api/rounds/{released.pk}/release/"
    first, second = api.get(url), api.get(url)
    assert first.status_code == second.status_code == 200
    assert (
        first.json()
        == second.json()
        == releases.release_page(releases.release_as_json(released.release, releases.ReleaseView()))
    )
    assert len(computed) == 2  # the first request, and the comparison just made; not the second request

    clipped = api.get(url, {"view": "clipped"}).json()
    assert clipped == releases.release_page(
        releases.release_as_json(released.release, releases.ReleaseView(view="clipped"))
    )
    assert clipped["rule"] != first.json()["rule"]  # another view is another entry, not the cached one


def test_the_csv_is_cached_per_view_as_well(api, released, monkeypatch) -> None:
    computed = counting(monkeypatch, "release_as_csv")
    url = f"/api/rounds/{released.pk}/release.csv"
    bodies = {api.get(url).content for _ in range(3)}
    assert bodies == {releases.release_as_csv(released.release).encode()}
    assert len(computed) == 2  # once for the three requests, once for the comparison


def test_the_round_page_renders_its_release_section_once(client, analyst, released, monkeypatch) -> None:
    client.force_login(analyst)
    rendered = counting(monkeypatch, "release_table")
    first, second = client.get(f"/rounds/{released.pk}/"), client.get(f"/rounds/{released.pk}/")
    assert len(rendered) == 1
    assert release_section(first.content) == release_section(second.content)
    assert 'id="release-table"' in release_section(first.content)
    cache.clear()
    assert release_section(client.get(f"/rounds/{released.pk}/").content) == release_section(first.content)
    assert len(rendered) == 2


def test_the_drill_down_links_follow_the_query_class(client, analyst, officer, analysis, released) -> None:
    """Whether a bucket can be broken down by another cohort field depends on the analysis, which a
    privacy officer may change after the release: the page follows it."""
    client.force_login(analyst)
    page = f"/rounds/{released.pk}/"
    with_cohorts = release_section(client.get(page).content)
    assert with_cohorts.count(">Refine<span") == 8  # every bucket: by locale

    query_class = {**analysis.query_class, "cohortFields": []}
    Analysis.objects.filter(pk=analysis.pk).update(query_class=query_class)
    analysis.refresh_from_db()
    analysis_approve(analysis=analysis, officer=officer)  # the change counts once approved
    without = release_section(client.get(page).content)
    cache.clear()
    assert without == release_section(client.get(page).content)  # what an uncached render shows
    assert without.count(">Refine<span") < 8  # the open-ended buckets cannot be split


def test_another_release_under_the_same_id_is_not_served_from_the_cache(api, released) -> None:
    """Ids start again in a new database (as in tests) while the cache may live on: a key names the
    release by its id and the instant it was made."""
    url = f"/api/rounds/{released.pk}/release/"
    assert api.get(url).json()["reports"] == released.release.content["reports"]
    content = {**released.release.content, "reports": 1}
    Release.objects.filter(pk=released.release.pk).update(
        content=content, created_at=released.release.created_at + timedelta(seconds=1)
    )
    assert api.get(url).json()["reports"] == 1


def test_without_the_cache_a_release_is_still_served(api, client, analyst, released, monkeypatch) -> None:
    class Down:
        def get(self, *args, **kwargs):
            raise redis.ConnectionError("Redis is restarting")

        set = get

    url = f"/api/rounds/{released.pk}/release/"
    expected = releases.release_page(releases.release_as_json(released.release, releases.ReleaseView()))
    monkeypatch.setattr(release_cache, "cache", Down())
    assert api.get(url).json() == expected
    client.force_login(analyst)
    assert 'id="release-table"' in client.get(f"/rounds/{released.pk}/").content.decode()


def test_keys_name_the_release_the_view_and_the_rendering(released) -> None:
    release, view = released.release, releases.ReleaseView()
    key = release_cache.release_key(release, view, "json")
    assert key != release_cache.release_key(release, releases.ReleaseView(intervals="simultaneous"), "json")
    assert key != release_cache.release_key(release, view, "csv")
    assert key.startswith(f"release:{release_cache.RENDERING}:{release.pk}:")


def test_the_redis_cache_keeps_one_client_per_pool() -> None:
    """Django's builds a client per call; ours keeps it (no connection is made here)."""
    backend = RedisCache("redis://127.0.0.1:6379/0", {})
    client = backend._cache.get_client(write=True)
    assert backend._cache.get_client(write=False) is client  # one server: one pool for both
    assert client.connection_pool is backend._cache._get_connection_pool(True)
