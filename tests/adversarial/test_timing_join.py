"""Issue 17, item 4: reports were linkable by time. The issuer's issue times and the aggregators'
receive times sat in one database, 10-16 ms apart and interleaved, and joining them attributed
every report of a test to its device.

Replayed here against what is stored now. Devices ask for their tokens and upload through the
HTTP endpoints, in the order the device SDK's own pacing (pfs_device.sdk.pacing.plan_draw, seeded)
schedules them; the attacker then reads both stores — the issuer's (``IssuedToken``: a device
and a day, in insertion order) and the leader's (``PendingReport``: a report and a 10-second
arrival, in insertion order) — and pairs the k-th token issued with the k-th report received,
the join of the issue. Order is all that remains to join on (the issuer keeps the day, the
aggregators 10-second buckets), and the attack uses it in full.

Under the SDK's pacing the join finds no more devices than chance: for a random pairing of n
devices the number paired right is the number of fixed points of a random permutation (mean 1,
variance 1 per collection), and the rank correlation of issue and arrival orders has mean 0 and
variance 1/(n-1). Both are checked within 4 standard errors over every collection. The same
attack on devices that upload as soon as they have their token (the SDK before pacing) pairs
every device: the test can tell.

Issue 29, requirement 3: the spread and the deadline are the server's to send, so a server could
send spread 0, or a deadline 30 s away, to force token and upload back to back. The SDK keeps its
own floors (pfs_device.sdk.pacing.MIN_SPREAD, MIN_GAP): served spread 0, the devices still pace over
MIN_SPREAD and the same join finds no more than chance; served a deadline 30 s away, they decline
(too_little_time), and the issuer and the leader record nothing.
"""

from __future__ import annotations

import copy
import hashlib
import json
import random
from datetime import timedelta

import numpy as np
import pytest
from django.utils import timezone

from aggregation.aggregators import HELPER, LEADER
from aggregation.batch_rules import ARRIVAL_GRAIN
from aggregation.models import Collection, HelperShare, IssuedToken, LeaderShare, PendingReport
from analyses.models import Round
from analyses.services.policy import analysis_approve, analysis_create
from devices.models import CollectionWindow
from pfs_device import wire
from pfs_device.attestation import key_digest
from pfs_device.report_client import AggregatorKeys
from pfs_device.sdk.device import Offer, ServerKeys, task_answer
from pfs_device.sdk.keys import announced_keys
from pfs_device.sdk.ledger import Ledger
from pfs_device.sdk.pacing import MIN_GAP, MIN_SPREAD, TOO_LITTLE_TIME, Pacing, plan_draw
from tests.attest import devices_enrol
from tests.unit.test_device_http import CENTRAL, PHONES_SPEC, Device, upload, verify

DEVICES = 60
COLLECTIONS = 4  # the policy's budget: 4 reports per device
SPREAD = 3600.0  # PFS_REPORT_SPREAD_SECONDS' default
POLL = 60.0  # devices decide when they poll: within a minute of each other


@pytest.fixture
def crowd(api, analyst, officer) -> tuple[list[Device], list[str]]:
    _, issued = devices_enrol(fleet_name="crowd", count=DEVICES)
    spec = {**copy.deepcopy(PHONES_SPEC), "identifier": "t.crowd", "fleet": "crowd"}
    analysis_approve(analysis=analysis_create(spec=spec, owner=analyst), officer=officer)
    keys = []
    for index in range(COLLECTIONS):
        recipe = {**CENTRAL, "AnalysisIdentifier": "t.crowd", "recipeIdentifier": f"join-{index}"}
        created = api.post("/api/analyses/t.crowd/recipes/", recipe, format="json")
        # A crowd this small is too noisy for its buckets (docs/accuracy.md): the timing is the point here.
        go_ahead = {"confirmSmallCohorts": True}
        round_id = api.post(f"/api/recipes/{created.json()['id']}/rounds/", go_ahead, format="json").json()["id"]
        keys.append(Round.objects.get(pk=round_id).task_key)
    return [Device.of(c) for c in issued], keys


