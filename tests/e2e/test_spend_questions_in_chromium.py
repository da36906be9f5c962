"""In a real Chromium: every action that spends asks first, in one dialog that says what it spends,
what remains after it and which cohorts will be suppressed (issue 31, items 1 and 3): Run on a
split recipe and the drill-down's "Run this refinement…", at 1,280 and 390 px. And the outcome of
a start ("Round 12 started") goes once the round page it is on shows the round finished (item 12)."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from analyses.models import Round
from analyses.services.recipes import recipe_create
from analyses.services.rounds import round_aggregate, round_create_and_start, round_dispatch, round_shard_run

pytestmark = pytest.mark.e2e


def sign_in(page, url: str) -> None:
    page.goto(url)
    page.get_by_label("Username").fill("alice")
    page.get_by_label("Password").fill("alice-password")
    page.get_by_role("button", name="Sign in").click()


def fits_the_viewport(page) -> bool:
    return page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")


@pytest.mark.parametrize("width", [1280, 390])
def test_a_split_run_names_the_suppressed_cohorts_before_the_spend_and_starts_on_one_answer(
    analysis, live_server, page, width
) -> None:
    page.set_viewport_size({"width": width, "height": 900})
    sign_in(page, f"{live_server.url}/analyses/{analysis.identifier}/")
    page.get_by_label("Local epsilon (ε₀)").fill("2")
    page.get_by_label("Aggregate epsilon (ε)").fill("1")
    page.get_by_label("Sampling rate").fill("0.3")
    page.get_by_label("locale").check()

    page.get_by_role("button", name="Run", exact=True).click()
    dialog = page.get_by_role("dialog", name="Run this round and spend its budget?")
    expect(dialog).to_be_visible()
    # In the question, before the spend: 3 of the 5 locales are expected below the minimum cohort.
    suppressed = dialog.locator("#confirm-spend-suppressed")
    expect(suppressed).to_contain_text("3 of 5 batches are expected below the minimum cohort and would be suppressed")
    expect(suppressed).to_contain_text("locale=fr_FR")
    expect(suppressed).not_to_contain_text("en_US")
    expect(dialog.locator("tbody tr").nth(0)).to_have_text(re.compile(r"Analysis test\.ages\s*2\s*1\s*2\s*1"))
    expect(dialog.locator("#confirm-spend-covers")).to_have_text(
        "Running it confirms what is said above: you will not be asked again."
    )
    assert dialog.bounding_box()["width"] <= width and fits_the_viewport(page)

    # One answer: the round starts, with no red alert and no second go-ahead to give.
    page.get_by_role("button", name="Run and spend").click()
    expect(page).to_have_url(re.compile(r"/rounds/\d+/$"))
    expect(page.locator("#confirm-small-cohorts")).to_have_count(0)
    assert Round.objects.count() == 1


@pytest.mark.parametrize("width", [1280, 390])
def test_run_this_refinement_asks_in_a_dialog_first(
    transactional_db, analysis, analyst, recipe, live_server, page, width
):
    page.set_viewport_size({"width": width, "height": 900})
    first = round_create_and_start(analysis=analysis, content=recipe, user=analyst)
    sign_in(page, f"{live_server.url}/analyses/{analysis.identifier}/?refine={first.pk}&cohort=&bucket=2")
    # The cost line says before and after.
    expect(page.locator("#refine-cost")).to_contain_text("analysis: ε 1 of 2 left now, 0 after")

    page.get_by_role("button", name="Run this refinement…").click()
    dialog = page.get_by_role("dialog", name="Run this refinement and spend its budget?")
    expect(dialog).to_be_visible()
    expect(dialog.locator("#refine-question-cost")).to_have_text(
        "This round spends ε = 1 (δ = 0.000001) and one report on each of the about 5,000 devices asked."
    )
    expect(dialog.locator("tbody tr").nth(1)).to_have_text(re.compile(r"Field age\s*1\s*0\s*1\s*0"))
    expect(page.get_by_role("link", name="Not now")).to_be_focused()  # the safe answer first
    assert dialog.bounding_box()["width"] <= width and fits_the_viewport(page)

    # Declining spends nothing.
    page.get_by_role("link", name="Not now").click()
    expect(dialog).to_be_hidden()
    assert Round.objects.count() == 1

    page.get_by_role("button", name="Run this refinement…").click()
    page.get_by_role("button", name="Run and spend").click()
    expect(page).to_have_url(re.compile(r"/rounds/\d+/$"))
    assert Round.objects.count() == 2
    assert Round.objects.exclude(pk=first.pk).get().recipe.identifier == "ages-refine-2"


def test_a_round_started_message_goes_when_the_followed_round_is_released(
    transactional_db, analysis, analyst, recipe, live_server, page
) -> None:
    # A round half run (dispatched by hand, one shard answered), followed by its page.
    round_ = Round.objects.create(
        recipe=recipe_create(analysis=analysis, content=recipe, user=analyst), seed=7, created_by=analyst
    )
    shards = round_dispatch(round_id=round_.pk)
    round_shard_run(round_id=round_.pk, shard_id=shards[0])
    sign_in(page, f"{live_server.url}/rounds/{round_.pk}/")
    expect(page.locator("#round-status")).to_have_text("Running on devices")
    # What the server shows after Run (static/js/live.js keeps #messages across patches): the
    # outcome of the start, and another message that is not about the round running.
    page.evaluate(
        """() => {
            const box = document.createElement("div");
            box.id = "messages";
            box.innerHTML = '<p class="message while-running success">Round started: its progress is below.</p>' +
                            '<p class="message info">Another outcome.</p>';
            document.querySelector("main").prepend(box);
        }"""
    )
    for shard_id in shards[1:]:
        round_shard_run(round_id=round_.pk, shard_id=shard_id)
    round_aggregate(round_id=round_.pk)

    expect(page.locator("#release-reports")).to_be_visible(timeout=30_000)
    expect(page.locator("#messages")).not_to_contain_text("Round started")
    expect(page.locator("#messages")).to_contain_text("Another outcome.")
