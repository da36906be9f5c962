"""A device never loses a report (issue 29, requirement 5): each step of answering a task is on disk
before the next leaves the device, so a device killed at any step and run again with the same state
folder resumes there. Whatever the step, the ledger is charged once, the issuer signs one blinded
message, the aggregators accept one report, and it is the report the device would have sent
without the kill. ``--once`` says what it waits for and until when, and each step it takes.

The server is the fake of test_device_sdk with the real issuer's and leader's rules added: one
blinded message signed per device and collection (the same one signed again, as
aggregation.issuer.token_issue does; tested over HTTP in test_device_http), a token good for one
report (token_reused).
"""

from __future__ import annotations

import base64
import io
import json
import random
from dataclasses import replace
from datetime import datetime

import numpy as np
import pytest

from aggregation.aggregators import HELPER, LEADER
from aggregation.models import IssuedToken, LeaderShare, PendingReport
from aggregation.reports import rejections
from pfs_device.report_client import AggregatorKeys
from pfs_device.sdk import __main__ as sdk_main
from pfs_device.sdk import device as sdk_device
from pfs_device.sdk import ledger as sdk_ledger
from pfs_device.sdk.client import ClientError
from pfs_device.sdk.device import (
    ALREADY_RECEIVED,
    CHARGED,
    OLDER_SDK,
    SEALED,
    SIGNED,
    TOKEN_REQUESTED,
    Offer,
    ServerKeys,
    data_read,
    task_answer,
)
from pfs_device.sdk.ledger import Ledger
from pfs_device.sdk.pacing import Pacing
from tests.unit import test_device_http
from tests.unit.test_device_http import upload as http_upload
from tests.unit.test_device_http import verify
from tests.unit.test_device_sdk import TASK, Aggregators, device_line, offer
from tests.unit.test_sdk_pacing import FakeClient, FakeTime, served

# The fixtures of the device API's tests: a fleet of registered devices and an open round.
phones, phones_analysis, central_round = (
    test_device_http.phones,
    test_device_http.phones_analysis,
    test_device_http.central_round,
)


class Killed(Exception):
    """The device's process dies here: nothing after it runs, nothing in memory survives."""


class Server(Aggregators):
    """The issuer's and the leader's rules, and a kill at a chosen step of the device's requests."""

    def __init__(self) -> None:
        super().__init__()
        self.kill = ""
        self.signed: dict[str, int] = {}  # collection -> the one blinded message signed
        self.spent: set[str] = set()  # the digests of the tokens of accepted reports

    def token(self, collection_key: str, blinded: int) -> int:
        if self.kill == "token_sent":  # the request never reached the issuer
            raise Killed
        if self.signed.setdefault(collection_key, blinded) != blinded:
            raise ClientError("this device already has its token", code="token_already_issued", status=409)
        signature = super().token(collection_key, blinded)
        if self.kill == "token_answered":  # the issuer signed; the device died before reading the answer
            raise Killed
        return signature

    def upload(self, report) -> str:
        if self.kill == "upload_sent":
            raise Killed
        if report.token.digest in self.spent:
            raise ClientError("this token was used", code="token_reused", status=409)
        accepted = super().upload(report)
        self.spent.add(report.token.digest)
        if self.kill == "upload_answered":  # the leader has it; the device died before reading the answer
            raise Killed
        return accepted


def run(path, server: Server, the_offer=None, pacing: Pacing | None = None):
    """One run of the device: a fresh process, its ledger read from disk."""
    (data,) = data_read([device_line()])
    return task_answer(
        offer=the_offer or offer(),
        data=data,
        fleet="phones",
        ledger=Ledger(path),
        keys=server.keys(),
        service=server,
        rng=np.random.default_rng(1),
        pacing=pacing,
    )


def _once(monkeypatch, kill: str, server: Server) -> None:
    """Arrange for the device to die at ``kill``: in the device's own code, or in its requests."""
    if kill == "charge_written":  # the process dies while writing the charge: the rename never happens

        def replace_dies(*args):
            raise Killed

        monkeypatch.setattr(sdk_ledger.os, "replace", replace_dies)
    elif kill == "charged":  # the charge is on disk, nothing sealed yet
        monkeypatch.setattr(sdk_device, "report_seal", _dies)
    elif kill == "sealed":  # the sealed report is on disk, its token request not yet blinded
        monkeypatch.setattr(sdk_device, "report_token_blind", _dies)
    elif kill == "token_stored":  # the token in memory, the signed report not yet on disk
        monkeypatch.setattr(sdk_device, "report_sign", _dies)
    elif kill == "uploaded":  # the leader answered "accepted", the device died before recording it
        monkeypatch.setattr(Ledger, "forget", _dies)
    else:
        server.kill = kill


