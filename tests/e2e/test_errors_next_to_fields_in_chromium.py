"""Issue 31, items 6 and 10, in a real Chromium: each error is shown by the field it is about, with
the focus there, and the normal states of the recipe editor (a spent analysis, a value being typed)
log no console error and no failed request."""

from __future__ import annotations

import copy
import re

import pytest
from playwright.sync_api import expect

from analyses.models import AdaptiveRun, Round
from analyses.services.policy import analysis_approve, analysis_create
from analyses.services.recipes import recipe_create
from tests.conftest import DISCOVERY_POLICY

pytestmark = pytest.mark.e2e


def sign_in(page, url: str) -> None:
    page.goto(url)
    page.get_by_label("Username").fill("alice")
    page.get_by_label("Password").fill("alice-password")
    page.get_by_role("button", name="Sign in").click()


def watch(page) -> list[str]:
    """Every console error, uncaught exception and 4xx/5xx response of the page, in words."""
    problems: list[str] = []
    page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(f"exception: {e}"))
    page.on("response", lambda r: problems.append(f"HTTP {r.status} {r.url}") if r.status >= 400 else None)
    return problems


@pytest.mark.parametrize("width", [1280, 390])
def test_a_spent_analysis_and_an_invalid_keystroke_log_no_error_and_no_failed_request(
    analysis, analyst, recipe, live_server, page, width
) -> None:
    # Both rounds the policy allows (ε 1 each of 2) started: the analysis's budget is spent.
    spent = recipe_create(analysis=analysis, content=recipe, user=analyst)
    for seed in (1, 2):
        Round.objects.create(recipe=spent, seed=seed, created_by=analyst, status=Round.Status.CANCELLED)
    page.set_viewport_size({"width": width, "height": 900})
    problems = watch(page)
    sign_in(page, f"{live_server.url}/analyses/{analysis.identifier}/")
    summary = page.locator("#recipe-summary")

    # Loading it: the check says the budget is spent, as a verdict, not as a failed request.
    # The recipe itself is fine: the summary says the budget is what stops it, not "Not valid yet".
    expect(summary).to_contain_text("The recipe is fine, but this analysis's budget has nothing left")
    expect(summary).not_to_contain_text("Not valid yet")
    expect(page.locator("#recipe-alert")).to_contain_text("The analysis has used all 2 of its reports")
    # Its privacy figures are still computed (the budget names no key they read).
    expect(page.locator("#privacy-preview")).to_contain_text("Minimum cohort: 1,670 reports")

    # Typing an invalid value: the message by its field, and still nothing failed.
    epsilon = page.get_by_label("Aggregate epsilon (ε)")
    epsilon.fill("0")
    expect(page.locator('[data-field="epsilon"] .error')).to_have_text("Must be greater than 0.")
    expect(summary).to_contain_text("Not valid yet")  # now the recipe itself has a problem
    expect(page.locator("#privacy-preview")).to_contain_text("shown once ε₀, ε and δ are valid")
    epsilon.fill("")
    page.get_by_label("Delta (δ)").fill("2")
    expect(page.locator('[data-field="delta"] .error')).to_be_visible()
    page.wait_for_load_state("networkidle")
    assert problems == []


@pytest.mark.parametrize("width", [1280, 390])
def test_a_misspelt_json_key_is_named_by_the_json_box_and_epsilon_keeps_its_value(
    analysis, live_server, page, width
) -> None:
    page.set_viewport_size({"width": width, "height": 900})
    problems = watch(page)
    sign_in(page, f"{live_server.url}/analyses/{analysis.identifier}/")
    epsilon = page.get_by_label("Aggregate epsilon (ε)")
    recipe_json = page.get_by_label("Recipe JSON", exact=True)
    expect(page.locator("#recipe-summary")).to_contain_text("Valid")
    typed = epsilon.input_value()

    recipe_json.fill(re.sub(r'"epsilon":', '"epsilonn":', recipe_json.input_value(), count=1))

    by_json = page.locator('[data-field="recipe_json"] .error')
    expect(by_json).to_contain_text("privacy.epsilonn: Unknown key; did you mean 'epsilon'?")
    expect(epsilon).to_have_value(typed)  # not blanked
    expect(page.locator('[data-field="epsilon"] .error')).to_have_count(0)  # the field shows a value: no "required"
    expect(page.locator("#recipe-alert")).to_have_text("")
    # Right by the box: the message starts within a line or two under the textarea's bottom edge.
    box, note = recipe_json.bounding_box(), by_json.bounding_box()
    assert 0 <= note["y"] - (box["y"] + box["height"]) < 80
    assert recipe_json.get_attribute("aria-describedby").split()[-1] == "live-error-recipe_json"

    # Dry run anyway: refused by the server, the page lands on the JSON box, the message right under it.
    page.get_by_role("button", name="Dry run").click()
    expect(page.locator("#messages")).to_contain_text("Nothing was run or spent")
    expect(recipe_json).to_be_focused()
    expect(recipe_json).to_be_in_viewport()
    expect(by_json.first).to_contain_text("privacy.epsilonn: Unknown key; did you mean 'epsilon'?")
    expect(by_json.first).to_be_in_viewport()
    expect(epsilon).to_have_value(typed)
    problems.clear()  # the refusal itself is a 400; what follows is normal use again

    # Fixed: the message goes, and the check passes again.
    recipe_json.fill(recipe_json.input_value().replace('"epsilonn":', '"epsilon":'))
    expect(page.locator("#recipe-summary")).to_contain_text("Valid")
    expect(by_json).to_have_count(0)
    page.wait_for_load_state("networkidle")
    assert problems == []