def _collect(devices: list[Device], key: str, events: list[tuple[float, int, str]]) -> dict[str, int]:
    """Every device's token and upload through the endpoints, in the order of ``events`` (time,
    device, what); returns the ground truth the attacker does not have: token digest -> device."""
    sealed, truth = {}, {}
    for _, device, what in sorted(events):
        if what == "token":  # the device seals its report, then asks for its token, which names it
            sealed[device] = devices[device].report(key, device % 8)
            truth[sealed[device].token.digest] = device
        else:
            assert upload(sealed[device]).status_code == 202
    return truth


def _join(devices: list[Device], key: str, truth: dict[str, int]) -> tuple[int, float]:
    """The attack: the k-th issue paired with the k-th arrival. (devices paired right, rank correlation)"""
    # The issuer's rows name the attested device key (aggregation.issuer), which the leader saw at enrolment.
    by_digest = {
        hashlib.sha256(f"attested:{key_digest(d.key.public)}".encode()).hexdigest(): i for i, d in enumerate(devices)
    }
    issued = IssuedToken.objects.using("issuer").filter(collection_key=key).order_by("issued_on", "pk")
    issue_order = [by_digest[digest] for digest in issued.values_list("device_digest", flat=True)]
    received = PendingReport.objects.filter(collection_key=key).order_by("received_at", "pk")
    arrival_order = [truth[wire.report_parse(json.loads(bytes(row.body))).token.digest] for row in received]
    assert len(issue_order) == len(arrival_order) == len(devices)
    # What is stored is as coarse as promised: a day at the issuer, 10-second buckets at the leader.
    assert {type(day).__name__ for day in issued.values_list("issued_on", flat=True)} == {"date"}
    assert all(row.received_at.timestamp() % ARRIVAL_GRAIN == 0 for row in received)
    right = sum(i == a for i, a in zip(issue_order, arrival_order, strict=True))
    issue_rank = np.argsort(issue_order)  # device -> its place in each order
    arrival_rank = np.argsort(arrival_order)
    return right, float(np.corrcoef(issue_rank, arrival_rank)[0, 1])


def test_joining_issue_and_arrival_orders_finds_devices_no_better_than_chance(crowd) -> None:
    devices, keys = crowd
    rng = random.Random(17)  # the SDK's pacing with fixed coins
    _join_no_better_than_chance(devices, keys, rng, lambda device, key: plan_draw(SPREAD, rng))


def _join_no_better_than_chance(devices, keys, rng: random.Random, plan_of) -> None:
    """Each device decides within POLL of the others, then gets its token and uploads as
    ``plan_of(device, key)`` says; joining the orders in every collection finds what chance finds."""
    right, correlations = 0, []
    for key in keys:
        events = []
        for device in range(DEVICES):
            decided = rng.uniform(0, POLL)
            plan = plan_of(device, key)
            events += [(decided + plan.token_delay, device, "token"), (decided + plan.upload_delay, device, "upload")]
        found, correlation = _join(devices, key, _collect(devices, key, events))
        right += found
        correlations.append(correlation)
    # Chance: 1 device per collection (variance 1); rank correlation 0 (variance 1/(n-1)).
    assert right <= COLLECTIONS + 4 * np.sqrt(COLLECTIONS), right
    assert abs(np.mean(correlations)) < 4 / np.sqrt(COLLECTIONS * (DEVICES - 1)), correlations


def test_the_same_join_pairs_every_device_that_uploads_as_soon_as_it_has_its_token(crowd) -> None:
    devices, keys = crowd
    rng = random.Random(17)
    decided = [rng.uniform(0, POLL) for _ in range(DEVICES)]
    events = [
        (at + delay, device, what)
        for device, at in enumerate(decided)
        for delay, what in ((0, "token"), (0.01, "upload"))
    ]
    found, correlation = _join(devices, keys[0], _collect(devices, keys[0], events))
    assert (found, round(correlation, 6)) == (DEVICES, 1.0)


