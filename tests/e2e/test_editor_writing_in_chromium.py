"""In a real Chromium: Run asks before it spends, saying what the round spends and what remains; an
analysis of text fields only gets no broken histogram editor; the privacy fields link to the guide."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from analyses.models import Round
from analyses.services.rounds import round_create_and_start
from tests.e2e.screenshots import shot

pytestmark = pytest.mark.e2e


def sign_in(page, url: str) -> None:
    page.goto(url)
    page.get_by_label("Username").fill("alice")
    page.get_by_label("Password").fill("alice-password")
    page.get_by_role("button", name="Sign in").click()


def test_run_shows_what_it_will_spend_and_what_remains_and_asks_first(analysis, live_server, page) -> None:
    sign_in(page, f"{live_server.url}/analyses/{analysis.identifier}/")
    page.get_by_label("Local epsilon (ε₀)").fill("3")
    page.get_by_label("Aggregate epsilon (ε)").fill("1")
    expect(page.locator("#recipe-summary")).to_contain_text("This round will spend ε = 1 of the 2 left")

    page.get_by_role("button", name="Run", exact=True).click()
    dialog = page.get_by_role("dialog", name="Run this round and spend its budget?")
    expect(dialog).to_be_visible()
    expect(dialog.locator("#confirm-spend-cost")).to_have_text(
        "This round spends ε = 1 (δ = 0.000001) and one report on each of the about 5,000 devices asked."
    )
    rows = dialog.locator("tbody tr")
    expect(rows.nth(0)).to_have_text(re.compile(r"Analysis test\.ages\s*2\s*1\s*2\s*1"))
    expect(rows.nth(1)).to_have_text(re.compile(r"Field age\s*2\s*1\s*2\s*1"))
    expect(page.get_by_role("button", name="Not now")).to_be_focused()  # the safe answer first
    shot(page, "run_question", dialog)

    # Declining spends nothing and leaves the form as it was.
    page.get_by_role("button", name="Not now").click()
    expect(dialog).to_be_hidden()
    expect(page.get_by_label("Aggregate epsilon (ε)")).to_have_value("1")
    assert not Round.objects.exists()

    # Escape declines too.
    page.get_by_role("button", name="Run", exact=True).click()
    expect(dialog).to_be_visible()
    page.keyboard.press("Escape")
    expect(dialog).to_be_hidden()
    assert not Round.objects.exists()

    # Agreeing runs it.
    page.get_by_role("button", name="Run", exact=True).click()
    page.get_by_role("button", name="Run and spend").click()
    expect(page).to_have_url(re.compile(r"/rounds/\d+/$"))
    assert Round.objects.count() == 1


def test_a_refused_run_is_not_asked_about_and_says_why_by_the_field(analysis, live_server, page) -> None:
    sign_in(page, f"{live_server.url}/analyses/{analysis.identifier}/")
    page.get_by_label("Minimum cohort", exact=True).fill("200000")
    expect(page.locator('[data-field="min_cohort"] .error')).to_contain_text("More than this fleet can reach")
    expect(page.locator('[data-field="epsilon"] .error')).to_have_count(0)
    page.get_by_role("button", name="Run", exact=True).click()
    # No dialog: the server refuses, spends nothing, and says why under the field.
    expect(page.locator('[data-field="min_cohort"] .error').first).to_contain_text("More than this fleet can reach")
    expect(page.get_by_role("dialog")).to_have_count(0)
    assert not Round.objects.exists()


def test_a_text_only_analysis_says_what_it_can_run_without_a_red_error(discovery, live_server, page) -> None:
    errors: list[str] = []
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    sign_in(page, f"{live_server.url}/analyses/{discovery.identifier}/")
    section = page.locator("#text-only")
    expect(section).to_contain_text("The fields of this analysis are text: ngrams.")
    expect(section).to_contain_text("A histogram needs a number field")
    expect(page.locator(".error")).to_have_count(0)
    expect(page.locator("#recipe-form")).to_have_count(0)
    section.get_by_role("link", name="an n-gram discovery").click()
    expect(page).to_have_url(f"{live_server.url}/analyses/{discovery.identifier}/adaptive/")
    assert errors == []


def test_each_privacy_field_opens_its_entry_in_the_parameter_guide(analysis, live_server, page) -> None:
    sign_in(page, f"{live_server.url}/analyses/{analysis.identifier}/")
    page.get_by_role("link", name="how to choose Delta (δ)").click()
    expect(page).to_have_url(f"{live_server.url}/guide/privacy/#delta")
    expect(page.get_by_role("heading", name="Calculator")).to_be_visible()
    page.get_by_label("Aggregate epsilon (ε)").fill("0.5")
    page.get_by_label("Sampling rate (q)").fill("0.01")
    page.get_by_role("button", name="Compute").click()
    expect(page.locator("#calc-verdict")).to_contain_text("Too few: nothing would be released")
    shot(page, "guide")


def test_a_used_up_report_count_shows_above_the_fields_in_words_not_under_epsilon(
    analysis, recipe, analyst, live_server, page
) -> None:
    for name in ("first", "second"):  # the policy's two reports
        round_create_and_start(analysis=analysis, content={**recipe, "recipeIdentifier": name}, user=analyst)
    sign_in(page, f"{live_server.url}/analyses/{analysis.identifier}/")
    expect(page.locator("#recipe-alert")).to_have_text(
        "The analysis has used all 2 of its reports: each device answers it at most 2 times, "
        "and every round started counts one."
    )
    expect(page.locator('[data-field="epsilon"] .error')).to_have_count(0)
