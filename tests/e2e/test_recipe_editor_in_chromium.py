"""In a real Chromium against a live server: the recipe editor checks as you type, keeps the form and
the JSON in sync, and draws the curve of aggregate epsilon against cohort size with its table."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from playwright.sync_api import expect

from analyses.models import Recipe, Round

pytestmark = pytest.mark.e2e

SCREENSHOTS = os.environ.get("PFS_SCREENSHOTS")  # set to a folder to keep the pages as PNGs


def test_the_recipe_editor_checks_as_you_type_and_keeps_form_and_json_in_sync(analysis, live_server, page) -> None:
    page.goto(f"{live_server.url}/analyses/{analysis.identifier}/")
    page.get_by_label("Username").fill("alice")
    page.get_by_label("Password").fill("alice-password")
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="test.ages")).to_be_visible()

    epsilon = page.get_by_label("Aggregate epsilon (ε)")
    recipe_json = page.get_by_label("Recipe JSON", exact=True)
    summary = page.locator("#recipe-summary")
    epsilon_message = page.locator('[data-field="epsilon"] .error')

    # An invalid epsilon: the server's message appears by the field, without submitting.
    epsilon.fill("0")
    expect(epsilon_message).to_have_text("Must be greater than 0.")
    expect(epsilon).to_have_attribute("aria-invalid", "true")
    expect(summary).to_contain_text("Not valid yet")

    # Fixed: the message goes, and the summary says what the round would cost.
    epsilon.fill("1")
    expect(summary).to_contain_text(
        "This round will spend ε = 1 of the 2 left for the analysis; field age: 1 of 2 left."
    )
    expect(epsilon_message).to_have_count(0)
    expect(page.locator("#standard-error")).to_contain_text("Expected standard error per bucket for the 5,000 devices")
    # The form wrote the JSON.
    expect(recipe_json).to_have_value(re.compile(r'"epsilon": 1,'))
    page.get_by_label("Local epsilon (ε₀)").fill("3")
    expect(recipe_json).to_have_value(re.compile(r'"epsilon0": 3,'))

    # The JSON writes the form, and the check follows.
    recipe_json.fill(recipe_json.input_value().replace('"epsilon": 1,', '"epsilon": 1.5,'))
    expect(epsilon).to_have_value("1.5")
    expect(summary).to_contain_text("This round will spend ε = 1.5 of the 2 left for the analysis")

    # The curve: plotly drew it, and its table alternative opens from the keyboard.
    expect(page.locator("#curve-chart svg.main-svg").first).to_be_attached(timeout=15_000)
    expect(page.locator("#curve-chart .scatterlayer .trace")).to_have_count(4)
    page.locator("#curve-details summary").focus()
    page.keyboard.press("Enter")
    rows = page.locator("#curve-table tbody tr")
    expect(rows).to_have_count(8)  # n = 10^2 ... 10^8, and the recipe's minimum cohort
    expect(rows.filter(has_text="this recipe's minimum cohort")).to_have_count(1)
    expect(page.locator("#curve-caption")).to_contain_text("ε₀ = 3")
    if SCREENSHOTS:
        Path(SCREENSHOTS).mkdir(parents=True, exist_ok=True)
        page.locator("section", has=page.locator("#recipe-form")).screenshot(
            path=str(Path(SCREENSHOTS) / "recipe_editor.png")
        )

    # JSON that does not parse says where, and the form keeps its values.
    recipe_json.fill('{\n  "version": "1",\n  oops\n}')
    expect(page.locator("#recipe-json-status")).to_contain_text("Not valid JSON at line 3, column 3")
    expect(recipe_json).to_have_attribute("aria-invalid", "true")
    expect(epsilon).to_have_value("1.5")
    # Editing the form then rewrites the JSON from the form.
    epsilon.fill("1")
    expect(recipe_json).to_have_value(re.compile(r'"epsilon0": 3,\s+"epsilon": 1,'))
    expect(page.locator("#recipe-json-status")).to_contain_text("In sync with the form")

    # Accuracy first: a recipe whose noise exceeds most buckets' counts is valid, but says it is too noisy.
    page.get_by_label("Bucket boundaries").fill(", ".join(str(b) for b in range(1, 1000)))  # 1,000 buckets
    expect(summary).to_contain_text("Valid, but too noisy")
    expect(page.locator("#standard-error")).to_contain_text("Too noisy: The expected noise exceeds what most buckets")
    # The aggregators' noise: the discrete Laplace writes pure ε-DP, with no delta.
    page.get_by_label("Noise", exact=True).select_option("aggregator")
    page.get_by_label("Aggregators' noise").select_option("laplace")
    expect(recipe_json).to_have_value(re.compile(r'"noiseDistribution": "laplace"'))
    assert '"delta"' not in recipe_json.input_value()

    # Nothing of this created or ran anything.
    assert not Recipe.objects.exists() and not Round.objects.exists()
