"""pfs_client against a scripted HTTP server in a thread: retries, idempotency keys, pagination,
error parsing, waiting, CSV, and the command line's exit codes. No Django, no database, no other process: the
client in a process of its own (no Django imported, ``python -m pfs_client``) is tested in
tests/integration/test_python_client_processes.py."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from pfs_client import (
    AdaptiveRunFailed,
    ApiError,
    AuthenticationError,
    Client,
    Release,
    Round,
    RoundFailed,
    TransportError,
    WaitTimeout,
)
from pfs_client.cli import main
from pfs_client.models import CSV_COLUMNS
from pfs_client.transport import Transport

DROP = object()  # answer nothing and close the connection, as a crashed proxy does


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class FakeApi:
    """Answers each (method, path) from a script; the last answer repeats."""

    url: str
    routes: dict[tuple[str, str], list[Any]] = field(default_factory=dict)
    seen: list[Seen] = field(default_factory=list)

    def on(self, method: str, path: str, *answers: Any) -> None:
        self.routes[(method, path)] = list(answers)

    def requests(self, method: str, path: str) -> list[Seen]:
        return [s for s in self.seen if s.method == method and s.path == path]

    def answer(self, method: str, path: str) -> Any:
        answers = self.routes.get((method, path)) or self.routes.get((method, path.split("?")[0]))
        if not answers:
            return 404, {"detail": "No such API endpoint.", "code": "not_found", "fields": {}}
        return answers.pop(0) if len(answers) > 1 else answers[0]


@pytest.fixture
def fake():
    api: FakeApi

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            api.seen.append(Seen(self.command, self.path, dict(self.headers), json.loads(raw) if raw else None))
            answer = api.answer(self.command, self.path)
            if answer is DROP:
                self.close_connection = True
                return
            status, body, *rest = answer
            headers = rest[0] if rest else {}
            if isinstance(body, (dict, list)):
                data, content_type = json.dumps(body).encode(), "application/json"
            else:
                data, content_type = body.encode(), headers.pop("Content-Type", "text/html")
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = _serve

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    api = FakeApi(url=f"http://127.0.0.1:{server.server_address[1]}")
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
    thread.start()
    yield api
    server.shutdown()
    server.server_close()


@pytest.fixture
def sleeps(monkeypatch) -> list[float]:
    """The waits the transport chose between retries, instead of sleeping them."""
    waited: list[float] = []
    monkeypatch.setattr(Transport, "_pause", lambda self, seconds: waited.append(seconds))
    return waited


def client_for(fake: FakeApi, **options: Any) -> Client:
    return Client(fake.url, token="t0k3n", **options)


ROUND = {"id": 7, "recipe": 3, "status": "queued", "progress": {"shards_done": 0, "shards_total": 5}, "error": ""}
RELEASE = {
    "reports": 5000,
    "min_cohort": 2935,
    "epsilon_spent": 1.0,
    "batches": [
        {
            "cohort": "en",
            "reports": 4000,
            "min_cohort": 2935,
            "suppressed": False,
            "buckets": [
                {"label": "OOV", "estimate": 12.5, "standard_error": 3.25, "ci95": [6.13, 18.87]},
                {"label": "[20, 30)", "estimate": -1.0, "standard_error": 2.0, "ci95": [-4.92, 2.92]},
            ],
        },
        {"cohort": "fr", "reports": 1000, "min_cohort": 2935, "suppressed": True, "reason": "Below the minimum."},
    ],
}


def round_with(status: str, **extra: Any) -> tuple[int, dict]:
    return 200, {**ROUND, "status": status, **extra}


# ---------------------------------------------------------------------- authentication


def test_login_posts_the_credentials_and_sends_the_token_afterwards(fake) -> None:
    fake.on("POST", "/api/token/", (200, {"token": "abc123"}))
    fake.on("GET", "/api/analyses/", (200, {"count": 0, "next": None, "previous": None, "results": []}))
    client = Client(fake.url, username="alice", password="secret")
    assert client.token == "abc123"
    client.analyses()
    assert fake.requests("POST", "/api/token/")[0].body == {"username": "alice", "password": "secret"}
    assert fake.requests("GET", "/api/analyses/")[0].headers["Authorization"] == "Token abc123"


def test_login_does_not_send_a_stale_token(fake) -> None:
    fake.on("POST", "/api/token/", (200, {"token": "fresh"}))
    client = Client(fake.url, token="stale")
    assert client.login("alice", "secret") == "fresh"
    assert "Authorization" not in fake.requests("POST", "/api/token/")[0].headers


# ---------------------------------------------------------------------- pagination


def test_lists_follow_next_across_pages_on_the_clients_own_host(fake) -> None:
    # Behind a proxy the server may link to a host the client cannot reach: only its path counts.
    fake.on(
        "GET",
        "/api/analyses/",
        (200, {"count": 3, "next": "http://internal:9/api/analyses/?page=2", "results": [{"identifier": "a"}]}),
    )
    fake.on(
        "GET",
        "/api/analyses/?page=2",
        (200, {"count": 3, "next": None, "results": [{"identifier": "b"}, {"identifier": "c"}]}),
    )
    assert [a.identifier for a in client_for(fake).analyses()] == ["a", "b", "c"]


# ---------------------------------------------------------------------- retries and idempotency keys


def test_a_throttled_request_waits_as_long_as_retry_after_says_then_succeeds(fake, sleeps) -> None:
    fake.on(
        "GET",
        "/api/rounds/7/",
        (429, {"detail": "Slow down.", "code": "throttled", "fields": {}}, {"Retry-After": "3"}),
        round_with("running"),
    )
    assert client_for(fake).round(7).status == "running"
    assert sleeps == [3.0]
    assert len(fake.requests("GET", "/api/rounds/7/")) == 2


def test_a_round_start_answered_502_is_retried_with_the_same_idempotency_key(fake, sleeps) -> None:
    fake.on("POST", "/api/recipes/3/rounds/", (502, "<html><title>502 Bad Gateway</title></html>"), (202, ROUND))
    assert client_for(fake).start_round(3).id == 7
    keys = [s.headers.get("Idempotency-Key") for s in fake.requests("POST", "/api/recipes/3/rounds/")]
    assert len(keys) == 2 and keys[0] and keys[0] == keys[1]


def test_a_round_start_whose_connection_dropped_is_retried_with_the_same_key(fake, sleeps) -> None:
    fake.on("POST", "/api/recipes/3/rounds/", DROP, (202, ROUND))
    assert client_for(fake).start_round(3, idempotency_key="mine-1").id == 7
    keys = [s.headers.get("Idempotency-Key") for s in fake.requests("POST", "/api/recipes/3/rounds/")]
    assert keys == ["mine-1", "mine-1"]


def test_each_start_has_a_key_of_its_own(fake) -> None:
    fake.on("POST", "/api/recipes/3/rounds/", (202, ROUND))
    client = client_for(fake)
    client.start_round(3)
    client.start_round(3)
    keys = {s.headers["Idempotency-Key"] for s in fake.requests("POST", "/api/recipes/3/rounds/")}
    assert len(keys) == 2


def test_a_post_without_a_key_is_not_retried_after_a_503(fake, sleeps) -> None:
    # A cancel the server may have done already is not sent twice.
    fake.on("POST", "/api/rounds/7/cancel/", (503, {"detail": "Unavailable.", "code": "unavailable", "fields": {}}))
    with pytest.raises(ApiError) as raised:
        client_for(fake).cancel(7)
    assert raised.value.status == 503
    assert len(fake.requests("POST", "/api/rounds/7/cancel/")) == 1 and sleeps == []


def test_a_post_without_a_key_is_retried_when_it_was_throttled(fake, sleeps) -> None:
    fake.on("POST", "/api/rounds/7/cancel/", (429, {"detail": "Slow down."}, {"Retry-After": "1"}), (200, {}))
    fake.on("GET", "/api/rounds/7/", round_with("cancelled"))
    assert client_for(fake).cancel(7).status == "cancelled"
    assert len(fake.requests("POST", "/api/rounds/7/cancel/")) == 2 and sleeps == [1.0]


def test_transient_failures_beyond_the_retries_raise_the_last_answer(fake, sleeps) -> None:
    fake.on("GET", "/api/rounds/7/", (504, "Gateway Timeout", {"Content-Type": "text/plain"}))
    with pytest.raises(ApiError) as raised:
        client_for(fake, retries=2, backoff=0.5).round(7)
    assert (raised.value.status, raised.value.code, raised.value.detail) == (504, "server_error", "Gateway Timeout")
    assert sleeps == [0.5, 1.0]  # exponential backoff
    assert len(fake.requests("GET", "/api/rounds/7/")) == 3


def test_a_retry_after_beyond_the_allowed_wait_raises_at_once(fake, sleeps) -> None:
    fake.on("GET", "/api/rounds/7/", (429, {"detail": "Slow down."}, {"Retry-After": "3600"}))
    with pytest.raises(ApiError) as raised:
        client_for(fake, max_retry_after=60).round(7)
    assert raised.value.status == 429 and sleeps == []


def test_a_server_that_is_not_listening_raises_a_transport_error(sleeps) -> None:
    with pytest.raises(TransportError, match="refused"):
        Client("http://127.0.0.1:9", token="t", retries=1).round(1)
    assert len(sleeps) == 1


# ---------------------------------------------------------------------- error bodies


@pytest.mark.parametrize(
    ("status", "body", "code", "detail", "fields"),
    [
        (  # the API's own format
            400,
            {
                "detail": "Invalid input: privacy.epsilon0.",
                "code": "invalid",
                "fields": {"privacy.epsilon0": ["Must be greater than 0."]},
            },
            "invalid",
            "Invalid input: privacy.epsilon0.",
            {"privacy.epsilon0": ["Must be greater than 0."]},
        ),
        (  # DRF's default validation errors, nested
            400,
            {"privacy": {"epsilon0": ["Must be greater than 0."]}, "query": ["Required."]},
            "invalid",
            "Invalid input.",
            {"privacy.epsilon0": ["Must be greater than 0."], "query": ["Required."]},
        ),
        (403, {"detail": "The analysis is not approved."}, "permission_denied", "The analysis is not approved.", {}),
        (500, "<html><head><title>Server Error (500)</title></head></html>", "server_error", "Server Error (500)", {}),
    ],
)
def test_error_bodies_of_every_shape_are_parsed(fake, status, body, code, detail, fields) -> None:
    fake.on("GET", "/api/analyses/x/", (status, body))
    with pytest.raises(ApiError) as raised:
        client_for(fake, retries=0).analysis("x")
    error = raised.value
    assert (error.status, error.code, error.detail, error.fields) == (status, code, detail, fields)


def test_an_api_error_with_one_field_says_its_message_in_full_on_its_first_line() -> None:
    # The server's detail only names the field: the message is what says what is wrong.
    message = "A recipe 'ages' already exists in this analysis."
    error = ApiError(400, "invalid", "Invalid input: recipeIdentifier.", {"recipeIdentifier": [message]})
    assert str(error) == f"HTTP 400 invalid: recipeIdentifier: {message}"
    assert error.summary == f"recipeIdentifier: {message}" and error.details() == []


def test_an_api_error_with_several_fields_reads_as_one_line_per_field() -> None:
    fields = {"privacy.epsilon0": ["Must be > 0."], "query": ["Required."]}
    error = ApiError(400, "invalid", "Invalid input: privacy.epsilon0, query.", fields)
    assert str(error) == (
        "HTTP 400 invalid: Invalid input: privacy.epsilon0, query.\n  privacy.epsilon0: Must be > 0.\n  query: Required."
    )


def test_a_401_raises_the_authentication_error(fake) -> None:
    wrong = (401, {"detail": "Wrong username or password: no token was given.", "code": "authentication_failed"})
    fake.on("POST", "/api/token/", wrong)
    with pytest.raises(AuthenticationError) as raised:
        Client(fake.url, username="alice", password="wrong")
    assert raised.value.status == 401 and isinstance(raised.value, ApiError)
    assert str(raised.value) == "HTTP 401 authentication_failed: Wrong username or password: no token was given."


# ---------------------------------------------------------------------- rounds and releases


def script_a_round(fake: FakeApi, *statuses: str, error: str = "") -> None:
    fake.on("POST", "/api/analyses/test.ages/recipes/", (201, {"id": 3, "min_cohort": 2935}))
    fake.on("POST", "/api/recipes/3/rounds/", (202, ROUND))
    fake.on("GET", "/api/rounds/7/", *(round_with(s, error=error if s != "running" else "") for s in statuses))
    fake.on("GET", "/api/rounds/7/release/", (200, RELEASE))


def test_run_recipe_polls_until_released_and_returns_the_release(fake) -> None:
    script_a_round(fake, "queued", "running", "released")
    seen = []
    release = client_for(fake).run_recipe("test.ages", {"query": "q"}, poll=0, on_progress=seen.append)
    assert [r.status for r in seen] == ["queued", "running", "released"]
    assert isinstance(release, Release) and release.round_id == 7 and release["reports"] == 5000
    assert fake.requests("POST", "/api/analyses/test.ages/recipes/")[0].body == {"query": "q"}


def test_run_recipe_sends_keys_derived_from_one_idempotency_key(fake) -> None:
    script_a_round(fake, "released")
    client_for(fake).run_recipe("test.ages", {}, poll=0, idempotency_key="cell-3")
    assert fake.requests("POST", "/api/analyses/test.ages/recipes/")[0].headers["Idempotency-Key"] == "cell-3/recipe"
    assert fake.requests("POST", "/api/recipes/3/rounds/")[0].headers["Idempotency-Key"] == "cell-3"


def test_run_recipe_with_a_stored_recipes_id_starts_a_new_round_of_it(fake) -> None:
    script_a_round(fake, "released")
    assert client_for(fake).run_recipe(None, 3, poll=0).round_id == 7
    assert fake.requests("POST", "/api/analyses/test.ages/recipes/") == []


def test_run_recipe_reads_the_recipe_from_a_file(fake, tmp_path) -> None:
    script_a_round(fake, "released")
    path = tmp_path / "recipe.json"
    path.write_text(json.dumps({"query": "from a file"}))
    client_for(fake).run_recipe("test.ages", path, poll=0)
    assert fake.requests("POST", "/api/analyses/test.ages/recipes/")[0].body == {"query": "from a file"}


def test_run_recipe_without_waiting_returns_the_queued_round(fake) -> None:
    script_a_round(fake, "released")
    round_ = client_for(fake).run_recipe("test.ages", {}, wait=False)
    assert (round_.id, round_.status) == (7, "queued")
    assert fake.requests("GET", "/api/rounds/7/") == []


@pytest.mark.parametrize("status", ["failed", "cancelled"])
def test_a_round_that_ends_without_a_release_raises_round_failed(fake, status) -> None:
    script_a_round(fake, "running", status, error="shard 2: budget")
    with pytest.raises(RoundFailed, match=f"round 7 {status}: shard 2: budget") as raised:
        client_for(fake).run_recipe("test.ages", {}, poll=0)
    assert raised.value.round.status == status


def test_a_wait_draws_a_progress_bar_of_the_shards_done_unless_told_not_to(fake, capsys) -> None:
    running = {"shards_done": 2, "shards_total": 5, "devices_answered": 1200}
    done = {"shards_done": 5, "shards_total": 5, "devices_answered": 3000}
    fake.on("GET", "/api/rounds/7/", round_with("running", progress=running), round_with("released", progress=done))
    drawn = io.StringIO()
    assert client_for(fake).wait(7, poll=0, progress=drawn).status == "released"
    last = drawn.getvalue().split("\r")[-1]
    assert "round 7" in last and "5/5" in last and "released, 3,000 answered" in last
    assert "2/5" in drawn.getvalue()  # the poll before it
    fake.on("GET", "/api/rounds/7/", round_with("released", progress=done))
    capsys.readouterr()
    client_for(fake).wait(7, poll=0)  # by default, on stderr
    assert "round 7: 100%" in capsys.readouterr().err
    client_for(fake).wait(7, poll=0, progress=False)
    assert "round 7" not in capsys.readouterr().err


def test_a_round_on_real_devices_counts_devices_answered_in_its_bar(fake) -> None:
    progress = {"shards_done": 0, "shards_total": 0, "devices_answered": 42}
    assert Round.from_json({**ROUND, "progress": progress}).steps == (42, None)
    fake.on("GET", "/api/rounds/7/", round_with("released", progress=progress))
    drawn = io.StringIO()
    client_for(fake).wait(7, poll=0, progress=drawn)
    assert "42device" in drawn.getvalue().replace(" ", "")


def test_results_are_typed_dataclasses(fake) -> None:
    fake.on("GET", "/api/analyses/test.ages/", (200, {"identifier": "test.ages", "title": "Ages", "spent": {}}))
    fake.on("POST", "/api/analyses/test.ages/dry-run/", (200, {"devices": 9, "would_answer": 7, "too_noisy": False}))
    client = client_for(fake)
    analysis, dry_run = client.analysis("test.ages"), client.dry_run("test.ages", {})
    assert dataclasses.is_dataclass(analysis) and (analysis.identifier, analysis.title) == ("test.ages", "Ages")
    assert dataclasses.is_dataclass(dry_run) and (dry_run.devices, dry_run.would_answer) == (9, 7)


def test_a_closed_client_sends_nothing_and_the_context_manager_closes_it(fake) -> None:
    fake.on("GET", "/api/rounds/7/", round_with("running"))
    with client_for(fake) as client:
        assert client.round(7).status == "running" and not client.closed
    assert client.closed
    with pytest.raises(TransportError, match="closed"):
        client.round(7)
    assert len(fake.requests("GET", "/api/rounds/7/")) == 1


def test_waiting_past_the_timeout_raises_and_leaves_the_round_alone(fake) -> None:
    script_a_round(fake, "running")
    with pytest.raises(WaitTimeout, match="round 7 still running"):
        client_for(fake).wait(7, poll=0.01, timeout=0.05)
    assert fake.requests("POST", "/api/rounds/7/cancel/") == []


def test_release_rows_have_the_dashboard_csv_columns_and_skip_suppressed_batches() -> None:
    release = Release(round_id=7, data=RELEASE)
    assert release.to_rows() == [
        {"cohort": "en", "bucket": "OOV", "estimate": 12.5, "standard_error": 3.25, "ci_low": 6.13, "ci_high": 18.87},
        {
            "cohort": "en",
            "bucket": "[20, 30)",
            "estimate": -1.0,
            "standard_error": 2.0,
            "ci_low": -4.92,
            "ci_high": 2.92,
        },
    ]
    text = release.to_csv()
    # A label with a comma is quoted, as the csv module quotes it for the dashboard.
    assert text.split("\r\n") == [
        ",".join(CSV_COLUMNS),
        "en,OOV,12.5,3.25,6.13,18.87",
        'en,"[20, 30)",-1.0,2.0,-4.92,2.92',
        "",
    ]
    assert list(csv.DictReader(io.StringIO(text)))[1]["bucket"] == "[20, 30)"


def test_release_files_are_written_as_returned(tmp_path) -> None:
    release = Release(round_id=7, data=RELEASE)
    release.to_csv(tmp_path / "r.csv")
    release.to_json(tmp_path / "r.json")
    assert (tmp_path / "r.csv").read_bytes() == release.to_csv().encode()
    assert json.loads((tmp_path / "r.json").read_text()) == RELEASE


def test_release_csv_prefers_the_servers_csv(fake) -> None:
    served = "cohort,bucket,estimate,standard_error,ci_low,ci_high\r\n,OOV,1.0,2.0,-2.9,4.9\r\n"
    fake.on("GET", "/api/rounds/7/release.csv", (200, served, {"Content-Type": "text/csv; charset=utf-8"}))
    assert client_for(fake).release_csv(7) == served
    assert fake.requests("GET", "/api/rounds/7/release.csv")[0].headers["Accept"] == "text/csv"


def test_release_csv_builds_the_rows_from_the_json_when_the_server_has_no_csv(fake) -> None:
    # A server without the CSV endpoint answers 404; the release's JSON is then read with the options.
    fake.on("GET", "/api/rounds/7/release.csv?view=clipped", (404, {"detail": "Not found."}))
    fake.on("GET", "/api/rounds/7/release/?view=clipped", (200, RELEASE))
    assert client_for(fake).release_csv(7, view="clipped") == Release(round_id=7, data=RELEASE).to_csv()


def test_release_csv_of_an_unreleased_round_raises_the_servers_404(fake) -> None:
    not_yet = (404, {"detail": "No release: the round is running.", "code": "not_found", "fields": {}})
    fake.on("GET", "/api/rounds/7/release.csv", not_yet)
    fake.on("GET", "/api/rounds/7/release/", not_yet)
    with pytest.raises(ApiError, match="the round is running"):
        client_for(fake).release_csv(7)


# ---------------------------------------------------------------------- adaptive runs

RUN = {"id": 4, "analysis": "t.discovery", "status": "running", "stop_reason": "", "levels": [], "current_round": None}


def test_run_adaptive_sends_the_spec_for_the_analysis_given_and_waits_until_finished(fake) -> None:
    fake.on("POST", "/api/adaptive-runs/", (201, RUN))
    finished = {**RUN, "status": "finished", "levels": [{"length": 1, "kept": []}]}
    fake.on("GET", "/api/adaptive-runs/4/", (200, RUN), (200, finished))
    run = client_for(fake).run_adaptive("t.discovery", {"analysis": "other", "kind": "ngram_discovery"}, poll=0)
    assert (run.status, len(run.levels)) == ("finished", 1)
    started = fake.requests("POST", "/api/adaptive-runs/")[0]
    assert started.body == {"analysis": "t.discovery", "kind": "ngram_discovery"}
    assert started.headers.get("Idempotency-Key")


def test_run_adaptive_with_a_baseline_waits_for_the_comparison(fake) -> None:
    fake.on("POST", "/api/adaptive-runs/", (201, RUN))
    finished = {**RUN, "status": "finished"}
    compared = {**finished, "comparison": {"available": True}}
    fake.on("GET", "/api/adaptive-runs/4/", (200, finished), (200, compared))
    run = client_for(fake).run_adaptive(None, {"analysis": "t.discovery", "baseline": {"rows": 4}}, poll=0)
    assert run["comparison"] == {"available": True}


def test_a_failed_adaptive_run_raises(fake) -> None:
    fake.on("POST", "/api/adaptive-runs/", (201, RUN))
    fake.on("GET", "/api/adaptive-runs/4/", (200, {**RUN, "status": "failed", "stop_reason": "refused"}))
    with pytest.raises(AdaptiveRunFailed, match="adaptive run 4 failed: refused"):
        client_for(fake).run_adaptive(None, {"analysis": "t.discovery"}, poll=0)


# ---------------------------------------------------------------------- command line


def cli(fake: FakeApi, *args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(["--url", fake.url, "--token", "t0k3n", *args], stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def test_cli_run_writes_the_release_csv(fake, tmp_path) -> None:
    script_a_round(fake, "running", "released")
    recipe = tmp_path / "recipe.json"
    recipe.write_text("{}")
    code, out, err = cli(
        fake, "run", str(recipe), "--analysis", "test.ages", "--poll", "0", "--csv", str(tmp_path / "o.csv")
    )
    assert code == 0, err
    assert (tmp_path / "o.csv").read_bytes() == Release(round_id=7, data=RELEASE).to_csv().encode()
    assert "round 7 released: 5,000 reports" in out


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_cli_run_draws_a_progress_bar_on_a_terminal_and_lines_elsewhere(fake, tmp_path) -> None:
    recipe = tmp_path / "recipe.json"
    recipe.write_text("{}")
    args = ["--url", fake.url, "--token", "t0k3n", "run", str(recipe), "--analysis", "test.ages", "--poll", "0"]
    script_a_round(fake, "running", "released")
    terminal = Terminal()
    assert main(args, stdout=io.StringIO(), stderr=terminal) == 0
    drawn = terminal.getvalue()
    assert "\rround 7:" in drawn and "0/5 [" in drawn and "pfs: round 7 running" not in drawn
    script_a_round(fake, "running", "released")
    log = io.StringIO()
    assert main(args, stdout=io.StringIO(), stderr=log) == 0
    assert log.getvalue().splitlines()[:2] == ["pfs: round 7 running, 0/5 shards", "pfs: round 7 released, 0/5 shards"]
    assert "%" not in log.getvalue() and "\r" not in log.getvalue()


@pytest.mark.parametrize(("content", "message"), [(None, "cannot read"), ("{not json", "is not a JSON object")])
def test_cli_refuses_an_unreadable_or_invalid_recipe_file_with_exit_code_2(fake, tmp_path, content, message) -> None:
    path = tmp_path / "recipe.json"
    if content is not None:
        path.write_text(content)
    code, _, err = cli(fake, "run", str(path), "--analysis", "test.ages")
    assert code == 2 and message in err
    assert fake.seen == []  # nothing reached the server


def test_cli_prints_the_servers_field_messages_for_a_refused_recipe_with_exit_code_2(fake, tmp_path) -> None:
    fields = {"privacy.epsilon0": ["Must be greater than 0."]}
    fake.on(
        "POST",
        "/api/analyses/test.ages/recipes/",
        (400, {"detail": "Invalid input: privacy.epsilon0.", "code": "invalid", "fields": fields}),
    )
    path = tmp_path / "recipe.json"
    path.write_text("{}")
    code, _, err = cli(fake, "run", str(path), "--analysis", "test.ages")
    assert code == 2
    assert err.splitlines() == [
        "pfs: the server refused the input, nothing was changed: privacy.epsilon0: Must be greater than 0."
    ]
    fields["query"] = ["Required."]
    code, _, err = cli(fake, "run", str(path), "--analysis", "test.ages")
    assert code == 2 and err.splitlines()[1:] == ["  privacy.epsilon0: Must be greater than 0.", "  query: Required."]


def test_cli_exits_1_when_the_round_fails(fake, tmp_path) -> None:
    script_a_round(fake, "failed", error="the aggregators refused")
    path = tmp_path / "recipe.json"
    path.write_text("{}")
    code, _, err = cli(fake, "run", str(path), "--analysis", "test.ages", "--poll", "0")
    assert code == 1 and err.strip().endswith("pfs: round 7 failed: the aggregators refused")


def test_cli_runs_a_stored_recipe_by_id_and_refuses_a_run_with_neither(fake, tmp_path) -> None:
    script_a_round(fake, "released")
    assert cli(fake, "run", "--recipe-id", "3", "--no-wait")[:2] == (0, "7\n")
    code, _, err = cli(fake, "run", "--analysis", "test.ages")
    assert code == 2 and "RECIPE.json" in err
    path = tmp_path / "recipe.json"
    path.write_text("{}")
    code, _, err = cli(fake, "run", str(path))
    assert code == 2 and "--analysis" in err
    assert fake.requests("POST", "/api/analyses/test.ages/recipes/") == []


def test_cli_without_a_token_says_how_to_get_one(fake, monkeypatch) -> None:
    monkeypatch.delenv("PFS_TOKEN", raising=False)
    err = io.StringIO()
    assert main(["--url", fake.url, "status", "7"], stdout=io.StringIO(), stderr=err) == 2
    assert "no token" in err.getvalue() and fake.seen == []


def test_cli_with_a_token_the_server_does_not_know_exits_2(fake) -> None:
    unknown = (401, {"detail": "Invalid token.", "code": "authentication_failed", "fields": {}})
    fake.on("GET", "/api/rounds/7/", unknown)
    code, out, err = cli(fake, "status", "7")
    assert (code, out, err) == (2, "", "pfs: not signed in: Invalid token.\n")


def test_cli_login_prints_the_token(fake, monkeypatch) -> None:
    fake.on("POST", "/api/token/", (200, {"token": "abc123"}))
    monkeypatch.setenv("PFS_PASSWORD", "secret")
    out = io.StringIO()
    assert main(["login", "--url", fake.url, "--username", "alice"], stdout=out, stderr=io.StringIO()) == 0
    assert out.getvalue() == "abc123\n"


def test_cli_export_writes_csv_and_json(fake, tmp_path) -> None:
    fake.on("GET", "/api/rounds/7/release/", (200, RELEASE))
    code, _, err = cli(fake, "export", "7", "--csv", str(tmp_path / "r.csv"), "--json", str(tmp_path / "r.json"))
    assert code == 0, err
    with open(tmp_path / "r.csv", newline="") as written:
        assert written.read() == Release(round_id=7, data=RELEASE).to_csv()
    assert json.loads((tmp_path / "r.json").read_text()) == RELEASE


def test_cli_status_and_cancel(fake) -> None:
    fake.on("GET", "/api/rounds/7/", round_with("running"))
    fake.on("POST", "/api/rounds/7/cancel/", round_with("cancelled", error="cancelled by alice"))
    assert cli(fake, "status", "7")[1] == "round 7 running, 0/5 shards\n"
    code, out, _ = cli(fake, "cancel", "7")
    assert code == 0 and out == "round 7 cancelled, 0/5 shards: cancelled by alice\n"


def test_cli_usage_errors_exit_2(fake) -> None:
    with pytest.raises(SystemExit) as raised:
        main(["status"], stdout=io.StringIO(), stderr=io.StringIO())  # no ROUND
    assert raised.value.code == 2


PROPOSED = {
    "met": True,
    "target": {"relativeError": 0.1},
    "message": "The cheapest parameters that meet a relative error of 0.1 on the largest bucket at 95%: ...",
    "proposal": {"privacy": {"epsilon": 0.75}},
    "recipe": {"privacy": {"epsilon": 0.75}},
}


def test_propose_sends_the_recipe_and_the_target(fake) -> None:
    fake.on("POST", "/api/analyses/test.ages/recipes/propose/", (200, PROPOSED))
    client = Client(fake.url, token="t0k3n")
    assert client.propose("test.ages", {"query": "q"}, relative_error=0.1) == PROPOSED
    [seen] = fake.requests("POST", "/api/analyses/test.ages/recipes/propose/")
    assert seen.body == {"recipe": {"query": "q"}, "target": {"relativeError": 0.1}}
    with pytest.raises(ValueError):
        client.propose("test.ages", {}, half_width=5, relative_error=0.1)


def test_cli_propose_prints_the_answer_and_exits_1_when_no_parameters_meet_it(fake, tmp_path) -> None:
    path = tmp_path / "recipe.json"
    path.write_text("{}")
    fake.on("POST", "/api/analyses/test.ages/recipes/propose/", (200, PROPOSED))
    code, out, err = cli(fake, "propose", str(path), "--analysis", "test.ages", "--relative-error", "0.1")
    assert code == 0 and json.loads(out) == PROPOSED and "The cheapest parameters" in err
    unmet = {**PROPOSED, "met": False, "proposal": None, "message": "No parameters within the policy meet ±1"}
    fake.on("POST", "/api/analyses/test.ages/recipes/propose/", (200, unmet))
    code, _, err = cli(fake, "propose", str(path), "--analysis", "test.ages", "--half-width", "1")
    assert code == 1 and "No parameters within the policy meet ±1" in err


@pytest.mark.parametrize("value", ["0", "-3", "nan", "inf"])
def test_cli_propose_refuses_a_target_that_is_not_a_positive_number_with_exit_code_2(fake, tmp_path, value) -> None:
    path = tmp_path / "recipe.json"
    path.write_text("{}")
    code, _, err = cli(fake, "propose", str(path), "--analysis", "test.ages", "--half-width", value)
    assert code == 2 and "positive finite number" in err
    assert fake.seen == []  # nothing reached the server


def test_cli_propose_needs_exactly_one_target(fake, tmp_path) -> None:
    path = tmp_path / "recipe.json"
    path.write_text("{}")
    with pytest.raises(SystemExit) as usage:
        cli(fake, "propose", str(path), "--analysis", "test.ages")
    assert usage.value.code == 2
    with pytest.raises(SystemExit) as usage:
        cli(fake, "propose", str(path), "--analysis", "a", "--half-width", "1", "--relative-error", "0.1")
    assert usage.value.code == 2


def test_cli_dry_run_says_when_a_recipe_is_too_noisy(fake, tmp_path) -> None:
    path = tmp_path / "recipe.json"
    path.write_text("{}")
    reason = "The expected noise exceeds what most buckets can hold: ±527 devices per bucket at 95%"
    fake.on("POST", "/api/analyses/test.ages/dry-run/", (200, {"too_noisy": True, "too_noisy_reason": reason}))
    code, out, err = cli(fake, "dry-run", str(path), "--analysis", "test.ages")
    assert code == 0 and json.loads(out)["too_noisy"] is True
    assert f"pfs: too noisy: {reason} (run needs --confirm-small-cohorts)" in err
