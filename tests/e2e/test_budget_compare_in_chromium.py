"""In a real Chromium against a live server and a real worker: run two rounds with different epsilons,
compare them from the analysis page, then read the budget burn-down and the audit."""

from __future__ import annotations

import copy
import re

import pytest
from playwright.sync_api import expect

from analyses.models import Round
from analyses.rules.roles import make_privacy_officer
from analyses.services.policy import analysis_approve, analysis_create
from analyses.services.rounds import round_create_and_start
from devices.fleet_io import fleet_create
from tests.conftest import FLEET_SIZE, SHARD_SIZE, SPEC
from tests.e2e.screenshots import shot
from tests.services import restore_inline_tasks, use_celery_worker

pytestmark = pytest.mark.e2e

PASSWORD = "alice-password"


@pytest.fixture
def ages(celery_worker_process, transactional_db, settings, django_user_model):
    """alice's approved analysis e2e.ages on a fleet of 5,000 devices, with room for rounds of ε 1 and 1.5."""
    analyst = django_user_model.objects.create_user("alice", password=PASSWORD)
    officer = django_user_model.objects.create_user("olivia", password="olivia-password")
    make_privacy_officer(officer)
    fleet_create(name="small", size=FLEET_SIZE, seed=11, shard_size=SHARD_SIZE)
    spec = {
        **copy.deepcopy(SPEC),
        "identifier": "e2e.ages",
        "budget": {"epsilon": 3.0, "reports": 3, "delta": 1e-6},
        "fields": {"age": {"localEpsilon": 4.0, "epsilon": 3.0, "reports": 3}},
    }
    analysis_approve(analysis=analysis_create(spec=spec, owner=analyst), officer=officer)
    use_celery_worker(settings)
    yield
    restore_inline_tasks()


def run_round(page, base: str, epsilon: str) -> int:
    """Run asymmetric OHE with epsilon0 3 and ``epsilon`` from the analysis page; the round's id once released."""
    page.goto(f"{base}/analyses/e2e.ages/")
    page.get_by_label("Local randomizer").select_option("asymmetric_ohe")
    page.get_by_label("Local epsilon (ε₀)").fill("3")
    page.get_by_label("Aggregate epsilon (ε)").fill(epsilon)
    page.get_by_role("button", name="Run", exact=True).click()
    page.get_by_role("button", name="Run and spend").click()  # Run asks before it spends
    expect(page.locator("#release-reports")).to_have_text(f"{FLEET_SIZE:,}", timeout=90_000)
    return int(re.search(r"/rounds/(\d+)/", page.url).group(1))


def test_analyst_compares_two_releases_and_reads_the_budget_and_audit(ages, live_server, page) -> None:
    base = live_server.url
    page.goto(f"{base}/")
    page.get_by_label("Username").fill("alice")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()

    a = run_round(page, base, "1")
    b = run_round(page, base, "1.5")
    assert list(Round.objects.values_list("status", flat=True)) == ["released", "released"]

    # From the analysis page's rounds table: A and B, then Compare.
    page.goto(f"{base}/analyses/e2e.ages/")
    page.wait_for_load_state("networkidle")  # the recipe editor's checks have redrawn the form above
    # Compare with nothing chosen says so (no silent reload of the form).
    page.get_by_role("button", name="Compare", exact=True).click()
    expect(page.locator("#compare-errors")).to_contain_text("Nothing to compare yet:")
    expect(page.locator("#compare-errors")).to_contain_text("Release A: Not chosen")
    page.goto(f"{base}/analyses/e2e.ages/")
    page.wait_for_load_state("networkidle")
    page.get_by_label(f"A: round {a}").check()
    page.get_by_label(f"B: round {b}").check()
    page.get_by_role("button", name="Compare", exact=True).click()
    expect(page).to_have_url(re.compile(rf"/compare/\?(a={a}&b={b}|b={b}&a={a})&compare=1$"))
    expect(page.get_by_role("heading", name=f"Release A: round #{a} (ε = 1.0)")).to_be_visible()
    expect(page.locator("#compare-params")).to_contain_text("asymmetric_ohe, ε₀ = 3")
    # plotly drew two bars per bucket (OOV + 7), each release a trace with its error bars.
    chart = page.locator("#compare-chart-0")
    expect(chart.locator(".bars .point")).to_have_count(16, timeout=15_000)
    expect(chart.locator(".legendtext")).to_have_count(2)
    rows = page.locator("#compare-table-0 tbody tr")
    expect(rows).to_have_count(8)
    expect(rows.first).to_contain_text("below 20 or missing")
    expect(rows.first.locator("td").last).to_have_text(re.compile(r"^(yes|no)$"))
    shot(page, "compare")

    # The budget burn-down: a step line and a dashed allowed line per scope (the analysis, age).
    page.goto(f"{base}/analyses/e2e.ages/")
    page.get_by_role("link", name="Budget burn-down").click()
    expect(page.get_by_role("heading", name="Budget burn-down of e2e.ages")).to_be_visible()
    expect(page.locator("#epsilon-chart .scatterlayer .trace")).to_have_count(4, timeout=15_000)
    expect(page.locator("#epsilon-chart .legendtext")).to_have_count(4)
    burndown = page.locator("#burndown-table tbody tr")
    expect(burndown).to_have_count(3)  # two rounds and the allowed line
    expect(burndown.nth(1)).to_contain_text("2.5 (2)")
    expect(page.locator("#budget-remaining")).to_contain_text("0.5")
    shot(page, "budget")

    page.get_by_role("link", name="Audit").click()
    audit = page.locator("#audit-table tbody tr")
    expect(audit).to_have_count(2)
    expect(audit.first).to_contain_text("alice")
    expect(audit.first).to_contain_text("1.5")
    expect(audit.first).to_contain_text("Released")


def test_the_allowed_line_steps_where_the_officer_approved_a_new_budget(
    transactional_db, analysis, analyst, officer, recipe, live_server, page
) -> None:
    """A round under the first approval, then a raised budget approved: the dashed line plotly draws
    holds the old allowance, then the new one (rounds run through the services, tasks inline)."""
    round_create_and_start(analysis=analysis, content=recipe, user=analyst)
    before = analysis.epsilon_allowed
    analysis.epsilon_allowed = before + 1
    analysis.save(update_fields=["epsilon_allowed"])
    analysis_approve(analysis=analysis, officer=officer)
    page.goto(f"{live_server.url}/login/?next=/analyses/{analysis.identifier}/budget/")
    page.get_by_label("Username").fill("alice")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    expect(page.locator("#epsilon-chart .legendtext").first).to_be_visible(timeout=15_000)
    allowed = page.evaluate(
        """() => document.getElementById('epsilon-chart').data
            .filter((t) => t.name === 'analysis allowed (as approved at the time)').map((t) => t.y)"""
    )
    # One value per column (start, the round, now): the round ran under the first approval, the
    # raised budget holds from its approval on.
    assert allowed == [[before, before, before + 1]]
    expect(page.locator("#allowance-caption")).to_contain_text("step where a privacy officer approved a new budget")
    shot(page, "budget_steps")
