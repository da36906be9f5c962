"""In a real Chromium against a live server and a real worker: follow a round, drill down, cancel one."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone
from playwright.sync_api import expect

from analyses.models import Analysis, Round
from analyses.services.recipes import recipe_create
from analyses.services.rounds import round_dispatch, round_shard_run
from tests.e2e.screenshots import shot

pytestmark = pytest.mark.e2e


# demo.refinement: perplexity, 4 rounds of epsilon 1 allowed. epsilon0 4, epsilon 1 and delta 1e-6
# need a minimum cohort of 2,203 of the 100,000 demo devices (8,762 by the closed form).
PERPLEXITY = {
    "recipeIdentifier": "perplexity",
    "query": "select perplexity from ModelMetrics",
    "dataTypeContent": {"perplexity": {"dataType": "BucketedType", "boundaries": [0, 25, 50, 75, 100, 125]}},
    "privacy": {"mechanism": "asymmetric_ohe", "epsilon0": 4.0, "epsilon": 1.0, "delta": 1e-6},
}


def sign_in(page, url: str) -> None:
    page.goto(url)
    page.get_by_label("Username").fill("analyst")
    page.get_by_label("Password").fill("analyst-demo-password")
    page.get_by_role("button", name="Sign in").click()


def test_a_round_runs_to_its_release_and_a_click_on_a_bar_prefills_its_refinement(demo, live_server, page) -> None:
    sign_in(page, f"{live_server.url}/analyses/demo.refinement/")
    page.get_by_label("Bucket boundaries").fill("0, 25, 50, 75, 100, 125")
    page.get_by_label("Local epsilon (ε₀)").fill("4")
    page.get_by_label("Aggregate epsilon (ε)").fill("1")
    page.get_by_role("button", name="Run", exact=True).click()
    page.get_by_role("button", name="Run and spend").click()  # Run asks before it spends

    # The page follows the round (status.json) until it is released, then patches itself in place
    # with the release (static/js/live.js): the document is never reloaded.
    expect(page.get_by_role("progressbar", name="Shards done")).to_be_attached()
    expect(page.locator("#messages")).to_contain_text("started")  # the outcome of Run, at the top
    page.evaluate("window.__notReloaded = true")
    expect(page.locator("#release-reports")).to_have_text("100,000", timeout=90_000)
    bar = page.get_by_role("progressbar", name="Shards done")
    expect(bar).to_have_attribute("value", "4")  # 100,000 devices in the default 25,000-device shards
    expect(bar).to_have_attribute("max", "4")
    expect(page.locator("#progress-text")).to_contain_text("4 of 4 shards done")
    expect(page.locator("#progress-text")).to_contain_text("100,000 devices answered")
    assert page.evaluate("window.__notReloaded === true")
    # Finished: how long it took, no "time left", and the refusals are not "so far".
    expect(page.locator("#eta")).to_have_count(0)
    expect(page.locator("#progress-text")).not_to_contain_text("time left")
    expect(page.locator("#elapsed")).to_have_text(re.compile(r"^\d+ (s|min \d\d s)$"))
    expect(page.locator("#refusals")).to_contain_text("None: every device asked answered.")
    expect(page.locator("#chart.js-plotly-plot")).to_be_attached()  # plotly and chart.js loaded by the patch

    # Chart and table: OOV + 6 buckets, each with a Refine link for keyboard and screen-reader users.
    expect(page.locator("#chart .bars .point")).to_have_count(7, timeout=15_000)
    rows = page.locator("#release-table tbody tr")
    expect(rows).to_have_count(7)
    expect(rows.nth(2)).to_contain_text("[25, 50)")
    expect(page.get_by_role("link", name="Refine bucket [25, 50)")).to_be_visible()
    expect(page.get_by_role("link", name="Download JSON")).to_be_visible()
    first_round = Round.objects.get()

    # One click on the bar of [25, 50) opens the analysis page with the refined recipe and its cost.
    bar_25_50 = page.locator("#chart .bars .point path").nth(2)
    bar_25_50.scroll_into_view_if_needed()
    box = bar_25_50.bounding_box()
    # plotly's drag layer lies over the bars and takes the click: a pointer click at the bar's centre.
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.mouse.down()
    page.mouse.up()
    expect(page).to_have_url(f"{live_server.url}/analyses/demo.refinement/?refine={first_round.pk}&cohort=&bucket=2")
    expect(page.get_by_label("Bucket boundaries")).to_have_value("25, 30, 35, 40, 45, 50")
    cost = page.locator("#refine-cost")
    expect(cost).to_contain_text(f"Refining bucket [25, 50) of round #{first_round.pk}: this round will spend ε = 1")
    expect(cost).to_contain_text("analysis: ε 3 of 4 left now, 2 after; 3 of 4 reports left now, 2 after")
    expect(page.locator("#refine-explanation")).to_contain_text("Splits perplexity bucket [25, 50) into 5 buckets")
    shot(page, "drilldown")

    page.get_by_role("button", name="Run", exact=True).click()
    page.get_by_role("button", name="Run and spend").click()  # Run asks before it spends
    expect(page.locator("#release-reports")).to_have_text("100,000", timeout=90_000)
    expect(page.locator("#release-table tbody tr")).to_have_count(7)
    expect(page.locator("#release-table tbody tr").nth(1)).to_contain_text("[25, 30)")
    assert Round.objects.count() == 2


def test_a_half_run_round_shows_its_time_left_and_can_be_cancelled(demo, live_server, page) -> None:
    # Dispatched by hand and never sent to the worker, 1 of the 4 shards answered: the round
    # stays part run for as long as the test looks at it.
    analyst = get_user_model().objects.get(username="analyst")
    analysis = Analysis.objects.get(identifier="demo.refinement")
    recipe = recipe_create(analysis=analysis, content=PERPLEXITY, user=analyst)
    round_ = Round.objects.create(recipe=recipe, seed=7, created_by=analyst)
    for shard_id in round_dispatch(round_id=round_.pk)[:1]:
        round_shard_run(round_id=round_.pk, shard_id=shard_id)
    Round.objects.filter(pk=round_.pk).update(started_at=timezone.now() - timedelta(seconds=60))

    sign_in(page, f"{live_server.url}/rounds/{round_.pk}/")
    bar = page.get_by_role("progressbar", name="Shards done")
    expect(bar).to_have_attribute("value", "1")
    expect(page.locator("#round-status")).to_have_text("Running on devices")
    expect(page.locator("#progress-text")).to_contain_text("1 of 4 shards done")
    expect(page.locator("#progress-text")).to_contain_text("25,000 devices answered")
    # 1 shard in a minute: the 3 left take about 3 times that, 3 min 00 s and counting.
    expect(page.locator("#eta")).to_have_text(re.compile(r"^about 3 min [0-5]\d s$"))
    shot(page, "round_progress")

    page.on("dialog", lambda dialog: dialog.accept())  # "Cancel this round?"
    page.get_by_role("button", name="Cancel round").click()
    expect(page.locator("#round-status")).to_have_text("Cancelled")
    expect(page.locator("#cancelled")).to_contain_text("Cancelled by analyst")
    expect(page.locator("#cancelled")).to_contain_text("Nothing was released")
    # How many is not said: a suppressed batch's size would be in it (issue 29, requirement 4).
    expect(page.locator("#cancelled")).to_contain_text(
        "The devices that answered before the cancel keep their budget spent"
    )
    expect(page.get_by_role("button", name="Cancel round")).to_have_count(0)
    assert Round.objects.get(pk=round_.pk).status == Round.Status.CANCELLED
