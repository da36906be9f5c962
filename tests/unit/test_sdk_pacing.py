"""The device SDK asks for its token and uploads at independent random times (pfs_device.sdk.pacing):
a fake clock and sleep record what the device waits, and seeded draws check the distribution."""

from __future__ import annotations

import base64
import random
import secrets
import time
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest

from pfs_device.decision import snapshot_digest
from pfs_device.report_client import AggregatorKeys
from pfs_device.sdk import __main__ as sdk_main
from pfs_device.sdk.device import Offer, data_read, task_answer
from pfs_device.sdk.keys import FetchedKeys
from pfs_device.sdk.ledger import Ledger
from pfs_device.sdk.pacing import DEADLINE_MARGIN, TOKEN_SHARE, Pacing, plan_draw
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


def _answer(tmp_path, the_offer: Offer, fake: FakeTime, seed: int):
    server = PacedServer(fake)
    (data,) = data_read([device_line()])
    pacing = Pacing(sleep=fake.sleep, clock=fake.clock, rng=random.Random(seed))
    outcome = task_answer(
        offer=the_offer,
        data=data,
        fleet="phones",
        ledger=Ledger(tmp_path / f"ledger-{seed}.json"),
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
    assert 0 <= plan.token_delay < TOKEN_SHARE * SPREAD <= plan.upload_delay < SPREAD


def test_the_uploads_end_before_the_windows_deadline(tmp_path) -> None:
    for seed in range(20):
        fake = FakeTime()
        deadline = fake.now + 600  # sooner than the spread
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
    phase = TOKEN_SHARE * SPREAD
    assert tokens.min() >= 0 and tokens.max() < phase and uploads.min() >= phase and uploads.max() < SPREAD
    for values, low, high in ((tokens, 0.0, phase), (uploads, phase, SPREAD)):
        standard_error = (high - low) / np.sqrt(12) / np.sqrt(n)
        assert abs(values.mean() - (low + high) / 2) < 4 * standard_error
    assert abs(np.corrcoef(tokens, uploads)[0, 1]) < 4 / np.sqrt(n)


@pytest.mark.parametrize("spread", [0.0, -1.0])
def test_no_spread_sends_at_once(spread) -> None:
    plan = plan_draw(spread, random.Random(1))
    assert (plan.token_delay, plan.upload_delay) == (0.0, 0.0)


class FakeClient:
    """One device's client against the fake server, logging when it asks for what."""

    def __init__(self, device_id: str, server: Aggregators, log: list, spread: float) -> None:
        self.credential = SimpleNamespace(device_id=device_id)
        self.server, self.log, self.spread = server, log, spread

    def tasks(self) -> dict:
        def b64(raw: bytes) -> str:
            return base64.b64encode(raw).decode()

        issuer = {"modulus": b64(ISSUER.public.modulus.to_bytes(ISSUER.public.size, "big")), "exponent": 65537}
        task = {
            "task": TASK.audit_json(),
            "issuer": issuer,
            "policy": {"digest": snapshot_digest(POLICY), "content": POLICY},
            "report_length": 8,
            "closes_at": None,
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
    summary = sdk_main._pass(clients, devices, "phones", tmp_path, verbose=False, aggregator_keys=served(server))
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
        aggregator_keys=served(server),
    )
    assert sleeps == [] and [what for _, what, _ in log] == ["token", "upload"]
