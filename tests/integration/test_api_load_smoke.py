"""Smoke run of bench/api_load.py: gunicorn (DEBUG=0) on the test database and Redis, 50 wrk connections.

Not a timing test (bench/api_load.py measures): it checks that the bench's machinery works (gunicorn
started the bench's way, signing in for a token and a session, wrk's Lua status counts, clients
pausing at the dashboard's pace, nginx in front) and that the read endpoints answer 50 concurrent
clients with nothing but 2xx, directly and through nginx.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from analyses.models import Round
from analyses.services.rounds import round_create_and_start
from tests import services

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import api_load  # noqa: E402

pytestmark = pytest.mark.integration

PASSWORD = "load-smoke-password"


@pytest.mark.django_db(transaction=True)
def test_fifty_connections_over_the_read_endpoints_get_only_2xx(analysis, recipe, settings, tmp_path) -> None:
    try:
        api_load.wrk_path()
    except api_load.ToolMissing as missing:
        pytest.fail(f"{missing} (`make test` installs it in CI)")
    # The server checks passwords with the production settings' hasher, not the tests' fast one.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.PBKDF2PasswordHasher"]
    analyst = analysis.owner
    analyst.set_password(PASSWORD)
    analyst.save()
    round_ = round_create_and_start(analysis=analysis, content=recipe, user=analyst)
    round_.refresh_from_db()
    assert round_.status == Round.Status.RELEASED, round_.error

    env = api_load.server_env(database_url=services.test_database_url(), redis_url=services.redis_url_or_fail())
    config = api_load.ServerConfig.parse("gthread:2")
    with api_load.gunicorn_running(config, env, tmp_path / "gunicorn.log") as server:
        token = api_load.api_token(server.base_url, analyst.username, PASSWORD)
        cookie = api_load.session_cookie(server.base_url, analyst.username, PASSWORD)
        endpoints = api_load.targets(analysis=analysis.identifier, round_id=round_.pk, token=token, cookie=cookie)
        result = api_load.wrk_run(
            server.base_url + "/",
            # The API authenticates by the token, the pages by the session: every path gets both.
            headers={"Authorization": f"Token {token}", "Cookie": cookie},
            connections=50,
            threads=2,
            duration=3,
            paths=[target.path for target in endpoints],
        )
        # Clients at the dashboard's pace reach gunicorn through nginx, as the bench measures them.
        with api_load.nginx_in_front(server.port, tmp_path) as front:
            paced = api_load.wrk_run(
                front + "/",
                headers={"Authorization": f"Token {token}", "Cookie": cookie},
                connections=50,
                threads=2,
                duration=3,
                paths=[target.path for target in endpoints],
                pause_ms=api_load.DASHBOARD_PACE_MS,
            )

    assert result["requests"] >= len(endpoints), result  # each wrk thread takes the paths in turn
    assert result["socket_errors"] == 0, result
    assert result["not_2xx"] == 0, result["statuses"]
    assert sum(result["statuses"].values()) == result["requests"], result
    # Clients at the dashboard's pace: at most one request per connection per pause (and one more).
    assert 50 <= paced["requests"] <= 50 * (3 / 0.5 + 1), paced
    assert paced["not_2xx"] == paced["socket_errors"] == 0, paced
