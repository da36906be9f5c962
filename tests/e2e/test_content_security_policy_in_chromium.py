"""In a real Chromium: the dashboard still works under its Content-Security-Policy
(pfs_base/security_headers.py). The round page draws its chart, Swagger UI and ReDoc render the
API's schema, and the browser reports no violation of the policy on any of them."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from analyses.services.rounds import round_create_and_start

pytestmark = pytest.mark.e2e

# Each securitypolicyviolation event of the page, kept where the test can read it (an init script
# runs before the page's own and is not subject to the policy).
LISTEN = """
window.__cspViolations = [];
document.addEventListener("securitypolicyviolation", (e) => {
  window.__cspViolations.push(e.violatedDirective + " " + (e.blockedURI || "inline") + " " + (e.sourceFile || ""));
});
"""


@pytest.fixture
def released(transactional_db, analysis, analyst, recipe):
    return round_create_and_start(analysis=analysis, content=recipe, user=analyst)


def test_the_chart_and_the_api_docs_work_with_no_policy_violation(released, live_server, browser) -> None:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.add_init_script(LISTEN)
    page = context.new_page()
    console: list[str] = []
    page.on("console", lambda m: console.append(f"{m.type}: {m.text}"))
    page.on("pageerror", lambda e: console.append(f"pageerror: {e}"))
    try:
        page.goto(f"{live_server.url}/login/")
        page.get_by_label("Username").fill("alice")
        page.get_by_label("Password").fill("alice-password")
        page.get_by_role("button", name="Sign in").click()
        page.wait_for_url(f"{live_server.url}/")

        checked = {
            f"/rounds/{released.pk}/": ".js-plotly-plot .main-svg",  # plotly drew the release's chart
            "/api/docs/": "#swagger-ui .opblock",  # Swagger UI read the schema and listed operations
            "/api/redoc/": "#redoc-container [role=search], #redoc-container .api-content",  # ReDoc too
        }
        for path, drawn in checked.items():
            response = page.goto(live_server.url + path)
            assert response.status == 200, path
            assert "script-src 'self'" in response.headers["content-security-policy"], path
            expect(page.locator(drawn).first).to_be_visible(timeout=30_000)
            page.wait_for_load_state("networkidle")
            violations = page.evaluate("window.__cspViolations")
            assert not violations, (path, violations)
        refused = [line for line in console if "Content Security Policy" in line or "Content-Security-Policy" in line]
        assert not refused, refused
        errors = [line for line in console if line.startswith(("error:", "pageerror:"))]
        assert not errors, errors
    finally:
        context.close()
