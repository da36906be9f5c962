"""The outcome of an action lands at the top of the page it leads to (base.html's #messages,
focused by outcome.js), in words, with grouped numbers; each field's problem stays under it."""

from __future__ import annotations

import pytest

from analyses.models import Recipe, Round
from analyses.templatetags.numbers import count, decimal1
from tests.unit.test_dashboard import FORM

pytestmark = pytest.mark.django_db


def _top(page: str) -> str:
    """The outcome block, which must come before the page's own heading."""
    start = page.index('id="messages"')
    assert start < page.index("<h1"), "the outcome is not at the top of the page"
    return page[start : page.index("</div>", start)]


def test_run_lands_on_the_round_page_with_what_started_at_the_top(
    client, analysis, analyst, django_capture_on_commit_callbacks
) -> None:
    client.force_login(analyst)
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post("/analyses/test.ages/", {**FORM, "action": "run"})
    round_ = Round.objects.get()
    page = client.get(response["Location"]).content.decode()
    assert f"Round {round_.pk} started" in _top(page)
    # Shown once: the next visit has no outcome left over.
    assert 'id="messages"' not in client.get(response["Location"]).content.decode()


def test_dry_run_says_what_would_happen_at_the_top_with_grouped_numbers(client, analysis, analyst) -> None:
    client.force_login(analyst)
    response = client.post("/analyses/test.ages/", {**FORM, "action": "dry-run"})
    assert response.status_code == 200
    top = _top(response.content.decode())
    size = analysis.fleet.size
    assert "Dry run, nothing spent:" in top and f"of {size:,} devices would answer" in top
    assert 'role="status"' in top
    assert not Round.objects.exists()


def test_a_refused_recipe_says_so_at_the_top_and_names_the_fields(client, analysis, analyst) -> None:
    client.force_login(analyst)
    response = client.post("/analyses/test.ages/", {**FORM, "boundaries": "30, 20", "epsilon0": "9"})
    assert response.status_code == 400
    top = _top(response.content.decode())
    assert "Nothing was run or spent: the recipe has" in top and "each shown under its field below" in top
    assert 'role="alert"' in top
    assert not Recipe.objects.exists() and not Round.objects.exists()


def test_counts_and_estimates_have_thousands_separators() -> None:
    assert [count(v) for v in (100000, 19485.0, 3, None, "n/a")] == ["100,000", "19,485", "3", "", "n/a"]
    assert [decimal1(v) for v in (12345.67, -1234.04, 3, None)] == ["12,345.7", "-1,234.0", "3.0", ""]
