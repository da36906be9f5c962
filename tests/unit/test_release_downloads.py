"""A release's downloads: each view under its own file name, CSV declared as UTF-8 (issue 31, item 12)."""

from __future__ import annotations

import csv
import io
from types import SimpleNamespace

import pytest
from rest_framework.test import APIClient

from analyses.services import rounds
from tests.unit.test_round_page import released

pytestmark = pytest.mark.django_db


def test_each_view_of_a_release_downloads_under_its_own_name_as_utf8_csv(
    client, analysis, recipe, analyst, django_capture_on_commit_callbacks
) -> None:
    round_ = released(analysis, recipe, analyst, django_capture_on_commit_callbacks)
    client.force_login(analyst)
    names = set()
    for query, name in [
        ("", f"test.ages-round-{round_.pk}-raw-per-bucket.csv"),
        ("?view=thresholded", f"test.ages-round-{round_.pk}-thresholded-per-bucket.csv"),
        ("?view=clipped&intervals=simultaneous", f"test.ages-round-{round_.pk}-clipped-simultaneous.csv"),
    ]:
        response = client.get(f"/rounds/{round_.pk}/release.csv{query}")
        assert response.status_code == 200
        assert response["Content-Type"] == "text/csv; charset=utf-8"
        assert response["Content-Disposition"] == f'attachment; filename="{name}"'
        names.add(name)
        assert next(csv.reader(io.StringIO(response.content.decode("utf-8"))))[0] == "cohort"
    assert len(names) == 3

    response = client.get(f"/rounds/{round_.pk}/release.json?view=clipped")
    assert (
        response["Content-Disposition"] == f'attachment; filename="test.ages-round-{round_.pk}-clipped-per-bucket.json"'
    )


def test_the_apis_csv_is_named_and_declared_the_same_way(
    analysis, recipe, analyst, django_capture_on_commit_callbacks
) -> None:
    round_ = released(analysis, recipe, analyst, django_capture_on_commit_callbacks)
    api = APIClient()
    api.force_authenticate(analyst)
    response = api.get(f"/api/rounds/{round_.pk}/release.csv?view=thresholded&intervals=simultaneous")
    assert response.status_code == 200
    assert response["Content-Type"] == "text/csv; charset=utf-8"
    assert (
        response["Content-Disposition"]
        == f'attachment; filename="test.ages-round-{round_.pk}-thresholded-simultaneous.csv"'
    )


def test_a_thresholded_download_never_lists_a_zero_outside_its_own_interval(
    client, analysis, recipe, analyst, django_capture_on_commit_callbacks, monkeypatch
) -> None:
    # Buckets no device's age reaches ([150, 200), [200, 250), [250, ∞)): their estimates are noise
    # around 0, so the thresholded view zeroes them, and the round's seed is fixed so the release is
    # the same on every run (a round draws its seed at random).
    recipe["dataTypeContent"]["age"]["boundaries"] = [*recipe["dataTypeContent"]["age"]["boundaries"], 150, 200, 250]
    monkeypatch.setattr(rounds, "secrets", SimpleNamespace(randbits=lambda bits: 20261126))
    round_ = released(analysis, recipe, analyst, django_capture_on_commit_callbacks)
    client.force_login(analyst)
    rows = list(
        csv.DictReader(io.StringIO(client.get(f"/rounds/{round_.pk}/release.csv?view=thresholded").content.decode()))
    )
    zeroed = [row for row in rows if float(row["estimate"]) == 0]
    assert zeroed, "the small fleet's release has buckets indistinguishable from zero"
    for row in rows:
        assert float(row["ci_low"]) <= float(row["estimate"]) <= float(row["ci_high"])
    # A zeroed bucket's interval starts at its 0 (a true count is never negative), so no interval
    # drawn or listed beside a 0 lies below it.
    assert all(float(row["ci_low"]) == 0 for row in zeroed)