def _dies(*args, **kwargs):
    raise Killed


KILLS = [
    "charge_written",
    "charged",
    "sealed",
    "token_sent",
    "token_answered",
    "token_stored",
    "upload_sent",
    "upload_answered",
    "uploaded",
]


@pytest.fixture
def baseline(tmp_path):
    """What the device sends when nothing goes wrong."""
    server = Server()
    outcome = run(tmp_path / "baseline.json", server)
    assert (outcome.decision, outcome.upload) == ("answered", "accepted")
    return server


def _killed(monkeypatch, path, server, kill: str) -> None:
    """Run the device with the state at ``path`` until it is killed at ``kill``."""
    with monkeypatch.context() as patched:
        _once(patched, kill, server)
        with pytest.raises(Killed):
            run(path, server)


@pytest.mark.parametrize("kill", KILLS)
def test_a_device_killed_at_any_step_resumes_and_uploads_exactly_once(tmp_path, monkeypatch, baseline, kill) -> None:
    path = tmp_path / "ledger.json"
    server = Server()
    _killed(monkeypatch, path, server, kill)
    server.kill = ""
    outcome = run(path, server)  # the same state folder, a new process

    expected = ALREADY_RECEIVED if kill in ("upload_answered", "uploaded") else "accepted"
    assert (outcome.decision, outcome.upload) == ("answered", expected)
    stored = Ledger(path)
    columns = stored.columns(TASK.analysis)
    assert columns["epsilon_used"].tolist() == [1_000_000_000] and columns["reports_used"].tolist() == [1]
    assert len(server.signed) == 1  # one blinded message signed, whatever was retried
    assert len(server.reports) == 1 and len(server.spent) == 1  # one report accepted
    assert server.reports[0].tolist() == baseline.reports[0].tolist() and server.batches == baseline.batches
    entry = stored.decision(TASK.task_key)
    assert entry["upload"] == expected and "pending" not in entry  # done: the sealed report is gone

    again = run(path, server)  # and once done, done
    assert again.repeated and len(server.reports) == 1 and len(server.signed) == 1


@pytest.mark.parametrize(
    ("kill", "step"),
    [
        ("charged", CHARGED),
        ("sealed", SEALED),
        ("token_sent", TOKEN_REQUESTED),
        ("token_answered", TOKEN_REQUESTED),
        ("token_stored", TOKEN_REQUESTED),
        ("upload_sent", SIGNED),
        ("upload_answered", SIGNED),
    ],
)
def test_each_step_is_on_disk_before_the_next_leaves_the_device(tmp_path, monkeypatch, kill, step) -> None:
    path = tmp_path / "ledger.json"
    server = Server()
    _killed(monkeypatch, path, server, kill)
    pending = Ledger(path).decision(TASK.task_key)["pending"]
    assert pending["step"] == step
    assert Ledger(path).columns(TASK.analysis)["epsilon_used"].tolist() == [1_000_000_000]
    if step in (SEALED, TOKEN_REQUESTED):  # sealed before its token is asked for: the token names it
        assert pending["report"]["token"]["signature"] == "" and "vector" not in pending
        assert pending["report"]["token"]["nonce"]
    if step == TOKEN_REQUESTED:  # stored before the request left: the rerun sends this very message
        assert set(pending["blinding"]) == {"input_msg", "blinded", "inv"}
        # The prepared message starts with the nonce the report was sealed with.
        nonce = base64.b64decode(pending["report"]["token"]["nonce"])
        assert bytes.fromhex(pending["blinding"]["input_msg"]).startswith(nonce)
        if kill != "token_sent":
            assert server.signed[TASK.task_key] == int(pending["blinding"]["blinded"], 16)
    if step == SIGNED:  # the sealed report and its token, before the upload
        assert pending["report"]["token"]["signature"] and "blinding" not in pending and "vector" not in pending


def test_a_kill_while_the_charge_is_written_leaves_the_old_ledger(tmp_path, monkeypatch) -> None:
    path = tmp_path / "ledger.json"
    server = Server()
    with monkeypatch.context() as patched:
        _once(patched, "charge_written", server)
        with pytest.raises(Killed):
            run(path, server)
    assert not path.exists() and list(tmp_path.iterdir()) == []  # no ledger, no temporary file left
    assert server.tokens == []


