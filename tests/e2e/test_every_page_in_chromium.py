"""A walk through every page of the dashboard in a real Chromium, at 1,280 px and on a 390 px phone:
on each, nothing is requested from another host, no console error, nothing wider than the
viewport (wide tables scroll inside their card), and axe-core (vendored by the Makefile into
var/vendor/axe.min.js, never from a CDN) finds no serious or critical accessibility violation.

The rounds and runs are made through the services with tasks inline, so the walk reads finished
pages in seconds; the pages of running rounds are walked by their own tests."""

from __future__ import annotations

import copy
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from analyses.adaptive.chain import adaptive_start
from analyses.services.rounds import round_create_and_start
from tests.conftest import DISCOVERY_SPEC

pytestmark = pytest.mark.e2e

# The histogram editor's checks as you type (static/js/recipe_form.js, the editor's branch) ask the
# API, whose refusal of a recipe still being written is a 400 by its contract; Chromium logs any
# 400 as a console error. Those two addresses only, and only with a 400.
EDITOR_CHECKS = ("/recipes/validate/", "/api/privacy/amplify/")
# axe rules off on one page only, each for markup that is not ours. Swagger UI (the API's try-it
# page) renders each operation as a <button> holding its path's deep link (nested-interactive);
# our template (templates/drf_spectacular/swagger_ui.html) fixes what a template can: its lang
# attribute and the colours of its stamps and buttons.
AXE_RULES_OFF = {"/api/docs/": ["nested-interactive"]}
AXE = Path(__file__).resolve().parents[2] / "var" / "vendor" / "axe.min.js"
WIDTHS = (1280, 390)


@pytest.fixture
def site(transactional_db, analysis, discovery, analyst, recipe):
    """Two released rounds of test.ages, and a finished n-gram discovery of t.discovery (alice's)."""
    first = round_create_and_start(analysis=analysis, content=recipe, user=analyst)
    second = round_create_and_start(
        analysis=analysis,
        content={**recipe, "recipeIdentifier": "again", "privacy": {**recipe["privacy"], "epsilon": 0.5}},
        user=analyst,
    )
    run = adaptive_start(spec=copy.deepcopy(DISCOVERY_SPEC), user=analyst)
    return {"rounds": (first.pk, second.pk), "run": run.pk}


def pages(site) -> list[str]:
    a, b = site["rounds"]
    return [
        "/",
        "/analyses/test.ages/",
        f"/analyses/test.ages/?refine={a}&cohort=&bucket=1",
        "/analyses/test.ages/budget/",
        "/analyses/test.ages/audit/",
        "/analyses/test.ages/policy/",
        f"/rounds/{a}/",
        f"/compare/?a={a}&b={b}",
        "/compare/",
        "/analyses/t.discovery/",
        "/analyses/t.discovery/adaptive/",
        f"/adaptive/{site['run']}/",
        "/api/redoc/",
        "/api/docs/",
        "/no-such-page/",
    ]


def check_page(page, base: str, path: str) -> list[str]:
    """What is wrong with the page at ``path`` as the current viewport shows it."""
    problems: list[str] = []
    host = urlsplit(base).netloc
    elsewhere: list[str] = []
    errors: list[str] = []
    page.on(
        "request",
        lambda r: (
            elsewhere.append(r.url)
            if urlsplit(r.url).scheme in ("http", "https", "ws", "wss") and urlsplit(r.url).netloc != host
            else None
        ),
    )
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    failed: list[str] = []
    page.on("response", lambda r: failed.append(f"{r.status} {r.url}") if r.status >= 400 else None)
    response = page.goto(base + path)
    page.wait_for_load_state("networkidle")
    expected_status = 404 if path == "/no-such-page/" else 200
    if response.status != expected_status:
        problems.append(f"status {response.status}")
    # A 404's own console line ("Failed to load resource") is the page's status, not a fault.
    errors = [e for e in errors if not (expected_status == 404 and "404" in e)]
    editor = [f for f in failed if f.startswith("400 ") and any(check in f for check in EDITOR_CHECKS)]
    for _ in editor:  # one console line per such response
        logged = next((e for e in errors if "status of 400" in e), None)
        if logged is not None:
            errors.remove(logged)
    if elsewhere:
        problems.append(f"requests to other hosts: {sorted(set(elsewhere))}")
    if errors:
        problems.append(f"console errors: {errors} (responses >= 400: {failed})")
    width = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    if width[0] > width[1]:
        wide = page.evaluate(
            """() => Array.from(document.querySelectorAll('body *'))
                .filter((e) => e.getBoundingClientRect().right > window.innerWidth + 1)
                .slice(0, 5).map((e) => e.tagName + (e.id ? '#' + e.id : '') + '.' + e.className)"""
        )
        problems.append(f"page {width[0]} px wide in a {width[1]} px viewport: {wide}")
    # plotly's toolbar buttons are for the pointer: none of them is a tab stop.
    toolbar = page.evaluate(
        "Array.from(document.querySelectorAll('.modebar-btn')).filter((b) => b.tabIndex >= 0).length"
    )
    if toolbar:
        problems.append(f"{toolbar} plotly toolbar buttons in the tab order")
    # Evaluated, not added as a <script> element: the pages' Content-Security-Policy refuses inline scripts.
    page.evaluate(AXE.read_text())
    off = {rule: {"enabled": False} for rule in AXE_RULES_OFF.get(path, [])}
    violations = page.evaluate(
        """async (off) => (await axe.run(document, {resultTypes: ['violations'], rules: off})).violations
            .filter((v) => v.impact === 'serious' || v.impact === 'critical')
            .map((v) => v.id + ' (' + v.impact + '): ' + v.nodes.slice(0, 3).map((n) => n.target.join(' ')).join(' | '))""",
        off,
    )
    if violations:
        problems.append(f"axe: {violations}")
    return problems


