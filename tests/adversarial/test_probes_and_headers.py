"""Probes and headers: what a stranger can read from the probes, and what a script written into a
page could do (docs/threats.md, "Probes and headers").

- /metrics and the checks of /readyz (a database's host and port, a driver's error) are for the
  operator's hosts (PFS_PROBE_NETWORKS, loopback by default) or a caller with PFS_PROBE_TOKEN,
  enforced by the application whatever proxy is in front (pfs_base.probes);
- the client's address is the one the API's rate limits use: a forged X-Forwarded-For counts only
  behind as many proxies as PFS_NUM_PROXIES says;
- every page carries a Content-Security-Policy allowing scripts from this origin only, and no page
  has an inline script for it to break (pfs_base.security_headers).
"""

from __future__ import annotations

import copy
from html.parser import HTMLParser

import pytest
from django.test import Client

from analyses.services.rounds import round_create_and_start
from pfs_base.security_headers import POLICY

OUTSIDE = "203.0.113.7"  # TEST-NET-3: an address of the internet
TOKEN = "probe-token-for-the-tests-0123456789"


@pytest.fixture
def rest_framework_settings(settings):
    """REST_FRAMEWORK as the test settings have it; a test changes NUM_PROXIES on a copy."""
    settings.REST_FRAMEWORK = copy.deepcopy(settings.REST_FRAMEWORK)
    return settings


# ---------------------------------------------------------------- /metrics and /readyz from outside


@pytest.mark.django_db
def test_from_outside_metrics_is_refused_in_the_apis_error_format() -> None:
    response = Client(REMOTE_ADDR=OUTSIDE).get("/metrics")
    assert response.status_code == 403
    assert response["Content-Type"] == "application/json"
    body = response.json()
    assert set(body) == {"detail", "code", "fields"} and body["code"] == "permission_denied"
    assert "pfs_" not in response.content.decode()  # not one metric


@pytest.mark.django_db
def test_from_outside_readyz_says_ready_and_nothing_else() -> None:
    response = Client(REMOTE_ADDR=OUTSIDE).get("/readyz")
    assert response.status_code == 200
    assert response.json() == {"status": "ready"}


@pytest.mark.django_db
def test_from_outside_a_failing_readyz_is_a_503_naming_no_host_port_or_error(settings) -> None:
    settings.PFS_TASK_MODE = "celery"
    settings.REDIS_URL = settings.CELERY_BROKER_URL = "redis://127.0.0.1:1/0"  # nothing listens on port 1
    settings.PFS_READYZ_TIMEOUT = 0.5
    response = Client(REMOTE_ADDR=OUTSIDE).get("/readyz")
    assert response.status_code == 503
    assert response.json() == {"status": "not ready"}
    # The operator's host still reads what failed.
    checks = Client().get("/readyz").json()["checks"]
    assert not checks["redis"]["ok"] and "ConnectionError" in checks["redis"]["error"]