def test_a_server_that_sends_spread_0_still_finds_devices_no_better_than_chance(crowd, settings) -> None:
    """The devices read spread 0 from the tasks they are served, plan with the SDK's Pacing (fixed
    coins) and still pace over MIN_SPREAD, each upload more than MIN_GAP after its token. Deciding
    within POLL of each other is common to a device's two times: at the floor that alone gives the
    two orders an expected rank correlation of about 0.1 (0.01 at the default hour), within the
    tolerance of 4 standard errors (0.26); the pairs found stay those of chance."""
    devices, keys = crowd
    settings.PFS_REPORT_SPREAD_SECONDS = 0
    served = [{t["task"]["task_key"]: Offer.from_json(t) for t in device.tasks()["tasks"]} for device in devices]
    assert {offer.spread_seconds for offers in served for offer in offers.values()} == {0.0}
    rng = random.Random(17)
    pacing = Pacing(rng=rng)  # the device's own floor: MIN_SPREAD

    def plan_of(device: int, key: str):
        offer = served[device][key]
        plan = pacing.plan(offer.spread_seconds, closes_at=offer.closes_at)
        assert plan.upload_delay - plan.token_delay > MIN_GAP and plan.upload_delay < MIN_SPREAD
        return plan

    _join_no_better_than_chance(devices, keys, rng, plan_of)


class _NothingSent:
    """The device's service: a declining device calls neither the issuer nor the leader."""

    def token(self, collection_key: str, blinded: int) -> int:
        raise AssertionError("no token is asked for when the deadline leaves too little time")

    def upload(self, report) -> str:
        raise AssertionError("nothing is uploaded when the deadline leaves too little time")


def test_a_server_that_sets_a_deadline_30_seconds_away_gets_devices_to_decline_and_nothing_spent(
    crowd, tmp_path
) -> None:
    devices, keys = crowd
    CollectionWindow.objects.filter(task_key__in=keys).update(closes_at=timezone.now() + timedelta(seconds=30))
    aggregators = AggregatorKeys(leader=LEADER.public_key(), helper=HELPER.public_key())  # as each serves it

    def sleep(seconds: float) -> None:
        raise AssertionError("a device that declines does not wait")

    for device in devices:
        tasks = device.tasks()
        ledger = Ledger(tmp_path / f"{device.device_id}.json")
        for offered in tasks["tasks"]:
            offer = Offer.from_json(offered)
            assert offer.closes_at is not None and offer.closes_at - timezone.now().timestamp() <= 30
            outcome = task_answer(
                offer=offer,
                data=None,  # never read: declined before anything is computed
                fleet="crowd",
                ledger=ledger,
                keys=ServerKeys(aggregators, announced=announced_keys(tasks)),
                service=_NothingSent(),
                pacing=Pacing(sleep=sleep),
            )
            assert outcome.decision == TOO_LITTLE_TIME, outcome
            assert ledger.state["tasks"][offer.task.task_key]["decision"] == TOO_LITTLE_TIME
        assert ledger.columns(offer.task.analysis)["reports_used"].tolist() == [0]  # nothing charged
    # Nothing for the issuer or the leader to record, let alone join.
    assert not IssuedToken.objects.using("issuer").filter(collection_key__in=keys).exists()
    assert not PendingReport.objects.filter(collection_key__in=keys).exists()


def test_each_task_serves_the_spread_the_sdk_paces_over(crowd, settings) -> None:
    devices, _ = crowd
    settings.PFS_REPORT_SPREAD_SECONDS = 900
    assert {task["spread_seconds"] for task in devices[0].tasks()["tasks"]} == {900}


def test_what_the_aggregators_store_after_verification_is_as_coarse(crowd) -> None:
    devices, keys = crowd
    for device in devices[:5]:
        assert upload(device.report(keys[0], 1)).status_code == 202
    verify(keys[0])
    shares = list(LeaderShare.objects.filter(collection__key=keys[0])) + list(
        HelperShare.objects.filter(collection__key=keys[0])
    )
    assert sum(share.reports for share in shares) == 10  # five reports, each stored by both aggregators
    times = [at for share in shares for at in share.load_arrivals()]
    times += [share.created_at.timestamp() for share in shares]
    times += [c.created_at.timestamp() for c in Collection.objects.filter(key=keys[0])]
    assert times and all(at % ARRIVAL_GRAIN == 0 for at in times)
