"""Issue: a suppressed batch revealed its exact size ("xx_RARE reports 3", "fr_FR reports 6").

The size of a batch below the minimum cohort is what the cohort hides: it is reported as
suppressed with "fewer than m", never its count, in the API, the CSV, the page and the CLI, even
for a release stored before this rule."""

from __future__ import annotations

import pytest

from analyses.models import Release, Round

pytestmark = pytest.mark.django_db


@pytest.fixture
def split_release(api, analysis, recipe, django_capture_on_commit_callbacks) -> Round:
    recipe["cohorts"] = ["locale"]
    recipe["privacy"]["minCohort"] = 974  # raised by the recipe: en_US (half of 5,000) clears it, the others do not
    created = api.post("/api/analyses/test.ages/recipes/", recipe, format="json").json()
    with django_capture_on_commit_callbacks(execute=True):
        round_id = api.post(f"/api/recipes/{created['id']}/rounds/", {"confirmSmallCohorts": True}, format="json")
    return Round.objects.get(pk=round_id.json()["id"])


def test_a_suppressed_batch_says_fewer_than_m_never_its_size(api, client, analyst, split_release) -> None:
    body = api.get(f"/api/rounds/{split_release.pk}/release/").json()
    suppressed = [b for b in body["batches"] if b["suppressed"]]
    assert len(suppressed) == 4
    for batch in suppressed:
        assert batch["reports"] is None and "fewer than 974 reports" in batch["reason"]
    stored = split_release.release.content["batches"]
    assert all(b["reports"] is None for b in stored if b["suppressed"])  # not even stored
    client.force_login(analyst)
    page = client.get(f"/rounds/{split_release.pk}/").content.decode()
    assert "fewer than 974 reports" in page
    csv = api.get(f"/api/rounds/{split_release.pk}/release.csv").content.decode()
    assert "fr_FR" not in csv  # a suppressed batch has no rows


def test_a_release_stored_with_exact_sizes_is_shown_without_them(api, split_release) -> None:
    release = Release.objects.get(round=split_release)
    content = release.content
    for batch in content["batches"]:
        if batch["suppressed"]:  # as releases were stored before the rule
            batch.update(reports=6, reason="leader: 6 reports is below the minimum cohort of 974")
    Release.objects.filter(pk=release.pk).update(content=content)
    from django.core.cache import cache

    cache.clear()
    body = api.get(f"/api/rounds/{split_release.pk}/release/").json()
    for batch in (b for b in body["batches"] if b["suppressed"]):
        assert batch["reports"] is None and batch["reason"] == "leader: fewer than 974 reports (the minimum cohort)"
