"""In a real Chromium against a live server and a real worker: start an n-gram discovery from the
dashboard, follow it round by round, and read the discovered tree."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from playwright.sync_api import expect

from analyses.models import AdaptiveRun

pytestmark = pytest.mark.e2e

SCREENSHOTS = os.environ.get("PFS_SCREENSHOTS")  # set to a folder to keep the pages as PNGs


def shot(page, name: str, *, height: int = 1900) -> None:
    """The top of the page: status, budget plan and the tree (the tables below run long)."""
    if SCREENSHOTS:
        Path(SCREENSHOTS).mkdir(parents=True, exist_ok=True)
        height = min(height, page.evaluate("document.documentElement.scrollHeight"))
        clip = {"x": 0, "y": 0, "width": page.viewport_size["width"], "height": height}
        page.screenshot(path=str(Path(SCREENSHOTS) / f"{name}.png"), full_page=True, clip=clip)


def test_analyst_starts_a_discovery_and_reads_the_discovered_tree(demo, live_server, page) -> None:
    page.goto(f"{live_server.url}/")
    page.get_by_label("Username").fill("analyst")
    page.get_by_label("Password").fill("analyst-demo-password")
    page.get_by_role("button", name="Sign in").click()

    page.get_by_role("link", name="demo.discovery", exact=True).click()
    page.get_by_role("link", name="Interactive analyses").click()
    expect(page.get_by_role("heading", name="Interactive analyses of demo.discovery")).to_be_visible()
    # The spec is prefilled for this analysis: three levels of epsilon 1, and the static baseline twin.
    spec = page.get_by_label("Spec (JSON)")
    expect(spec).to_have_value(re.compile(r'"kind": "ngram_discovery".*"maxLength": 3', re.DOTALL))
    expect(spec).to_have_value(re.compile(r'"baseline": \{\s*"analysis": "demo.discovery-static"'))
    page.get_by_role("button", name="Start", exact=True).click()
    # Start asks first, with the plan it would fix.
    expect(page.locator("#spend-question")).to_be_focused()
    expect(page.locator("#spend-question-cost")).to_contain_text("The plan: 3 rounds, ε 3 in all of the 3 left")
    page.get_by_role("button", name="Start and spend").click()

    # The run page follows the run (status.json) and redraws as each level is recorded.
    expect(page.locator("#adaptive-progress")).to_be_visible()
    expect(page.locator("#plan-table tbody tr")).to_have_count(3)
    expect(page.locator("#run-status")).to_have_text("Finished", timeout=180_000)
    expect(page.locator("#stop-reason")).to_contain_text(
        "Finished: all 3 planned rounds ran, then the static baseline."
    )
    expect(page.locator("#levels-done")).to_have_text("3")
    run = AdaptiveRun.objects.get()
    assert run.status == AdaptiveRun.Status.FINISHED and len(run.levels) == 3

    # The tree as a folding table: the 1-grams first, "hello world" once "hello" is opened.
    tree = page.locator("#tree-table")
    hello_world = tree.locator('tr[data-id="hello world"] th')
    expect(hello_world).to_be_hidden()
    tree.get_by_role("button", name=re.compile(r"^hello: \d+ extensions?$")).click()
    expect(hello_world).to_be_visible()
    # The sunburst, one click away: plotly draws it when opened, "world" grows under "hello".
    page.get_by_text("The tree as a sunburst").click()
    chart = page.locator("#tree-chart")
    expect(chart.locator("g.slice").first).to_be_attached(timeout=15_000)
    expect(chart.locator("text.slicetext", has_text="world").first).to_be_attached()
    shot(page, "adaptive")
    # The levels shown: one step back with the keyboard draws the tree as it stood after level 2.
    slider = page.get_by_label("Levels shown")
    slider.focus()
    page.keyboard.press("ArrowLeft")
    expect(page.locator("#tree-level-value")).to_have_text("2")
    page.keyboard.press("ArrowRight")
    expect(page.locator("#tree-level-value")).to_have_text("3")

    # Each level's kept n-grams with their intervals.
    level2 = page.locator("#level-2-table")
    row = level2.get_by_role("row").filter(has=page.get_by_role("cell", name="hello world", exact=True))
    expect(row).to_have_count(1)
    expect(row.locator("td").nth(3)).to_contain_text("[")
    # The static baseline ran on its twin analysis and is compared on the fleet's ground truth.
    # The comparison reads the ground truth in its own task: the page follows until it is there.
    expect(page.locator("#comparison-table")).to_contain_text("Interactive", timeout=60_000)
    expect(page.locator("#comparison-rows")).to_contain_text("hello world </s>")