def test_an_upload_that_cannot_reach_the_server_is_sent_on_the_next_pass(tmp_path) -> None:
    path = tmp_path / "ledger.json"
    server = Server()
    server.fail_upload = True
    first = run(path, server)
    assert first.upload == "failed: unreachable"
    assert Ledger(path).decision(TASK.task_key)["pending"]["step"] == SIGNED  # kept for the next pass
    server.fail_upload = False
    second = run(path, server)
    assert (second.upload, second.resumed) == ("accepted", SIGNED) and len(server.reports) == 1
    assert Ledger(path).columns(TASK.analysis)["reports_used"].tolist() == [1]


def test_a_refused_token_ends_the_task_with_its_budget_spent(tmp_path) -> None:
    path = tmp_path / "ledger.json"
    server = Server()
    server.signed[TASK.task_key] = 12345  # the issuer signed another blinded message for this device
    outcome = run(path, server)
    assert outcome.upload == "failed: token_already_issued"
    entry = Ledger(path).decision(TASK.task_key)
    assert "pending" not in entry and Ledger(path).columns(TASK.analysis)["reports_used"].tolist() == [1]
    assert run(path, server).repeated and server.reports == []


@pytest.mark.parametrize("step", [SEALED, TOKEN_REQUESTED])
def test_a_task_an_older_sdk_left_pending_fails_closed_and_sends_nothing(tmp_path, step) -> None:
    # Before wire format v4 the token came first (its blinding at "token_requested", no report) and
    # "sealed" held the report with its token: that token names no report, so nothing is sent.
    path = tmp_path / "ledger.json"
    server = Server()
    server.kill = "token_sent"
    with pytest.raises(Killed):
        run(path, server)
    ledger = Ledger(path)
    pending = ledger.decision(TASK.task_key)["pending"]
    if step == SEALED:
        pending["report"]["token"]["signature"] = base64.b64encode(b"\x01" * 256).decode()
        pending.pop("blinding")
    else:
        pending.pop("report")
    pending["step"] = step
    ledger.save()
    server.kill = ""
    outcome = run(path, server)
    assert (outcome.upload, outcome.resumed) == (OLDER_SDK, step)
    assert server.reports == [] and "pending" not in Ledger(path).decision(TASK.task_key)
    assert Ledger(path).columns(TASK.analysis)["reports_used"].tolist() == [1]  # the budget stays spent


def test_a_resumed_task_waits_for_the_times_it_planned_not_new_ones(tmp_path) -> None:
    path = tmp_path / "ledger.json"
    fake = FakeTime()
    start = fake.now
    paced = replace(offer(), spread_seconds=3600.0)
    server = Server()
    server.kill = "token_sent"
    with pytest.raises(Killed):
        run(path, server, paced, Pacing(sleep=fake.sleep, clock=fake.clock, rng=random.Random(3)))
    plan = Ledger(path).decision(TASK.task_key)["pending"]["plan"]
    assert plan["start"] == start and fake.now == start + plan["token_delay"]
    server.kill = ""
    events: list[dict] = []
    (data,) = data_read([device_line()])
    outcome = task_answer(
        offer=paced,
        data=data,
        fleet="phones",
        ledger=Ledger(path),
        keys=server.keys(),
        service=server,
        pacing=Pacing(sleep=fake.sleep, clock=fake.clock, rng=random.Random(99)),  # other coins: not drawn
        progress=events.append,
    )
    assert outcome.upload == "accepted" and fake.now == start + plan["upload_delay"]
    waits = [event for event in events if "waiting" in event]
    assert [event["waiting"] for event in waits] == ["upload"]  # the token's time has passed
    assert datetime.fromisoformat(waits[0]["until"]).timestamp() == pytest.approx(start + plan["upload_delay"], abs=1)
    assert events[0] == {"task": TASK.task_key, "resuming": TOKEN_REQUESTED}


class _Stderr(io.StringIO):
    """stderr, its lines logged in the order of the device's requests."""

    def __init__(self, log: list) -> None:
        super().__init__()
        self.log = log

    def write(self, text: str) -> int:
        for line in text.splitlines():
            if line.strip():
                self.log.append(("stderr", json.loads(line)))
        return len(text)


