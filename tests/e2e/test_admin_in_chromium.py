"""In a real Chromium at 1,280 and 390 px: the officer's analysis page fits the window; an officer
edits a budget and is told it is not in force; they cannot approve their own change; another
officer approves it, rejects a later one with a reason, and the history shows both. The
analyses list shows every column, spent included, without running out of the window."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from analyses.models import Analysis, PolicyRejection
from tests.e2e.screenshots import shot

pytestmark = pytest.mark.e2e


def page_width(page) -> int:
    return page.evaluate("document.documentElement.scrollWidth")


def log_in(page, url: str, name: str) -> None:
    page.goto(url)
    page.get_by_label("Username").fill(name)
    page.get_by_label("Password").fill(f"{name}-password")
    page.get_by_role("button", name="Log in").click()


def columns_fit(page) -> bool:
    """The changelist's table is no wider than its box, and its last column ends inside the window."""
    return page.locator("#result_list").evaluate(
        "t => t.scrollWidth <= t.parentElement.clientWidth"
        " && t.querySelector('thead th:last-child').getBoundingClientRect().right <= window.innerWidth"
    )


def test_the_officer_edits_a_budget_and_approves_it_from_the_analysis_page(
    analysis, other_officer, live_server, page, browser
) -> None:
    change = f"{live_server.url}/admin/analyses/analysis/{analysis.pk}/change/"
    log_in(page, change, "olivia")
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
    expect(page.locator(".messagelist")).to_contain_text("Not in force until approved")
    summary = page.locator("#approval-summary")
    expect(summary).to_contain_text("budget.epsilon: 2.0 → 3.0")
    expect(summary).to_contain_text("Edited by olivia")
    assert page_width(page) <= 1280

    # Their own change: no approve button, and a clear word why.
    page.get_by_role("link", name="Approve or reject…").click()
    expect(page.locator("#approval-diff")).to_contain_text("budget.epsilon: 2.0 → 3.0")
    expect(page.locator("#own-change")).to_contain_text("another privacy officer must")
    expect(page.get_by_role("button", name="Approve: send devices this policy")).to_have_count(0)
    assert Analysis.objects.get(pk=analysis.pk).enforced.epsilon_allowed == 2.0

    # Another officer approves it.
    oscar = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    log_in(oscar, f"{live_server.url}/admin/analyses/analysis/{analysis.pk}/approve/", "oscar")
    expect(oscar.locator("#approval-diff")).to_contain_text("budget.epsilon: 2.0 → 3.0")
    shot(oscar, "admin_approve")
    oscar.get_by_role("button", name="Approve: send devices this policy").click()
    expect(oscar.locator(".messagelist")).to_contain_text("Approved test.ages: devices of fleet small now enforce")
    expect(oscar.locator("#approval-summary")).to_contain_text("nothing waits for approval")
    assert Analysis.objects.get(pk=analysis.pk).enforced.epsilon_allowed == 3.0

    # A later edit, rejected: a blank reason is refused by its field, a reason discards the edit.
    page.goto(change)
    page.locator("#id_epsilon_allowed").fill("8")
    page.get_by_role("button", name="Save and continue editing").click()
    oscar.goto(f"{live_server.url}/admin/analyses/analysis/{analysis.pk}/approve/")
    oscar.get_by_label("Reason for rejecting").fill("   ")
    oscar.get_by_role("button", name="Reject: discard this edit").click()
    expect(oscar.locator("#reject-form .errorlist")).to_have_text(
        "Say why you reject it: the reason is recorded and shown in the analysis's history."
    )
    assert not PolicyRejection.objects.exists()
    oscar.get_by_label("Reason for rejecting").fill("Eight is past what the study agreed.")
    oscar.get_by_role("button", name="Reject: discard this edit").click()
    expect(oscar.locator(".messagelist")).to_contain_text("it is discarded")
    expect(oscar.locator("#id_epsilon_allowed")).to_have_value("3.0")

    oscar.get_by_role("link", name="History").click()
    history = oscar.locator("#policy-history")
    expect(history.locator("tr.policy-rejected")).to_contain_text("Eight is past what the study agreed.")
    expect(history.locator("tr.policy-rejected")).to_contain_text("budget.epsilon: 3.0 → 8.0")
    expect(history.locator("tr.policy-approved").first).to_contain_text("oscar")
    expect(history.locator("tr.policy-approved").first).to_contain_text("budget.epsilon: 2.0 → 3.0")
    shot(oscar, "admin_history")
    assert page_width(oscar) <= 1280

    # The list: every column inside the window beside its filters, spent included.
    oscar.goto(f"{live_server.url}/admin/analyses/analysis/")
    expect(oscar.get_by_role("columnheader", name="Spent (ε, δ)")).to_be_visible()
    assert columns_fit(oscar) and page_width(oscar) <= 1280
    shot(oscar, "admin_analyses_list")

    for path in (
        "/admin/analyses/analysis/",
        "/admin/analyses/analysis/add/",
        f"/admin/analyses/analysis/{analysis.pk}/approve/",
        f"/admin/analyses/analysis/{analysis.pk}/history/",
    ):
        page.goto(f"{live_server.url}{path}")
        assert page_width(page) <= 1280, path
        oscar.set_viewport_size({"width": 390, "height": 844})
        oscar.goto(f"{live_server.url}{path}")
        assert page_width(oscar) <= 390, path
        oscar.set_viewport_size({"width": 1280, "height": 900})
