"""The device SDK asks for its token and uploads at independent random times (devices.sdk.pacing):
a fake clock and sleep record what the device waits, and seeded draws check the distribution."""

from __future__ import annotations

import random
import secrets
from dataclasses import replace

import numpy as np
import pytest

from devices.sdk.device import Offer, data_read, task_answer
from devices.sdk.ledger import Ledger
from devices.sdk.pacing import DEADLINE_MARGIN, TOKEN_SHARE, Pacing, plan_draw
from tests.unit.test_device_sdk import Aggregators, device_line, offer

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
