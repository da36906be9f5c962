"""The device SDK asks for its token and uploads at independent random times (pfs_device.sdk.pacing):
a fake clock and sleep record what the device waits, and seeded draws check the distribution. The
device's own floors hold whatever the server sends (issue 29, requirement 3): it paces over at least
MIN_SPREAD, keeps its upload at least a gap after its token, and declines a task whose deadline
leaves less, before anything is charged or sent."""

from __future__ import annotations

import base64
import json
import math
import random
import secrets
import time
from dataclasses import replace
from datetime import UTC, datetime
from types import SimpleNamespace

import numpy as np
import pytest

from pfs_device.decision import snapshot_digest
from pfs_device.report_client import AggregatorKeys
from pfs_device.sdk import __main__ as sdk_main
from pfs_device.sdk.device import Offer, data_read, task_answer
from pfs_device.sdk.keys import FetchedKeys
from pfs_device.sdk.ledger import Ledger
from pfs_device.sdk.pacing import (
    DEADLINE_MARGIN,
    GAP_SHARE,
    MIN_GAP,
    MIN_SPREAD,
    TOKEN_SHARE,
    TOO_LITTLE_TIME,
    Pacing,
    TooLittleTime,
    plan_draw,
)
from tests.unit.test_device_sdk import ISSUER, POLICY, TASK, Aggregators, device_line, offer

SPREAD = 3600.0


class FakeTime:
    """A clock that only moves when the device sleeps, and a log of what the device did when."""

    def __init__(self, start: float = 1_000_000.0) -> None:
        self.now = start
        self.events: list[tuple[str, float]] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds > 0
        self.now += seconds


class PacedServer(Aggregators):
    def __init__(self, fake: FakeTime) -> None:
        super().__init__()
        self.fake = fake

    def token(self, collection_key: str, blinded: int) -> int:
        self.fake.events.append(("token", self.fake.now))
        return super().token(collection_key, blinded)

    def upload(self, report) -> str:
        self.fake.events.append(("upload", self.fake.now))
        return super().upload(report)


def _answer(tmp_path, the_offer: Offer, fake: FakeTime, seed: int, ledger: Ledger | None = None):
    server = PacedServer(fake)
    (data,) = data_read([device_line()])
    pacing = Pacing(sleep=fake.sleep, clock=fake.clock, rng=random.Random(seed))
    outcome = task_answer(
        offer=the_offer,
        data=data,
        fleet="phones",
        ledger=ledger or Ledger(tmp_path / f"ledger-{seed}.json"),
        keys=server.keys(),
        service=server,
        rng=np.random.default_rng(1),
        pacing=pacing,
    )
    return outcome, server


def test_a_paced_device_asks_for_its_token_then_uploads_at_the_planned_random_times(tmp_path) -> None:
    fake = FakeTime()
    start = fake.now
    outcome, _ = _answer(tmp_path, replace(offer(), spread_seconds=SPREAD), fake, seed=7)
    assert (outcome.decision, outcome.upload) == ("answered", "accepted")
    plan = plan_draw(SPREAD, random.Random(7))  # the same coins: the same plan
    assert fake.events == [("token", start + plan.token_delay), ("upload", start + plan.upload_delay)]
    assert (
        0 <= plan.token_delay < TOKEN_SHARE * SPREAD < (TOKEN_SHARE + GAP_SHARE) * SPREAD <= plan.upload_delay < SPREAD
    )


def test_the_uploads_end_before_the_windows_deadline(tmp_path) -> None:
    for seed in range(20):
        fake = FakeTime()
        deadline = fake.now + 900  # sooner than the spread, later than the floor
        _answer(tmp_path, replace(offer(), spread_seconds=SPREAD, closes_at=deadline), fake, seed=seed)
        (token, token_at), (upload, upload_at) = fake.events
        assert (token, upload) == ("token", "upload")
        assert token_at <= upload_at < deadline - DEADLINE_MARGIN


def test_the_default_coins_are_the_operating_systems() -> None:
    assert isinstance(Pacing().rng, secrets.SystemRandom)


