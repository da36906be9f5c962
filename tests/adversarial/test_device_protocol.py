"""Issue: reports could be multiplied and spliced on the real-device protocol.

The attacks, performed through the endpoints a device uses (its credentials, the SDK's functions):
- one device, many tokens: with three open windows a device asked in collection X for signatures
  over messages naming Y, and uploaded three reports into one collection; a device of another fleet
  minted a token through its own window and uploaded into this fleet's round. Now each collection
  has its own RFC 9474 key, so a signature made in X verifies nowhere else;
- one key for every device: a server could hand each device its own key and link tokens to devices.
  Now the task commits to the collection's key and the SDK refuses another;
- shares not bound to their report: a victim's sealed shares were accepted under other tokens and
  moved into a batch of the attacker's choosing. Now each share's AEAD associated data is its
  report's collection, batch, token and public share (and its HPKE info its aggregator's role)."""

from __future__ import annotations

import base64
import copy
from dataclasses import replace

import numpy as np
import pytest

from aggregation.aggregators import HELPER, LEADER
from aggregation.issuer import issuer_public_key
from aggregation.models import LeaderShare
from aggregation.reports import rejections
from analyses.models import Round
from analyses.services.policy import analysis_approve, analysis_create
from pfs_device import wire
from pfs_device.report_client import AggregatorKeys, report_seal, report_token_obtain
from pfs_device.sdk.device import TASK_INVALID, Offer, ServerKeys, task_answer
from pfs_device.sdk.ledger import Ledger
from pfs_device.tokens import Token, issuer_key_generate, nonce_generate
from tests.attest import devices_enrol
from tests.unit.test_device_http import (
    BUCKETS,
    CENTRAL,
    PHONES_SPEC,
    Device,
    shape_of,
    start,
    upload,
    verify,
)

pytestmark = pytest.mark.django_db


def _keys() -> AggregatorKeys:
    return AggregatorKeys(leader=LEADER.public_key(), helper=HELPER.public_key())


def _signed_through(device: Device, window: str, sealed: wire.Report) -> wire.Report:
    """``sealed`` (a report of another collection) with a token over its message, which names that
    collection, signed through ``window``'s token endpoint."""

    def issue(blinded: int) -> int:
        response = device.token_request(window, blinded)
        assert response.status_code == 201, response.content
        return int.from_bytes(base64.b64decode(response.json()["blind_signature"]), "big")

    return report_token_obtain(report=sealed, issuer=issuer_public_key(window), issue=issue)


def _sealed(key: str, bucket: int) -> wire.Report:
    vector = np.eye(BUCKETS, dtype=np.int64)[bucket]
    return report_seal(collection_key=key, batch_key="", vector=vector, keys=_keys(), shape=shape_of(key))


def test_a_token_minted_in_one_collection_is_refused_in_another(api, phones, phones_analysis) -> None:
    _, (device, *_) = phones
    x, y, z = (start(api, {**CENTRAL, "recipeIdentifier": name}) for name in ("x", "y", "z"))
    for window in (x, z):  # signatures asked in X and in Z, over messages naming Y (and its report)
        assert upload(_signed_through(device, window.task_key, _sealed(y.task_key, 1))).status_code == 202
    assert upload(device.report(y.task_key, 1)).status_code == 202  # its one honest token for Y
    verify(y.task_key)
    assert rejections(y.task_key) == {"leader": {"token_invalid": 2}}  # refused before any job reaches the helper
    assert sum(s.reports for s in LeaderShare.objects.filter(collection__key=y.task_key)) == 1


def test_a_device_of_another_fleet_cannot_upload_into_this_fleets_round(api, phones, central_round, analyst, officer):
    others, issued = devices_enrol(fleet_name="tablets", count=5)
    outsider = Device.of(issued[0])
    spec = {**copy.deepcopy(PHONES_SPEC), "identifier": "t.tablets", "fleet": "tablets"}
    analysis_approve(analysis=analysis_create(spec=spec, owner=analyst), officer=officer)
    created = api.post(
        "/api/analyses/t.tablets/recipes/", {**CENTRAL, "AnalysisIdentifier": "t.tablets"}, format="json"
    )
    # Five tablets are too noisy for eight buckets (docs/accuracy.md): the round is started with the go-ahead.
    started = api.post(f"/api/recipes/{created.json()['id']}/rounds/", {"confirmSmallCohorts": True}, format="json")
    own = Round.objects.get(pk=started.json()["id"])
    # Through its own window, a token naming the phones' round; then an upload into it.
    forged = _signed_through(outsider, own.task_key, _sealed(central_round.task_key, 1))
    assert upload(forged).status_code == 202
    verify(central_round.task_key)
    assert rejections(central_round.task_key) == {"leader": {"token_invalid": 1}}
    # And its own fleet's endpoint will not sign in the phones' collection at all.
    assert outsider.token_request(central_round.task_key, 12345).status_code == 404


