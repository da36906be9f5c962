"""In a real Chromium 390 px wide: the writing side's pages (the editor with Run's question, the
adaptive start form, the parameter guide, a text-only analysis) never widen the page."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

pytestmark = pytest.mark.e2e


@pytest.fixture
def phone(browser):
    context = browser.new_context(viewport={"width": 390, "height": 844})
    page = context.new_page()
    yield page
    context.close()


def width(page) -> int:
    return page.evaluate("document.documentElement.scrollWidth")


def fits(locator) -> bool:
    """The element ends inside the viewport and nothing in it overflows it (the analysis page's
    other tables are the shared layout's; these are the editor's own boxes)."""
    return locator.evaluate("e => e.getBoundingClientRect().right <= 390 && e.scrollWidth <= e.clientWidth")


def test_the_writing_pages_fit_a_phone(analysis, discovery, live_server, phone) -> None:
    phone.goto(f"{live_server.url}/guide/privacy/")
    phone.get_by_label("Username").fill("alice")
    phone.get_by_label("Password").fill("alice-password")
    phone.get_by_role("button", name="Sign in").click()
    expect(phone.get_by_role("heading", name="Calculator")).to_be_visible()
    assert width(phone) <= 390

    phone.goto(f"{live_server.url}/analyses/t.discovery/adaptive/")
    expect(phone.locator("#plan-sum")).to_contain_text("3 rounds")
    assert width(phone) <= 390

    phone.goto(f"{live_server.url}/analyses/t.discovery/")
    expect(phone.locator("#text-only")).to_be_visible()
    phone.locator("#text-recipe > summary").click()
    phone.locator("#text-recipe-example > summary").click()
    assert fits(phone.locator("#text-only"))

    phone.goto(f"{live_server.url}/analyses/test.ages/")
    phone.get_by_label("Aggregate epsilon (ε)").fill("1")
    phone.get_by_label("Local epsilon (ε₀)").fill("3")
    expect(phone.locator("#recipe-summary")).to_contain_text("This round will spend")
    phone.get_by_role("button", name="Run", exact=True).click()
    expect(phone.get_by_role("dialog")).to_be_visible()
    assert fits(phone.get_by_role("dialog"))
    phone.get_by_role("button", name="Not now").click()
    assert fits(phone.locator("section", has=phone.locator("#recipe-form")))
