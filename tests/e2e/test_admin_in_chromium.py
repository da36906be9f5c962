"""In a real Chromium at 1,280 px: the officer's analysis page fits the window, and the officer
approves an edit from the analysis's own page after seeing the snapshot diff."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from analyses.models import Analysis
from tests.e2e.screenshots import shot

pytestmark = pytest.mark.e2e


def page_width(page) -> int:
    return page.evaluate("document.documentElement.scrollWidth")


def test_the_officer_edits_a_budget_and_approves_it_from_the_analysis_page(analysis, live_server, page) -> None:
    page.goto(f"{live_server.url}/admin/analyses/analysis/{analysis.pk}/change/")
    page.get_by_label("Username").fill("olivia")
    page.get_by_label("Password").fill("olivia-password")
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("heading", name="Query class: what queries may read")).to_be_visible()
    assert page_width(page) <= 1280
    # Only the stream's fields are offered: KeyboardNGrams has no perplexity.
    perplexity = page.locator('input[name="query_fields"][value="perplexity"]')
    expect(perplexity).to_be_hidden()
    page.get_by_label("Data stream").select_option("ModelMetrics")
    expect(perplexity).to_be_visible()
    page.get_by_label("Data stream").select_option("KeyboardNGrams")

    # A bad value is refused by its field, in words.
    page.locator("#id_epsilon_allowed").fill("0")
    page.get_by_role("button", name="Save", exact=True).click()
    expect(page.locator(".field-epsilon_allowed .errorlist")).to_have_text(
        "Must be greater than 0: a budget of ε 0 allows no round."
    )
    expect(page.get_by_text("is violated")).to_have_count(0)
    assert page_width(page) <= 1280

    page.locator("#id_epsilon_allowed").fill("3")
    page.get_by_role("button", name="Save and continue editing").click()
    summary = page.locator("#approval-summary")
    expect(summary).to_contain_text("budget.epsilon: 2.0 → 3.0")
    assert page_width(page) <= 1280

    page.get_by_role("link", name="Approve…").click()
    expect(page.locator("#approval-diff")).to_contain_text("budget.epsilon: 2.0 → 3.0")
    shot(page, "admin_approve")
    assert Analysis.objects.get(pk=analysis.pk).enforced.epsilon_allowed == 2.0
    page.get_by_role("button", name="Approve: send devices this policy").click()
    expect(page.locator(".messagelist")).to_contain_text("Approved test.ages: devices of fleet small now enforce")
    expect(page.locator("#approval-summary")).to_contain_text("nothing waits for approval")
    assert Analysis.objects.get(pk=analysis.pk).enforced.epsilon_allowed == 3.0

    for path in (
        "/admin/analyses/analysis/",
        "/admin/analyses/analysis/add/",
        f"/admin/analyses/analysis/{analysis.pk}/approve/",
    ):
        page.goto(f"{live_server.url}{path}")
        assert page_width(page) <= 1280, path
