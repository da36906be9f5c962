"""In a real Chromium: a joint histogram (Figure 4's age × n-grams, per locale) reads as a heatmap."""

from __future__ import annotations

import re
import time

import pytest
from django.contrib.auth import get_user_model
from playwright.sync_api import expect

from analyses.models import Analysis, Round
from analyses.services.rounds import round_create_and_start
from tests.e2e.test_charts_on_a_phone_in_chromium import assert_legible

pytestmark = pytest.mark.e2e

# Figure 4 of seed 000 on demo.keyboard, within Table 1's caps: epsilon0 2 (age), epsilon 0.3.
FIGURE_4 = {
    "recipeIdentifier": "figure-4",
    "query": "select age, ngrams from KeyboardNGrams",
    "cohorts": ["locale"],
    "dataTypeContent": {
        "age": {"dataType": "BucketedType", "boundaries": [20, 30, 40, 50, 60, 70, 80]},
        "ngrams": {
            "dataType": "PrefixTree",
            "tree": {"root": ["null", "hello", "i"], "hello": ["null", "world"], "i": ["went", "got"]},
            "tokens": ["a", "and", "got", "hello", "home", "i", "school", "went", "world"],
        },
        "combinations": {"dataType": "CombinationType", "structure": ["age", "ngrams"]},
    },
    "privacy": {"mechanism": "asymmetric_ohe", "epsilon0": 2.0, "epsilon": 0.3, "delta": 1e-6},
}


def test_a_joint_release_is_drawn_as_a_heatmap_per_locale(demo, live_server, page) -> None:
    analyst = get_user_model().objects.get(username="analyst")
    analysis = Analysis.objects.get(identifier="demo.keyboard")
    # Figure 4 splits by locale on purpose (some locales fall below the minimum cohort): confirmed.
    round_ = round_create_and_start(analysis=analysis, content=FIGURE_4, user=analyst, confirm_small_cohorts=True)
    deadline = time.monotonic() + 120
    while not Round.objects.get(pk=round_.pk).is_finished and time.monotonic() < deadline:
        time.sleep(0.3)
    assert Round.objects.get(pk=round_.pk).status == Round.Status.RELEASED

    page.goto(f"{live_server.url}/rounds/{round_.pk}/")
    page.get_by_label("Username").fill("analyst")
    page.get_by_label("Password").fill("analyst-demo-password")
    page.get_by_role("button", name="Sign in").click()
    chart = page.locator("#chart")
    expect(chart).to_have_attribute("aria-label", re.compile(r"^Heatmap of debiased counts of age × ngrams"))
    expect(chart).to_be_visible()
    # Locales that clear the minimum cohort of 1,670 have a heatmap each.
    expect(chart.locator(".heatmaplayer").first).to_be_attached(timeout=15_000)  # plotly draws 613+ cells
    # Each cohort's panel is titled by its cohort, above it.
    expect(chart.locator(".annotation-text", has_text=re.compile(r"^Cohort .*en_US"))).to_have_count(1)
    expect(page.get_by_text("[30, 40) × hello world </s>").first).to_be_attached()
    # Legible on a wide screen and on a phone: no text over another, none cut at the edge.
    assert_legible(page, "chart", 1280)
    page.set_viewport_size({"width": 390, "height": 900})
    page.reload()
    expect(chart.locator(".heatmaplayer").first).to_be_attached(timeout=15_000)
    assert_legible(page, "chart", 390)