def test_token_and_upload_delays_are_uniform_and_independent() -> None:
    """20,000 seeded plans: each delay's mean within 4 standard errors of its uniform's, and the
    correlation of the two within 4 standard errors (1/sqrt(n)) of 0, whatever the token order."""
    n = 20_000
    rng = random.Random(2024)
    plans = [plan_draw(SPREAD, rng) for _ in range(n)]
    tokens = np.array([p.token_delay for p in plans])
    uploads = np.array([p.upload_delay for p in plans])
    phase, opens = TOKEN_SHARE * SPREAD, (TOKEN_SHARE + GAP_SHARE) * SPREAD
    assert tokens.min() >= 0 and tokens.max() < phase and uploads.min() >= opens and uploads.max() < SPREAD
    for values, low, high in ((tokens, 0.0, phase), (uploads, opens, SPREAD)):
        standard_error = (high - low) / np.sqrt(12) / np.sqrt(n)
        assert abs(values.mean() - (low + high) / 2) < 4 * standard_error
    assert abs(np.corrcoef(tokens, uploads)[0, 1]) < 4 / np.sqrt(n)


@pytest.mark.parametrize("spread", [0.0, -1.0])
def test_no_spread_sends_at_once(spread) -> None:
    """plan_draw alone; a Pacing never draws over less than its floor (below)."""
    plan = plan_draw(spread, random.Random(1))
    assert (plan.token_delay, plan.upload_delay) == (0.0, 0.0)


@pytest.mark.parametrize("served", [0.0, -1.0, 1.0, math.nan, math.inf])
def test_a_device_paces_over_its_own_floor_whatever_spread_it_is_served(tmp_path, served) -> None:
    for seed in range(10):
        fake = FakeTime()
        start = fake.now
        outcome, _ = _answer(tmp_path, replace(offer(), spread_seconds=served), fake, seed=seed)
        assert (outcome.decision, outcome.upload) == ("answered", "accepted")
        plan = plan_draw(MIN_SPREAD, random.Random(seed))  # the same coins over the floor
        assert fake.events == [("token", start + plan.token_delay), ("upload", start + plan.upload_delay)]
        assert plan.upload_delay - plan.token_delay > MIN_GAP and plan.upload_delay < MIN_SPREAD


def test_an_operators_spread_below_the_floor_is_raised_to_it() -> None:
    assert Pacing(spread=0.0, rng=random.Random(3)).plan(3600.0) == plan_draw(MIN_SPREAD, random.Random(3))
    assert Pacing(spread=900.0, rng=random.Random(3)).plan(0.0) == plan_draw(900.0, random.Random(3))


def test_at_the_floor_token_and_upload_are_at_least_the_gap_apart_and_still_independent() -> None:
    n = 20_000
    rng = random.Random(29)
    plans = [Pacing(rng=rng).plan(0.0) for _ in range(n)]  # a server that sends spread 0
    tokens = np.array([p.token_delay for p in plans])
    uploads = np.array([p.upload_delay for p in plans])
    assert MIN_GAP == 60.0 and (uploads - tokens).min() > MIN_GAP and uploads.max() < MIN_SPREAD
    assert abs(np.corrcoef(tokens, uploads)[0, 1]) < 4 / np.sqrt(n)


@pytest.mark.parametrize("closes_in", [-60.0, 0.0, 30.0, DEADLINE_MARGIN + MIN_SPREAD - 1])
def test_a_deadline_too_near_is_declined_before_anything_is_charged_or_sent(tmp_path, closes_in) -> None:
    fake = FakeTime()
    ledger = Ledger(tmp_path / "ledger.json")
    the_offer = replace(offer(), spread_seconds=0.0, closes_at=fake.now + closes_in)
    outcome, server = _answer(tmp_path, the_offer, fake, seed=1, ledger=ledger)
    assert outcome.decision == TOO_LITTLE_TIME and "at least 600 s" in outcome.problem
    assert fake.events == [] and server.tokens == [] and server.reports == []  # no token asked, nothing sent
    stored = Ledger(tmp_path / "ledger.json")  # what is on disk
    assert stored.columns(the_offer.task.analysis)["reports_used"].tolist() == [0]  # nothing charged
    assert stored.state["tasks"][the_offer.task.task_key]["decision"] == TOO_LITTLE_TIME
    assert "before its deadline" in stored.state["tasks"][the_offer.task.task_key]["problem"]
    again, _ = _answer(tmp_path, the_offer, fake, seed=1, ledger=stored)  # declined once, for good
    assert (again.decision, again.repeated) == (TOO_LITTLE_TIME, True) and fake.events == []