@pytest.mark.parametrize("width", WIDTHS)
def test_every_page_stays_on_the_machine_fits_the_viewport_and_passes_axe(site, live_server, browser, width) -> None:
    assert AXE.exists(), f"{AXE} is missing: run `make var/vendor/axe.min.js` (pinned axe-core from npm)"
    found = signed_in_walk(
        browser, live_server.url, width, login=("/login/", "alice", "alice-password", "Sign in", "/"), paths=pages(site)
    )
    assert not found, "\n".join(f"{path}: {problem}" for path, problems in found.items() for problem in problems)


def signed_in_walk(browser, base: str, width: int, *, login: tuple[str, str, str, str, str], paths) -> dict:
    """Sign in on the login page (itself checked), then check each page in a tab of its own (its
    own listeners: each page's faults are its own). ``login``: (path, user, password, button, landing)."""
    login_path, user, password, button, landing = login
    context = browser.new_context(viewport={"width": width, "height": 900})
    found: dict[str, list[str]] = {}
    try:
        page = context.new_page()
        problems = check_page(page, base, login_path)
        if problems:
            found[login_path] = problems
        page.get_by_label("Username").fill(user)
        page.get_by_label("Password").fill(password)
        page.get_by_role("button", name=button).click()
        page.wait_for_url(base + landing)
        for path in paths:
            fresh = context.new_page()
            problems = check_page(fresh, base, path)
            fresh.close()
            if problems:
                found[path] = problems
    finally:
        context.close()
    return found


def admin_pages(site, analysis) -> list[str]:
    """The Django admin pages a privacy officer works in: the analyses (list, the change page with
    its field policies, a new one, the Approve page with an edit waiting), the fleets and a
    simulated device's audit log, the snapshots devices enforce and the rounds they ran."""
    fleet = analysis.fleet_id
    return [
        "/admin/",
        "/admin/analyses/",
        "/admin/analyses/analysis/",
        f"/admin/analyses/analysis/{analysis.pk}/change/",
        "/admin/analyses/analysis/add/",
        f"/admin/analyses/analysis/{analysis.pk}/approve/",
        f"/admin/analyses/analysis/{analysis.pk}/history/",
        "/admin/devices/fleet/",
        f"/admin/devices/fleet/{fleet}/change/",
        f"/admin/devices/fleet/{fleet}/audit/",
        f"/admin/devices/fleet/{fleet}/audit/?device=d1",
        "/admin/devices/policysnapshot/",
        "/admin/devices/shardrun/",
        "/admin/analyses/round/",
        "/admin/analyses/release/",
    ]


@pytest.mark.parametrize("width", WIDTHS)
def test_every_admin_page_of_the_officer_stays_on_the_machine_fits_and_passes_axe(
    site, analysis, live_server, browser, width
) -> None:
    # An edit waiting for approval: the Approve page shows its diff and its button.
    analysis.epsilon_allowed = analysis.epsilon_allowed + 1
    analysis.save(update_fields=["epsilon_allowed"])
    found = signed_in_walk(
        browser,
        live_server.url,
        width,
        login=("/admin/login/", "olivia", "olivia-password", "Log in", "/admin/"),
        paths=admin_pages(site, analysis),
    )
    assert not found, "\n".join(f"{path}: {problem}" for path, problems in found.items() for problem in problems)
