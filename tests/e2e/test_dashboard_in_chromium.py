"""In a real Chromium against a live server and a real worker: sign in, run the demo recipe, read the chart."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.e2e.screenshots import shot

pytestmark = pytest.mark.e2e


def test_analyst_signs_in_runs_the_demo_recipe_and_sees_the_chart(demo, live_server, page) -> None:
    page.goto(f"{live_server.url}/")
    expect(page).to_have_url(f"{live_server.url}/login/?next=/")
    page.get_by_label("Username").fill("analyst")
    page.get_by_label("Password").fill("analyst-demo-password")
    page.get_by_role("button", name="Sign in").click()

    page.get_by_role("link", name="demo.keyboard").click()
    expect(page.get_by_role("heading", name="demo.keyboard")).to_be_visible()
    # The form's defaults are the demo recipe: age in [20, 30, ..., 80], epsilon0 2, epsilon 0.3, delta 1e-6.
    expect(page.get_by_label("Bucket boundaries")).to_have_value("20, 30, 40, 50, 60, 70, 80")
    # The editor asks the calculators API what devices will enforce, before anything runs.
    preview = page.locator("#privacy-preview")
    expect(preview).to_contain_text("Minimum cohort: 1,670 reports (what devices enforce")
    page.get_by_label("Noise", exact=True).select_option("aggregator")
    expect(preview).to_contain_text("each aggregator adds discrete Gaussian noise with σ =")
    page.get_by_label("Noise", exact=True).select_option("client")
    expect(preview).to_contain_text("Minimum cohort: 1,670")
    # A dry run asks every device, spends nothing, and keeps the form as it was.
    page.get_by_role("button", name="Dry run").click()
    expect(page.locator("#dry-run")).to_contain_text("100,000 of 100,000 devices would answer")
    expect(page.locator("#dry-run")).to_contain_text("enough for the minimum cohort of 1,670")
    # The outcome is also at the top of the page, where the focus moved.
    expect(page.locator("#messages")).to_contain_text("Dry run, nothing spent: 100,000 of 100,000 devices would answer")
    expect(page.locator("#messages")).to_be_focused()
    expect(page.get_by_label("Bucket boundaries")).to_have_value("20, 30, 40, 50, 60, 70, 80")
    shot(page, "analysis")
    page.get_by_role("button", name="Run", exact=True).click()
    page.get_by_role("button", name="Run and spend").click()  # Run asks before it spends

    expect(page.locator("#round-progress")).to_be_attached()
    expect(page.locator("#release-reports")).to_have_text("100,000", timeout=90_000)
    expect(page.locator("#release-min-cohort")).to_have_text("1,670")
    expect(page.locator("#release-epsilon")).to_have_text("0.3")
    # plotly drew one bar per bucket: OOV + 7.
    expect(page.locator("#chart .bars .point")).to_have_count(8, timeout=15_000)
    expect(page.locator("#chart g.xtick")).to_have_count(8)  # the labels (tick marks are path.xtick)
    rows = page.locator("#release-table tbody tr")
    expect(rows).to_have_count(8)
    expect(rows.first).to_contain_text("below 20 or missing")
    shot(page, "release")

    # Simultaneous intervals are wider than per-bucket ones; the page states which it shows.
    per_bucket = rows.first.locator("td").nth(4).inner_text()
    page.get_by_label("Intervals", exact=True).select_option("simultaneous")
    page.get_by_role("button", name="Show").click()
    expect(page.locator("#release-rule")).to_contain_text("simultaneous")
    assert page.locator("#release-table tbody tr").first.locator("td").nth(4).inner_text() != per_bucket
