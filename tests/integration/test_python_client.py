"""pfs_client and `python -m pfs_client` against a live server whose rounds run on a real Celery worker."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from rest_framework.authtoken.models import Token

from analyses.models import AdaptiveRun, Recipe, Round
from analyses.presenters.releases import release_table
from pfs_client import ApiError, AuthenticationError, Client, Release, RoundFailed
from tests.conftest import DISCOVERY_SPEC, FLEET_SIZE
from tests.services import ROOT

pytestmark = pytest.mark.integration

WAIT = {"poll": 0.2, "timeout": 120.0}


@pytest.fixture
def pfs(live_server, analyst):
    with Client(live_server.url, username="alice", password="alice-password") as client:
        yield client


def run_cli(live_server, token: str, *args: str) -> subprocess.CompletedProcess:
    """`python -m pfs_client` in a process of its own, configured from the environment."""
    env = {**os.environ, "PFS_URL": live_server.url, "PFS_TOKEN": token}
    return subprocess.run(
        [sys.executable, "-m", "pfs_client", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=180
    )


def test_login_gives_the_users_api_token_and_lists_only_their_analyses(pfs, analysis, analyst, other_analyst) -> None:
    assert pfs.token == Token.objects.get(user=analyst).key
    assert [a.identifier for a in pfs.analyses()] == ["test.ages"]
    charlie = Client(pfs.url, username="charlie", password="charlie-password")
    assert charlie.analyses() == []
    with pytest.raises(AuthenticationError) as refused:
        Client(pfs.url, username="alice", password="wrong")
    assert refused.value.status == 401 and refused.value.code == "authentication_failed"


def test_run_recipe_waits_for_the_release_and_its_rows_are_the_servers(worker, pfs, api, analysis, recipe) -> None:
    release = pfs.run_recipe("test.ages", recipe, **WAIT)
    assert isinstance(release, Release)
    round_ = Round.objects.get(pk=release.round_id)
    assert round_.status == Round.Status.RELEASED
    assert release.data == api.get(f"/api/rounds/{round_.pk}/release/").json()
    assert release["reports"] == FLEET_SIZE and len(release.to_rows()) == 8
    assert release.to_rows() == release_table(round_.release)  # the rows the dashboard's table and CSV show


def test_the_csv_export_is_the_dashboards_csv_byte_for_byte(worker, pfs, analysis, analyst, recipe, client) -> None:
    round_id = pfs.run_recipe("test.ages", recipe, **WAIT).round_id
    client.force_login(analyst)
    for options in ({}, {"intervals": "simultaneous", "view": "clipped"}):
        dashboard = client.get(f"/rounds/{round_id}/release.csv", options)
        assert dashboard.status_code == 200 and dashboard["Content-Type"].startswith("text/csv")
        assert pfs.release_csv(round_id, **options).encode() == dashboard.content
        # Built from the JSON release, for servers without the CSV endpoint: the same bytes.
        assert pfs.release(round_id, **options).to_csv().encode() == dashboard.content


def test_a_bad_recipe_raises_api_error_by_field_and_the_cli_exits_2_printing_it(
    live_server, pfs, analysis, recipe, tmp_path
) -> None:
    recipe["privacy"]["epsilon0"] = -1
    with pytest.raises(ApiError) as refused:
        pfs.run_recipe("test.ages", recipe)
    error = refused.value
    assert error.status == 400 and error.code == "invalid"
    assert list(error.fields) == ["privacy.epsilon0"]
    assert "privacy.epsilon0" in str(error)

    path = tmp_path / "recipe.json"
    path.write_text(json.dumps(recipe))
    done = run_cli(live_server, pfs.token, "run", str(path), "--analysis", "test.ages")
    assert done.returncode == 2
    message = f"privacy.epsilon0: {' '.join(error.fields['privacy.epsilon0'])}"
    assert str(error) == f"HTTP 400 invalid: {message}"  # the one field's message in full
    assert done.stderr.splitlines() == [f"pfs: the server refused the input, nothing was changed: {message}"]
    assert not Recipe.objects.exists() and not Round.objects.exists()  # nothing was changed


class DropFirstAnswerProxy:
    """Forwards to the live server, but answers the first POST to a path ending in ``suffix`` with a
    502 after the server ran it: a gateway that timed out while the server did the work."""

    def __init__(self, upstream: str, suffix: str) -> None:
        self.upstream_answers: list[dict] = []
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:
                self._forward()

            def do_POST(self) -> None:
                self._forward()

            def _forward(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0)) or None
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
                request = urllib.request.Request(upstream + self.path, data=body, method=self.command, headers=headers)
                try:
                    with urllib.request.urlopen(request, timeout=30) as answer:
                        status, data, kind = answer.status, answer.read(), answer.headers["Content-Type"]
                except urllib.error.HTTPError as error:
                    status, data, kind = error.code, error.read(), error.headers["Content-Type"]
                if self.command == "POST" and self.path.endswith(suffix):
                    proxy.upstream_answers.append(json.loads(data))
                    if len(proxy.upstream_answers) == 1:
                        status, data, kind = 502, b"<html><title>502 Bad Gateway</title></html>", "text/html"
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_a_start_retried_after_a_lost_answer_does_not_start_a_second_round(
    worker, live_server, pfs, analysis, recipe
) -> None:
    proxy = DropFirstAnswerProxy(live_server.url, "/rounds/")
    try:
        through_proxy = Client(proxy.url, token=pfs.token, backoff=0.05)
        release = through_proxy.run_recipe("test.ages", recipe, **WAIT)
    finally:
        proxy.close()
    first, retried = proxy.upstream_answers
    assert first["id"] == retried["id"] == release.round_id  # the server answered the retry with the same round
    assert Round.objects.count() == 1


def test_a_recipe_store_retried_after_a_lost_answer_stores_it_once(live_server, pfs, analysis, recipe) -> None:
    proxy = DropFirstAnswerProxy(live_server.url, "/recipes/")
    try:
        stored = Client(proxy.url, token=pfs.token, backoff=0.05).create_recipe("test.ages", recipe)
    finally:
        proxy.close()
    first, retried = proxy.upstream_answers
    assert first["id"] == retried["id"] == stored.id
    assert Recipe.objects.count() == 1


def test_the_same_idempotency_key_twice_returns_the_same_round(worker, pfs, analysis, recipe) -> None:
    stored = pfs.create_recipe("test.ages", recipe)
    first = pfs.run_recipe(None, stored.id, wait=False, idempotency_key="notebook-cell-3")
    again = pfs.run_recipe(None, stored.id, idempotency_key="notebook-cell-3", **WAIT)
    assert again.round_id == first.id and Round.objects.count() == 1


def test_run_adaptive_returns_the_finished_discovery(worker, pfs, api, discovery) -> None:
    run = pfs.run_adaptive("t.discovery", copy.deepcopy(DISCOVERY_SPEC), poll=0.5, timeout=240)
    assert run.status == "finished", run.stop_reason
    assert [level["length"] for level in run.levels] == [1, 2]
    assert run.data == api.get(f"/api/adaptive-runs/{run.id}/").json()
    assert AdaptiveRun.objects.get(pk=run.id).status == AdaptiveRun.Status.FINISHED
    assert Round.objects.filter(status=Round.Status.RELEASED).count() == 2


def test_a_cancelled_round_raises_round_failed_and_a_finished_one_cannot_be_cancelled(
    fault_queue, live_server, pfs, analysis, recipe
) -> None:
    # Tasks go to a queue no worker consumes, so the round is still queued when it is cancelled.
    queued = pfs.run_recipe("test.ages", recipe, wait=False)
    assert queued.status == "queued"
    cancelled = pfs.cancel(queued.id)
    assert cancelled.status == "cancelled" and "alice" in cancelled.error
    with pytest.raises(RoundFailed, match=f"round {queued.id} cancelled"):
        pfs.wait(queued.id, poll=0.1, timeout=10)
    with pytest.raises(ApiError) as refused:
        pfs.cancel(queued.id)
    assert refused.value.status == 409


def test_the_cli_runs_a_recipe_and_writes_its_csv(
    worker, live_server, pfs, analysis, analyst, recipe, client, tmp_path
):
    path, out = tmp_path / "recipe.json", tmp_path / "ages.csv"
    path.write_text(json.dumps(recipe))
    done = run_cli(
        live_server, pfs.token, "run", str(path), "--analysis", "test.ages", "--poll", "0.2", "--csv", str(out)
    )
    assert done.returncode == 0, done.stderr
    round_ = Round.objects.get()
    assert round_.status == Round.Status.RELEASED
    assert f"round {round_.pk} released: {FLEET_SIZE:,} reports" in done.stdout
    client.force_login(analyst)
    assert out.read_bytes() == client.get(f"/rounds/{round_.pk}/release.csv").content

    status = run_cli(live_server, pfs.token, "status", str(round_.pk))
    assert status.returncode == 0 and status.stdout.startswith(f"round {round_.pk} released, 5/5 shards")
    exported = run_cli(live_server, pfs.token, "export", str(round_.pk), "--json", "-")
    assert exported.returncode == 0 and json.loads(exported.stdout) == pfs.release(round_.pk).data

    # One statement of what was spent (issue 30): in the release's metadata, its printout and `budget`.
    spent = json.loads(exported.stdout)["analysis_spent"]
    guarantee = pfs.budget("test.ages").scopes[0].data["guarantee"]
    assert spent["rounds"] == 1 and (spent["epsilon"], spent["delta"]) == (guarantee["epsilon"], guarantee["delta"])
    assert f"analysis test.ages spent (epsilon, delta) = ({spent['epsilon']:.6g}, {spent['delta']:.3g})" in done.stdout
    budget = run_cli(live_server, pfs.token, "budget", "test.ages")
    assert budget.returncode == 0, budget.stderr
    assert f"analysis: spent (epsilon, delta) = ({guarantee['epsilon']:.6g}, {guarantee['delta']:.3g})" in budget.stdout
    unknown = run_cli(live_server, pfs.token, "budget", "no.such")
    assert unknown.returncode != 0 and "no.such" not in unknown.stdout


def test_running_the_same_recipe_again_runs_the_stored_one_and_a_changed_one_is_refused(
    worker, pfs, analysis, recipe
) -> None:
    first = pfs.run_recipe("test.ages", recipe, **WAIT)
    second = pfs.run_recipe("test.ages", recipe, **WAIT)  # a notebook cell run twice
    assert second.round_id != first.round_id
    assert Recipe.objects.count() == 1 and Round.objects.count() == 2
    changed = {**recipe, "privacy": {**recipe["privacy"], "epsilon": 0.5}}
    with pytest.raises(ApiError) as refused:
        pfs.run_recipe("test.ages", changed, **WAIT)
    assert "recipeIdentifier" in refused.value.fields and Round.objects.count() == 2