@pytest.mark.django_db
def test_with_the_token_both_answer_in_full_from_anywhere(settings) -> None:
    settings.PFS_PROBE_TOKEN = TOKEN
    client = Client(REMOTE_ADDR=OUTSIDE, HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    metrics = client.get("/metrics")
    assert metrics.status_code == 200 and metrics["Content-Type"].startswith("text/plain")
    readiness = client.get("/readyz").json()
    assert readiness["status"] == "ready" and readiness["checks"]["database"]["ok"]


@pytest.mark.django_db
@pytest.mark.parametrize("offered", [f"Bearer {TOKEN[:-1]}", f"Bearer {TOKEN}x", TOKEN, "Bearer ", f"Token {TOKEN}"])
def test_a_wrong_token_is_no_token(settings, offered) -> None:
    settings.PFS_PROBE_TOKEN = TOKEN
    client = Client(REMOTE_ADDR=OUTSIDE, HTTP_AUTHORIZATION=offered)
    assert client.get("/metrics").status_code == 403
    assert client.get("/readyz").json() == {"status": "ready"}


@pytest.mark.django_db
def test_without_a_configured_token_a_bearer_header_opens_nothing(settings) -> None:
    settings.PFS_PROBE_TOKEN = None
    assert Client(REMOTE_ADDR=OUTSIDE, HTTP_AUTHORIZATION="Bearer ").get("/metrics").status_code == 403


@pytest.mark.django_db
@pytest.mark.parametrize("address", ["127.0.0.1", "127.8.9.10", "::1", "::ffff:127.0.0.1"])
def test_from_loopback_both_answer(address) -> None:
    client = Client(REMOTE_ADDR=address)
    assert client.get("/metrics").status_code == 200
    assert client.get("/readyz").json()["checks"]["database"]["ok"]


@pytest.mark.django_db
def test_a_configured_network_answers_and_loopback_is_then_only_what_it_lists(settings) -> None:
    settings.PFS_PROBE_NETWORKS = ["10.20.0.0/16"]
    assert Client(REMOTE_ADDR="10.20.3.4").get("/metrics").status_code == 200
    assert Client(REMOTE_ADDR="10.21.3.4").get("/metrics").status_code == 403
    assert Client(REMOTE_ADDR="127.0.0.1").get("/metrics").status_code == 403


@pytest.mark.django_db
def test_a_forged_forwarded_for_without_a_proxy_does_not_get_in() -> None:
    """PFS_NUM_PROXIES=0 (the default): the address is the connection's, whatever the header says."""
    client = Client(REMOTE_ADDR=OUTSIDE, HTTP_X_FORWARDED_FOR="127.0.0.1")
    assert client.get("/metrics").status_code == 403
    assert client.get("/readyz").json() == {"status": "ready"}


@pytest.mark.django_db
def test_behind_one_proxy_only_the_entry_the_proxy_wrote_counts(rest_framework_settings) -> None:
    """PFS_NUM_PROXIES=1 (deploy/pfs.env): nginx on the host appends the address it saw. A client
    that writes 127.0.0.1 in front of it stays outside; nginx's own probe from the host is inside."""
    rest_framework_settings.REST_FRAMEWORK["NUM_PROXIES"] = 1
    forged = Client(REMOTE_ADDR="127.0.0.1", HTTP_X_FORWARDED_FOR=f"127.0.0.1, {OUTSIDE}")
    assert forged.get("/metrics").status_code == 403
    through_nginx = Client(REMOTE_ADDR="127.0.0.1", HTTP_X_FORWARDED_FOR="127.0.0.1")
    assert through_nginx.get("/metrics").status_code == 200
    # Straight to gunicorn on loopback, no header: the connection's address.
    assert Client(REMOTE_ADDR="127.0.0.1").get("/metrics").status_code == 200


@pytest.mark.parametrize("address", [OUTSIDE, "127.0.0.1"])
def test_healthz_says_ok_and_nothing_else(address) -> None:
    response = Client(REMOTE_ADDR=address).get("/healthz")
    assert response.status_code == 200 and response.content == b'{"status": "ok"}'


# ---------------------------------------------------------------- the Content-Security-Policy


class _Scripts(HTMLParser):
    """Every <script> of a page, with its attributes and whether it has a body; and every attribute
    that would run code (on...= handlers, javascript: URLs)."""

    def __init__(self) -> None:
        super().__init__()
        self.scripts: list[dict] = []
        self.code_attributes: list[str] = []
        self._open: dict | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name.startswith("on") or (value or "").strip().lower().startswith("javascript:"):
                self.code_attributes.append(f"<{tag} {name}={value!r}>")
        if tag == "script":
            self._open = {"attrs": dict(attrs), "body": ""}
            self.scripts.append(self._open)

    def handle_data(self, data: str) -> None:
        if self._open is not None:
            self._open["body"] += data

    def handle_endtag(self, tag: str) -> None:
        if tag == "script":
            self._open = None


def _directives(policy: str) -> dict[str, list[str]]:
    parsed = {}
    for directive in policy.split(";"):
        name, *sources = directive.split()
        parsed[name] = sources
    return parsed


@pytest.fixture
def pages(analysis, analyst, officer, recipe) -> list[tuple[Client, str]]:
    released = round_create_and_start(analysis=analysis, content=recipe, user=analyst)
    signed_in, admin = Client(), Client()
    signed_in.force_login(analyst)
    admin.force_login(officer)
    anonymous = Client()
    return [
        (anonymous, "/login/"),
        (anonymous, "/no-such-page/"),
        (signed_in, "/"),
        (signed_in, f"/analyses/{analysis.identifier}/"),
        (signed_in, f"/analyses/{analysis.identifier}/budget/"),
        (signed_in, f"/analyses/{analysis.identifier}/audit/"),
        (signed_in, f"/analyses/{analysis.identifier}/policy/"),
        (signed_in, f"/rounds/{released.pk}/"),
        (signed_in, "/compare/"),
        (signed_in, "/guide/privacy/"),
        (admin, "/admin/"),
        (admin, f"/admin/analyses/analysis/{analysis.pk}/change/"),
        (signed_in, "/api/docs/"),
        (signed_in, "/api/redoc/"),
    ]


def test_the_policy_allows_scripts_from_this_origin_only() -> None:
    directives = _directives(POLICY)
    assert directives["script-src"] == ["'self'"]
    assert directives["default-src"] == ["'self'"]
    assert directives["object-src"] == ["'none'"] and directives["base-uri"] == ["'none'"]
    assert directives["frame-ancestors"] == ["'none'"]
    assert not any("*" in source or source.startswith("http") for sources in directives.values() for source in sources)


def test_every_page_carries_the_policy_and_has_no_inline_script(pages) -> None:
    scripts = 0
    for client, path in pages:
        response = client.get(path)
        assert response.status_code == (404 if path == "/no-such-page/" else 200), path
        policy = response["Content-Security-Policy"]
        script_src = _directives(policy)["script-src"]
        assert script_src == ["'self'"] and "'unsafe-inline'" not in script_src, (path, policy)
        parser = _Scripts()
        parser.feed(response.content.decode())
        scripts += len(parser.scripts)
        for script in parser.scripts:
            if "src" in script["attrs"]:
                assert not script["body"].strip(), (path, script)
            else:
                # json_script's data blocks: the browser runs none of them (CSP does not apply).
                assert script["attrs"].get("type") == "application/json", (path, script)
        assert not parser.code_attributes, (path, parser.code_attributes)
    assert scripts > len(pages)  # the pages do run scripts (files): the check is not vacuous


def test_the_api_and_the_error_pages_carry_it_too(api) -> None:
    """(The probes answer before it, in ProbeMiddleware: JSON or text for machines, no page.)"""
    assert api.get("/api/analyses/")["Content-Security-Policy"] == POLICY
    assert api.get("/api/no-such-endpoint/")["Content-Security-Policy"] == POLICY


def test_a_script_written_into_a_page_stays_text_and_the_policy_would_refuse_it(analysis, analyst) -> None:
    """A title with a script in it: the template escapes it; and were one not to, script-src has
    no 'unsafe-inline' (nor 'unsafe-eval'): the browser would refuse to run it anyway."""
    analysis.title = '<script>alert("owned")</script><img src=x onerror=alert(1)>'
    analysis.save(update_fields=["title"])
    client = Client()
    client.force_login(analyst)
    for path in ("/", f"/analyses/{analysis.identifier}/"):
        response = client.get(path)
        assert 'alert("owned")' not in response.content.decode()
        parser = _Scripts()
        parser.feed(response.content.decode())
        assert all("src" in s["attrs"] or s["attrs"].get("type") == "application/json" for s in parser.scripts)
        assert not parser.code_attributes
        script_src = _directives(response["Content-Security-Policy"])["script-src"]
        assert "'unsafe-inline'" not in script_src and "'unsafe-eval'" not in script_src