def test_a_device_refuses_a_token_key_other_than_the_one_its_task_commits_to(phones, central_round, tmp_path) -> None:
    _, (device, *_) = phones
    offered = device.tasks()["tasks"][0]
    honest = Offer.from_json(offered)
    tailored = replace(honest, issuer=issuer_key_generate(bits=1024).public)  # this device's own key

    class NoService:
        def token(self, collection_key: str, blinded: int) -> int:
            raise AssertionError("no token is asked for under a key the task does not commit to")

        def upload(self, report) -> str:
            raise AssertionError("nothing is uploaded")

    ledger = Ledger(tmp_path / "device.json")
    outcome = task_answer(
        offer=tailored, data=None, fleet="phones", ledger=ledger, keys=ServerKeys(aggregators=None), service=NoService()
    )
    assert outcome.decision == TASK_INVALID
    assert "not the one the task commits to" in ledger.state["tasks"][central_round.task_key]["problem"]
    assert ledger.columns(honest.task.analysis)["reports_used"].tolist() == [0]  # nothing spent


def test_sealed_shares_replayed_under_another_token_or_batch_do_not_open(phones, central_round) -> None:
    _, devices = phones
    key = central_round.task_key
    victim = devices[0].report(key, 3, batch="locale=en_US")
    # The attacker's own tokens, each signed over the victim's shares and public share under a nonce
    # of its own: three copies. And one moved to another batch, with the victim's token.
    for attacker in devices[1:4]:
        unsigned = Token(nonce=nonce_generate(), signature=b"")
        spliced = wire.Report(key, victim.batch_key, unsigned, victim.leader, victim.helper, victim.public)
        assert upload(attacker.sign(spliced)).status_code == 202
    moved = replace(victim, batch_key="locale=fr_FR")
    assert upload(moved).status_code == 202
    verify(key)
    # The shares' associated data names the victim's token; the victim's token names its batch.
    # The leader refuses both first (DAP).
    assert rejections(key) == {"leader": {"share_unopened": 3, "token_invalid": 1}}
    assert upload(victim).status_code == 202  # the victim's own report still counts, once
    verify(key)
    assert sum(s.reports for s in LeaderShare.objects.filter(collection__key=key)) == 1


def test_a_sybil_flood_is_refused_whole_by_rate_validation(api, analyst, officer, django_capture_on_commit_callbacks):
    """980 all-zero reports from registered sybils plus 3 real devices made a batch the release
    subtracted the 3 real devices from. Rate validation is now on by default: the collection
    expects the fleet's devices over PFS_REPORT_SPREAD_SECONDS, and a burst is refused whole."""
    _, issued = devices_enrol(fleet_name="crowd", count=303)
    devices = [Device.of(c) for c in issued]
    spec = {**copy.deepcopy(PHONES_SPEC), "identifier": "t.crowd", "fleet": "crowd"}
    analysis_approve(analysis=analysis_create(spec=spec, owner=analyst), officer=officer)
    created = api.post("/api/analyses/t.crowd/recipes/", {**CENTRAL, "AnalysisIdentifier": "t.crowd"}, format="json")
    round_ = Round.objects.get(pk=api.post(f"/api/recipes/{created.json()['id']}/rounds/").json()["id"])
    key = round_.task_key
    for real, bucket in zip(devices[:3], (2, 5, 6), strict=True):
        assert upload(real.report(key, bucket)).status_code == 202
    for sybil in devices[3:]:  # all at once, all the same bucket
        assert upload(sybil.sign(_sealed(key, 0))).status_code == 202
    with django_capture_on_commit_callbacks(execute=True):
        assert api.post(f"/api/rounds/{round_.pk}/close/", {}, format="json").status_code == 202
    round_.refresh_from_db()
    assert round_.status == Round.Status.WITHHELD
    [batch] = round_.release.content["batches"]
    assert batch["suppressed"] and "rate validation" in batch["reason"] and "estimates" not in batch


def test_registering_devices_is_logged_so_a_burst_before_a_collection_shows(caplog) -> None:
    caplog.set_level("WARNING", logger="pfs.audit")
    devices_enrol(fleet_name="burst", count=25, registered_by="cli:operator")
    [record] = [r for r in caplog.records if getattr(r, "event", None) == "devices.registered"]
    assert (record.fleet, record.count, record.by) == ("burst", 25, "cli:operator")