def test_once_says_what_it_waits_for_and_until_when_and_each_step(tmp_path, monkeypatch) -> None:
    server, log, fake = Aggregators(), [], FakeTime()
    monkeypatch.setattr(
        sdk_main, "DeviceClient", lambda url, credential: FakeClient(credential.device_id, server, log, 3600.0)
    )
    monkeypatch.setattr(sdk_main, "keys_fetch", lambda **kw: served(server)())
    monkeypatch.setattr(sdk_main, "Pacing", lambda **kw: Pacing(**kw, sleep=fake.sleep, clock=fake.clock))
    monkeypatch.setattr(sdk_main.sys, "stderr", _Stderr(log))
    creds = tmp_path / "creds.json"
    creds.write_text(json.dumps({"server": "http://s", "helper": "http://h", "devices": [{"id": "d0", "secret": "s"}]}))
    data = tmp_path / "data.jsonl"
    data.write_bytes(device_line(device_id="d0") + b"\n")
    start = fake.now
    argv = ["--credential", str(creds), "--data", str(data), "--state", str(tmp_path / "s"), "--once"]
    assert sdk_main.main(argv) == 0

    # The run's own warning first (its credentials name no relay), then in order: what the device
    # said on stderr, and the requests it made (FakeClient's log).
    assert "no relay" in log[0][1]["warning"]
    log = log[1:]
    steps = [entry[1].get("waiting") or entry[1]["progress"] if entry[0] == "stderr" else entry[1] for entry in log]
    assert steps == [CHARGED, SEALED, "token", "token", SIGNED, "upload", "upload", "uploaded"]  # each wait said first
    said = [entry[1] for entry in log if entry[0] == "stderr"]
    assert all(event["device"] == "d0" and event["task"] == TASK.task_key for event in said)
    token_wait, upload_wait = (event for event in said if "waiting" in event)
    plan = Ledger(tmp_path / "s" / "d0.json").state["tasks"][TASK.task_key]
    assert "pending" not in plan and plan["upload"] == "accepted" and said[-1]["upload"] == "accepted"
    # Until when: the times the device then waited for (the fake clock moves only when it sleeps).
    assert start < datetime.fromisoformat(token_wait["until"]).timestamp() <= start + 0.05 * 3600 + 1
    assert datetime.fromisoformat(upload_wait["until"]).timestamp() == pytest.approx(fake.now, abs=1)


# ---------------------------------------------------------------- the real issuer and leader


class Endpoints:
    """The device's service over the real endpoints (Django's test client), killed where told."""

    def __init__(self, device) -> None:
        self.device = device
        self.kill = ""

    def token(self, collection_key: str, blinded: int) -> int:
        response = self.device.token_request(collection_key, blinded)
        if response.status_code != 201:
            raise ClientError("refused", code=response.json()["code"], status=response.status_code)
        if self.kill == "token_answered":
            raise Killed
        return int.from_bytes(base64.b64decode(response.json()["blind_signature"]), "big")

    def upload(self, report) -> str:
        response = http_upload(report)
        if response.status_code != 202:
            raise ClientError("refused", code=response.json()["code"], status=response.status_code)
        if self.kill == "upload_answered":
            raise Killed
        return "accepted"


@pytest.mark.django_db
@pytest.mark.parametrize("kill", ["token_answered", "upload_answered"])
def test_against_the_real_issuer_and_leader_a_killed_device_gets_one_token_and_one_report_counts(
    phones, central_round, tmp_path, kill
) -> None:
    _, (device, *_) = phones
    key = central_round.task_key
    the_offer = Offer.from_json(device.tasks()["tasks"][0])
    served_keys = AggregatorKeys(leader=LEADER.public_key(), helper=HELPER.public_key())
    service = Endpoints(device)
    (data,) = data_read([device_line(age=34)])

    def device_run():
        return task_answer(
            offer=the_offer,
            data=data,
            fleet="phones",
            ledger=Ledger(tmp_path / "device.json"),
            keys=ServerKeys(served_keys, announced=served_keys),
            service=service,
            rng=np.random.default_rng(1),
        )

    service.kill = kill
    with pytest.raises(Killed):
        device_run()
    service.kill = ""
    outcome = device_run()
    # The real leader takes every upload at its door and finds a token spent when it verifies: a
    # second copy of the same report is dropped there as token_reused, so one report counts.
    assert outcome.upload == "accepted"
    assert IssuedToken.objects.filter(collection_key=key).count() == 1
    assert Ledger(tmp_path / "device.json").columns(the_offer.task.analysis)["reports_used"].tolist() == [1]
    copies = 2 if kill == "upload_answered" else 1
    assert PendingReport.objects.filter(collection_key=key).count() == copies
    assert verify(key) == copies
    assert LeaderShare.objects.get().reports == 1
    assert rejections(key) == ({"leader": {"token_reused": 1}} if copies == 2 else {})