def test_a_deadline_that_leaves_the_floor_is_answered_over_the_floor(tmp_path) -> None:
    fake = FakeTime()
    start = fake.now
    the_offer = replace(offer(), spread_seconds=SPREAD, closes_at=start + DEADLINE_MARGIN + MIN_SPREAD)
    outcome, _ = _answer(tmp_path, the_offer, fake, seed=5)
    plan = plan_draw(MIN_SPREAD, random.Random(5))
    assert outcome.upload == "accepted"
    assert fake.events == [("token", start + plan.token_delay), ("upload", start + plan.upload_delay)]


def test_the_pacing_raises_when_the_deadline_leaves_less_than_its_floor() -> None:
    with pytest.raises(TooLittleTime) as raised:
        Pacing(clock=lambda: 1000.0).plan(SPREAD, closes_at=1000.0 + DEADLINE_MARGIN + 599)
    assert (raised.value.available, raised.value.needed) == (599, MIN_SPREAD)
    # A floor the device's owner lowered (for a test) is the one that counts.
    Pacing(clock=lambda: 1000.0, min_spread=10).plan(SPREAD, closes_at=1000.0 + DEADLINE_MARGIN + 10)


class FakeClient:
    """One device's client against the fake server, logging when it asks for what."""

    def __init__(
        self, device_id: str, server: Aggregators, log: list, spread: float, closes_at: str | None = None
    ) -> None:
        self.credential = SimpleNamespace(device_id=device_id)
        self.server, self.log, self.spread, self.closes_at = server, log, spread, closes_at

    def tasks(self) -> dict:
        def b64(raw: bytes) -> str:
            return base64.b64encode(raw).decode()

        issuer = {"modulus": b64(ISSUER.public.modulus.to_bytes(ISSUER.public.size, "big")), "exponent": 65537}
        task = {
            "task": TASK.audit_json(),
            "issuer": issuer,
            "policy": {"digest": snapshot_digest(POLICY), "content": POLICY},
            "report_length": 8,
            "closes_at": self.closes_at,
            "spread_seconds": self.spread,
        }
        keys = {"leader": b64(self.server.leader[1]), "helper": b64(self.server.helper[1])}
        return {"fleet": "phones", "aggregators": keys, "tasks": [task]}

    def token(self, collection_key: str, blinded: int) -> int:
        self.log.append((self.credential.device_id, "token", time.monotonic()))
        return self.server.token(collection_key, blinded)

    def upload(self, report) -> str:
        self.log.append((self.credential.device_id, "upload", time.monotonic()))
        return self.server.upload(report)


def served(server: Aggregators):
    """Each aggregator's key as it serves it itself (pfs_device.sdk.keys; fetched over HTTP in test_device_keys)."""
    return lambda: FetchedKeys(AggregatorKeys(leader=server.leader[1], helper=server.helper[1]))


def test_the_cli_paces_every_device_over_the_spread_its_task_is_served_with(tmp_path) -> None:
    server, log, spread = Aggregators(), [], 0.5
    devices = data_read([device_line(device_id=f"d{i}") for i in range(6)])
    clients = [FakeClient(f"d{i}", server, log, spread) for i in range(6)]
    started = time.monotonic()
    summary = sdk_main._pass(
        clients, devices, "phones", tmp_path, verbose=False, min_spread=spread, aggregator_keys=served(server)
    )
    assert summary["uploads"] == {"accepted": 6}
    for device in (f"d{i}" for i in range(6)):
        [(_, _, token_at)] = [entry for entry in log if entry[:2] == (device, "token")]
        [(_, _, upload_at)] = [entry for entry in log if entry[:2] == (device, "upload")]
        # Its token within the first 5 % of the spread, its upload after that: never both at once.
        assert started <= token_at <= upload_at and upload_at - started >= TOKEN_SHARE * spread