@pytest.mark.parametrize("width", [1280, 390])
def test_a_sampling_rate_too_small_for_the_cohort_is_blamed_under_it_with_the_smallest_that_works(
    analysis, live_server, page, width
) -> None:
    page.set_viewport_size({"width": width, "height": 900})
    problems = watch(page)
    sign_in(page, f"{live_server.url}/analyses/{analysis.identifier}/")
    expect(page.locator("#recipe-summary")).to_contain_text("Valid")
    rate = page.get_by_label("Sampling rate (q)")
    rate.fill("0.001")
    message = page.locator('[data-field="sampling_rate"] .error')
    expect(message).to_contain_text("Too small for the cohort")
    expect(message).to_contain_text("Raise the sampling rate to at least 0.34")  # 1,670 of 5,000 devices
    expect(page.locator('[data-field="epsilon"] .error')).to_have_count(0)  # not blamed on ε
    rate.fill("0.34")
    expect(page.locator("#recipe-summary")).to_contain_text("Valid")
    page.wait_for_load_state("networkidle")
    assert problems == []


@pytest.mark.parametrize("width", [1280, 390])
def test_a_refused_adaptive_plan_lands_on_its_field_with_the_focus(discovery, live_server, page, width) -> None:
    page.set_viewport_size({"width": width, "height": 900})
    sign_in(page, f"{live_server.url}/analyses/t.discovery/adaptive/")
    page.get_by_label("Rounds", exact=True).fill("4")  # 3 reports left
    expect(page.locator("#plan-sum")).to_contain_text("the start would be refused")
    page.get_by_role("button", name="Check the plan").click()

    per_round = page.get_by_label("Aggregate epsilon per round (ε)")
    expect(page.locator('[data-field="epsilon_per_round"] .errors')).to_contain_text(
        "The budget plan exceeds the policy of t.discovery at round 4 of 4"
    )
    expect(per_round).to_be_focused()
    expect(per_round).to_be_in_viewport()
    expect(page.locator('[data-field="epsilon_per_round"] .errors')).to_be_in_viewport()
    expect(page.locator('[data-field="document"] .errors')).to_have_count(0)  # not by the JSON, far below
    assert not AdaptiveRun.objects.exists()


@pytest.fixture
def baselines(discovery, analyst, officer) -> None:
    """On t.discovery's fleet: two analyses that can hold its baseline (t.small with ε 1 left), and
    two that cannot (no n-gram field; never approved)."""
    for identifier, changes in (
        ("t.static", {}),
        ("t.small", {"budget": {"epsilon": 1.0, "reports": 3, "delta": 1e-5}}),
        (
            "t.ages",
            {
                "queryClass": {"stream": "KeyboardNGrams", "fields": ["age"], "cohortFields": ["locale"]},
                "fields": {"age": {"localEpsilon": 4.0, "epsilon": 3.0, "reports": 3}},
            },
        ),
    ):
        policy = {**copy.deepcopy(DISCOVERY_POLICY), "identifier": identifier, **changes}
        analysis_approve(analysis=analysis_create(spec=policy, owner=analyst), officer=officer)
    analysis_create(spec={**copy.deepcopy(DISCOVERY_POLICY), "identifier": "t.draft"}, owner=analyst)


@pytest.mark.parametrize("width", [1280, 390])
def test_the_baseline_offers_only_what_can_work_and_the_plan_never_says_it_fits_when_refused(
    baselines, live_server, page, width
) -> None:
    page.set_viewport_size({"width": width, "height": 900})
    sign_in(page, f"{live_server.url}/analyses/t.discovery/adaptive/")
    baseline = page.get_by_label("Static baseline on")
    assert baseline.locator("option").all_inner_texts() == ["none", "t.small", "t.static"]
    verdict = page.locator("#plan-sum")

    baseline.select_option("t.static")
    expect(verdict).to_contain_text("The static baseline spends the same on t.static. It fits")
    baseline.select_option("t.small")  # 3 rounds of ε 1 on an analysis with ε 1 left
    expect(verdict).to_contain_text("t.small, which has ε 1 and 3 reports left: over what is left")
    expect(verdict).not_to_contain_text("It fits")

    page.get_by_role("button", name="Check the plan").click()
    errors = page.locator('[data-field="baseline"] .errors')
    expect(errors).to_contain_text("Baseline: The budget plan exceeds the policy of t.small")
    expect(baseline).to_be_focused()
    expect(baseline).to_be_in_viewport()
    assert not AdaptiveRun.objects.exists()
