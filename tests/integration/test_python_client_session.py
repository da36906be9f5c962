"""pfs_client as a data engineer meets it, against a live server (issue 31, items 14 and 15): one HTTP
connection for a whole run, closed by the context manager; a wrong password is a 401 and the client's
AuthenticationError; a refusal says its field's message in full; typed results; a progress bar on a
wait; a release as a DataFrame with ordered buckets, NA and the release's metadata in attrs."""

from __future__ import annotations

import copy
import dataclasses
import io
import json
import os
import socket
import subprocess
import sys
import threading
import time

import httpx
import pandas
import pytest

from analyses.models import Recipe, Round
from pfs_client import (
    Analysis,
    ApiError,
    AuthenticationError,
    Budget,
    Client,
    DryRun,
    Release,
)
from pfs_client import Recipe as StoredRecipe
from pfs_client import Round as RoundView
from tests.conftest import FLEET_SIZE
from tests.services import ROOT

pytestmark = pytest.mark.integration

WAIT = {"poll": 0.2, "timeout": 120.0}


class CountingProxy:
    """A TCP proxy in front of the live server that counts the connections made to it, the HTTP
    requests sent over them, and the connections still open."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.connections = 0
        self.requests = 0
        self.open = 0
        self.lock = threading.Lock()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                downstream, _ = self.listener.accept()
            except OSError:
                return  # closed
            with self.lock:
                self.connections += 1
                self.open += 1
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            threading.Thread(target=self._pipe, args=(downstream, upstream, True), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, downstream, False), daemon=True).start()

    def _pipe(self, source: socket.socket, target: socket.socket, client_side: bool) -> None:
        try:
            while data := source.recv(65536):
                if client_side:
                    with self.lock:
                        self.requests += data.count(b" HTTP/1.1\r\n")
                target.sendall(data)
        except OSError:
            pass
        finally:
            if client_side:
                with self.lock:
                    self.open -= 1
            for end in (source, target):
                try:
                    end.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self.listener.close()


@pytest.fixture
def proxy(live_server):
    counting = CountingProxy(httpx.URL(live_server.url).port)
    yield counting
    counting.close()


def run_cli(live_server, *args: str, token: str = "", stdin: str = "") -> subprocess.CompletedProcess:
    env = {**os.environ, "PFS_URL": live_server.url, "PFS_TOKEN": token}
    return subprocess.run(
        [sys.executable, "-m", "pfs_client", *args],
        cwd=ROOT,
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=180,
    )


def test_one_connection_serves_a_whole_run_and_the_context_manager_closes_it(
    worker, proxy, analyst, analysis, recipe
) -> None:
    with Client(proxy.url, username="alice", password="alice-password") as pfs:
        release = pfs.run_recipe("test.ages", recipe, progress=False, **WAIT)
        pfs.budget("test.ages")
        assert proxy.open == 1
    # Sign in, store, start, every poll, the release, the budget: one TCP connection.
    assert proxy.requests >= 6 and proxy.connections == 1
    assert release["reports"] == FLEET_SIZE
    assert pfs.closed
    deadline = time.monotonic() + 5
    while proxy.open and time.monotonic() < deadline:
        time.sleep(0.05)
    assert proxy.open == 0  # closed by the client, not left to the server's keep-alive timeout


def test_a_wrong_password_is_a_401_and_the_clients_authentication_error(live_server, analyst) -> None:
    answer = httpx.post(f"{live_server.url}/api/token/", json={"username": "alice", "password": "wrong"})
    assert answer.status_code == 401 and answer.headers["WWW-Authenticate"] == "Token"
    assert answer.json() == {
        "detail": "Wrong username or password: no token was given.",
        "code": "authentication_failed",
        "fields": {},
    }
    with pytest.raises(AuthenticationError) as refused:
        Client(live_server.url, username="alice", password="wrong")
    assert refused.value.status == 401 and "Wrong username or password" in str(refused.value)
    # A missing field is still bad input, by field.
    missing = httpx.post(f"{live_server.url}/api/token/", json={"username": "alice"})
    assert missing.status_code == 400 and list(missing.json()["fields"]) == ["password"]

    login = run_cli(live_server, "login", "--username", "alice", "--password-stdin", stdin="wrong\n")
    assert login.returncode == 2 and login.stdout == ""  # bad input, as a missing token
    assert "pfs: not signed in: Wrong username or password" in login.stderr


def test_a_dry_run_after_a_refused_start_says_the_identifier_already_exists(
    live_server, analyst, analysis, recipe, tmp_path
) -> None:
    # 1,000 buckets over 5,000 devices: too noisy to start unconfirmed, but the recipe was stored first.
    boundaries = [round(i / 10 + 0.001, 4) for i in range(999)]
    recipe["dataTypeContent"] = {"age": {"dataType": "BucketedType", "boundaries": boundaries}}
    with Client(live_server.url, username="alice", password="alice-password") as pfs:
        with pytest.raises(ApiError) as refused:
            pfs.run_recipe("test.ages", recipe, progress=False)
        assert list(refused.value.fields) == ["confirmSmallCohorts"]
        assert Recipe.objects.count() == 1 and not Round.objects.exists()
        with pytest.raises(ApiError) as again:
            pfs.dry_run("test.ages", recipe)
        token = pfs.token
    first_line = str(again.value).splitlines()[0]
    assert first_line == "HTTP 400 invalid: recipeIdentifier: A recipe 'ages' already exists in this analysis."

    path = tmp_path / "recipe.json"
    path.write_text(json.dumps(recipe))
    done = run_cli(live_server, "dry-run", str(path), "--analysis", "test.ages", token=token)
    assert done.returncode == 2
    assert done.stderr.splitlines()[0] == (
        "pfs: the server refused the input, nothing was changed: "
        "recipeIdentifier: A recipe 'ages' already exists in this analysis."
    )


def test_results_are_typed_dataclasses(worker, live_server, analyst, analysis, recipe) -> None:
    with Client(live_server.url, username="alice", password="alice-password") as pfs:
        [listed] = pfs.analyses()
        dry_run = pfs.dry_run("test.ages", recipe)
        stored = pfs.create_recipe("test.ages", recipe)
        started = pfs.start_round(stored.id)
        pfs.wait(started.id, progress=False, **WAIT)
        release = pfs.release(started.id)
        budget = pfs.budget("test.ages")
    for result, kind in (
        (listed, Analysis),
        (dry_run, DryRun),
        (stored, StoredRecipe),
        (started, RoundView),
        (release, Release),
        (budget, Budget),
    ):
        assert dataclasses.is_dataclass(result) and isinstance(result, kind)
    assert (listed.identifier, listed.owner, listed.fleet) == ("test.ages", "alice", "small")
    assert dry_run.devices == FLEET_SIZE and dry_run.epsilon == recipe["privacy"]["epsilon"]
    assert stored.identifier == "ages" and stored.content == recipe
    [scope] = [s for s in budget.scopes if s.field is None]
    assert scope.epsilon_spent == release.analysis_spent["epsilon"] > 0


def test_a_wait_shows_a_progress_bar_and_the_release_is_a_typed_dataframe(
    worker, live_server, analyst, analysis, recipe
) -> None:
    drawn = io.StringIO()
    with Client(live_server.url, username="alice", password="alice-password") as pfs:
        release = pfs.run_recipe("test.ages", copy.deepcopy(recipe), progress=drawn, **WAIT)
    # tqdm's lines, each redrawn after a carriage return: the last one is the released round's.
    last = drawn.getvalue().split("\r")[-1]
    assert f"round {release.round_id}: 100%" in last and "5/5" in last
    assert f"released, {FLEET_SIZE:,} answered" in last

    frame = release.to_dataframe()
    labels = ["OOV", "[20, 30)", "[30, 40)", "[40, 50)", "[50, 60)", "[60, 70)", "[70, 80)", "[80, ∞)"]
    assert release.bucket_labels == [row["bucket"] for row in release.to_rows()]
    assert isinstance(frame["bucket"].dtype, pandas.CategoricalDtype) and frame["bucket"].cat.ordered
    assert frame["bucket"].cat.categories.tolist() == release.bucket_labels
    assert len(release.bucket_labels) == len(labels) == len(frame)
    # The recipe has no cohorts: NA, not the JSON's "".
    assert release.batches[0]["cohort"] == "" and frame["cohort"].isna().all()
    assert frame["estimate"].dtype == "Float64" and not frame["estimate"].isna().any()

    data = release.data
    assert frame.attrs == {
        "round_id": release.round_id,
        "analysis": "test.ages",
        "recipe": "ages",
        "mechanism": data["mechanism"],
        "epsilon_spent": data["epsilon_spent"],
        "delta_spent": data["delta"],
        "analysis_spent": data["analysis_spent"],
        "min_cohort": data["min_cohort"],
        "accountant": data["analysis_spent"]["accountant"],
        "intervals": data["intervals"],
        "view": data["view"],
    }
    assert frame.attrs["epsilon_spent"] == recipe["privacy"]["epsilon"] and frame.attrs["accountant"]