def test_the_cli_sends_at_once_only_when_told_to(tmp_path, monkeypatch) -> None:
    server, log, sleeps = Aggregators(), [], []
    original = sdk_main.Pacing

    def recording(**kw):
        pacing = original(**kw)
        pacing.sleep = sleeps.append
        return pacing

    monkeypatch.setattr(sdk_main, "Pacing", recording)
    devices = data_read([device_line(device_id="d0")])
    sdk_main._pass(
        [FakeClient("d0", server, log, 3600.0)],
        devices,
        "phones",
        tmp_path,
        verbose=False,
        spread=0,
        min_spread=0,  # the device's own floor, lowered by its owner: for tests only
        aggregator_keys=served(server),
    )
    assert sleeps == [] and [what for _, what, _ in log] == ["token", "upload"]


def test_the_cli_declines_a_task_whose_deadline_is_30_seconds_away_and_says_so(tmp_path, capsys) -> None:
    server, log = Aggregators(), []
    closes_at = datetime.fromtimestamp(time.time() + 30, tz=UTC).isoformat()
    devices = data_read([device_line(device_id=f"d{i}") for i in range(3)])
    clients = [FakeClient(f"d{i}", server, log, 0.0, closes_at) for i in range(3)]
    summary = sdk_main._pass(clients, devices, "phones", tmp_path, verbose=False, aggregator_keys=served(server))
    assert summary["decisions"] == {TOO_LITTLE_TIME: 3} and summary["uploads"] == {}
    assert log == [] and server.tokens == []
    said = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert sorted(entry["device"] for entry in said) == ["d0", "d1", "d2"]
    assert {entry["refused"] for entry in said} == {TOO_LITTLE_TIME}


def _cli(tmp_path, *extra: str) -> int:
    creds = tmp_path / "creds.json"
    creds.write_text(
        json.dumps(
            {"server": "http://127.0.0.1:9", "helper": "http://127.0.0.1:9", "devices": [{"id": "d0", "secret": "s"}]}
        )
    )
    data = tmp_path / "data.jsonl"
    data.write_bytes(device_line(device_id="d0") + b"\n")
    return sdk_main.main(["--credential", str(creds), "--data", str(data), "--state", str(tmp_path / "s"), *extra])


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (["--spread", "0"], "--spread: 0 s is below this device's floor (--min-spread 600 s)"),
        (["--spread", "599"], "--spread: 599 s is below this device's floor (--min-spread 600 s)"),
        (["--min-spread", "30", "--spread", "10"], "--spread: 10 s is below this device's floor (--min-spread 30 s)"),
        (["--min-spread", "-1"], "--min-spread: must be a number of seconds, 0 or more"),
        (["--min-spread", "inf"], "--min-spread: must be a number of seconds, 0 or more"),
    ],
)
def test_the_cli_refuses_a_spread_below_the_devices_floor(tmp_path, capsys, extra, said) -> None:
    assert _cli(tmp_path, "--once", *extra) == 2
    err = capsys.readouterr().err
    assert f"invalid input: {said}" in err
    assert not (tmp_path / "s").exists()  # nothing was done


def test_the_cli_warns_when_its_owner_lowers_the_floor(tmp_path, capsys) -> None:
    assert _cli(tmp_path, "--once", "--min-spread", "0", "--spread", "0") == 1  # no server at 127.0.0.1:9
    said = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    warnings = [event["warning"] for event in said if "warning" in event]
    assert "--min-spread 0 s is below the safe floor of 600 s: for tests only" in warnings
