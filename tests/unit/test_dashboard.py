"""Dashboard pages rendered by Django: sign-in required, the form's errors, access per analyst."""

from __future__ import annotations

import pytest

from analyses.models import Recipe, Round
from analyses.services.rounds import round_create_and_start

pytestmark = pytest.mark.django_db

FORM = {
    "field": "age",
    "boundaries": "20, 30, 40, 50, 60, 70, 80",
    "mechanism": "asymmetric_ohe",
    "epsilon0": "3",
    "epsilon": "1",
    "delta": "1e-6",
    "sampling_rate": "1",
}


def test_pages_need_sign_in(client, analysis) -> None:
    response = client.get("/")
    assert response.status_code == 302 and response["Location"].startswith("/login/")


def test_analysis_list_shows_budget_bars(client, analysis, analyst) -> None:
    client.force_login(analyst)
    page = client.get("/").content.decode()
    assert "test.ages" in page and "<meter" in page and "none yet" in page


def test_analysis_list_links_the_last_release(
    client, analysis, analyst, recipe, django_capture_on_commit_callbacks
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        first = round_create_and_start(analysis=analysis, content=recipe, user=analyst)
        second = round_create_and_start(
            analysis=analysis, content={**recipe, "recipeIdentifier": "again"}, user=analyst
        )
    client.force_login(analyst)
    page = client.get("/").content.decode()
    assert f"/rounds/{second.pk}/" in page and f"/rounds/{first.pk}/" not in page


def test_running_from_the_form_starts_a_round_and_shows_its_release(
    client, analysis, analyst, django_capture_on_commit_callbacks
) -> None:
    client.force_login(analyst)
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post("/analyses/test.ages/", FORM)
    assert response.status_code == 302
    page = client.get(response["Location"]).content.decode()
    assert "Released" in page
    assert 'id="chart"' in page and "vendor/plotly.min.js" in page
    assert "[20, 30)" in page and 'id="release-min-cohort">736<' in page


def test_form_errors_come_back_per_field_and_nothing_is_created(client, analysis, analyst) -> None:
    client.force_login(analyst)
    response = client.post("/analyses/test.ages/", {**FORM, "boundaries": "30, 20", "epsilon0": "9"})
    assert response.status_code == 400
    page = response.content.decode()
    assert "Boundaries must be strictly increasing." in page
    assert "local epsilon cap" in page
    assert not Recipe.objects.exists() and not Round.objects.exists()


def test_another_analyst_gets_404_for_the_analysis_page(client, analysis, other_analyst) -> None:
    client.force_login(other_analyst)
    assert client.get("/analyses/test.ages/").status_code == 404


def test_release_csv_download(client, analysis, analyst, django_capture_on_commit_callbacks) -> None:
    client.force_login(analyst)
    with django_capture_on_commit_callbacks(execute=True):
        location = client.post("/analyses/test.ages/", FORM)["Location"]
    csv_text = client.get(location + "release.csv").content.decode()
    assert csv_text.splitlines()[0] == "cohort,bucket,estimate,standard_error,ci_low,ci_high"
    assert len(csv_text.splitlines()) == 1 + 8


def test_release_numbers_are_shown_with_one_decimal() -> None:
    from analyses.templatetags.numbers import decimal1

    assert [decimal1(v) for v in (12.345, -0.04, 3, None)] == ["12.3", "-0.0", "3.0", ""]
