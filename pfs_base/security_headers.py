"""A strict Content-Security-Policy on every answer (docs/threats.md, "Probes and headers").

Every script of the dashboard, the admin and the API's two documentation pages is a file served from
this origin (static/js/, static/vendor/, Django's admin, drf-spectacular-sidecar): none is inline, no
page has an event-handler attribute or a javascript: URL. So a script that an attacker manages to
write into a page (a field's value, a name) is text the browser refuses to run.

Each source, and why it is there:

- ``default-src 'self'``: anything not named below, from this origin only.
- ``script-src 'self'``: files from this origin; no inline script, no eval.
- ``style-src 'self' 'unsafe-inline'``: plotly.js adds <style> elements to the page as it draws a
  chart (its modebar's and hover labels' rules), ReDoc's styled-components do the same for every
  component, and the round page and the two documentation templates keep small <style> blocks.
  Without it Chromium refuses plotly's styles on the round page
  (tests/e2e/test_content_security_policy_in_chromium.py). A style runs no code; scripts stay strict.
- ``img-src 'self' data: blob:``: Swagger UI's and ReDoc's icons are data: SVGs in their CSS, and
  plotly's "download as PNG" draws the chart through a data:/blob: image.
- ``connect-src 'self'``: the pages' own fetches (live updates, the editors' checks, the schema).
- ``font-src 'self'``: no web font from another host (the pages use the system's).
- ``worker-src 'self' blob:``: ReDoc runs its search index in a worker it makes from a blob: URL.
- ``object-src 'none'``, ``base-uri 'none'``: no plugin, no <base> to re-point relative URLs.
- ``frame-ancestors 'none'``: no page is framed by another site (as X-Frame-Options: DENY).
- ``form-action 'self'``: forms post back to this origin only.
"""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

HEADER = "Content-Security-Policy"
POLICY = "; ".join(
    [
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self' 'unsafe-inline'",
        "img-src 'self' data: blob:",
        "connect-src 'self'",
        "font-src 'self'",
        "worker-src 'self' blob:",
        "object-src 'none'",
        "base-uri 'none'",
        "frame-ancestors 'none'",
        "form-action 'self'",
    ]
)


class ContentSecurityPolicyMiddleware:
    """Sets POLICY on every response that has no policy of its own."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        response.headers.setdefault(HEADER, POLICY)
        return response
