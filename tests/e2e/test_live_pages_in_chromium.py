"""In a real Chromium against a live server and a real worker: a page that follows a running
adaptive run is patched in place, never reloaded, so a Pause click is never lost to its polling
(a reload started by a poll aborted the Pause's POST, and the run went on)."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from analyses.models import AdaptiveRun, Round

pytestmark = pytest.mark.e2e


def test_pause_during_a_running_round_takes_effect_and_the_page_follows_in_place(demo, live_server, page) -> None:
    page.goto(f"{live_server.url}/analyses/demo.discovery/adaptive/")
    page.get_by_label("Username").fill("analyst")
    page.get_by_label("Password").fill("analyst-demo-password")
    page.get_by_role("button", name="Sign in").click()
    page.get_by_role("button", name="Start", exact=True).click()
    page.get_by_role("button", name="Start and spend").click()  # Start asks before it spends
    expect(page.locator("#run-status")).to_have_text("Running")

    # The page polls while round 1 runs on the worker; Pause is clicked in the middle of it.
    page.wait_for_timeout(1_000)  # a poll or two in between (every 0.5–1.5 s)
    navigations: list[str] = []
    page.on("framenavigated", lambda frame: navigations.append(frame.url) if frame == page.main_frame else None)
    page.get_by_role("button", name="Pause").click()

    # The outcome is at the top, focused; the run is paused in the database, not only on the page.
    outcome = page.locator("#messages")
    expect(outcome).to_contain_text("Paused: the current round finishes")
    expect(outcome).to_be_focused()
    expect(page.locator("#run-status")).to_contain_text("Paused")
    run = AdaptiveRun.objects.get()
    assert run.status == AdaptiveRun.Status.PAUSED
    # The rounds sent so far (the worker may have finished round 1 and sent round 2 within the poll
    # or two above): none may be sent after the pause.
    sent = Round.objects.filter(recipe__analysis=run.analysis).count()
    assert sent < 3, "the run ended before Pause was clicked: nothing was tested"
    landed = len(navigations)  # the POST and its redirect to the run page
    page.evaluate("window.__notReloaded = true")

    # The round in flight ends: its level appears and the next round waits, editable, on the same
    # document (no reload: the marker set above survives) with the outcome message still at the top.
    expect(page.locator(f"#level-{sent}-table")).to_be_visible(timeout=120_000)
    expect(page.locator("#next-recipe")).to_contain_text("The next round, waiting", timeout=30_000)
    assert page.evaluate("window.__notReloaded === true")
    assert len(navigations) == landed
    expect(outcome).to_contain_text("Paused")
    expect(page.get_by_role("button", name="Continue", exact=True)).to_be_visible()

    # The run did not go on: no round started after the pause.
    run.refresh_from_db()
    assert run.status == AdaptiveRun.Status.PAUSED and len(run.levels) == sent
    assert run.next_recipe is not None and run.current_round is None
    assert Round.objects.filter(recipe__analysis=run.analysis).count() == sent
