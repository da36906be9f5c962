"""Issue 29, requirement 1: sybil resistance that does not rest on the leader.

Found last time: the leader's operator registered 113 devices of its own, which uploaded zero
vectors in one 3-second burst with 3 real devices; the batch was released with m = 116, exactly the
3 victims' sum. Registering devices is the leader's act alone, and the issuer signed a token for
every device the leader had registered. Now the issuer signs only for devices the attestation
authority attested (pfs_device.attestation), keyed on the attested device key, each request signed
by the device's own private key; every attack here goes through the public endpoints.
"""

from __future__ import annotations

import base64
import copy
import os
import secrets
from datetime import timedelta

import numpy as np
import pytest
from django.conf import settings
from django.db.models import F
from django.utils import timezone

from aggregation import dap, helper_client
from aggregation.aggregators import HELPER, LEADER
from aggregation.issuer import issued_statement, issuer_public_key
from aggregation.models import HelperShare, IssuedToken
from aggregation.reports import rejections
from aggregation.statements import statement_sign
from analyses.models import Round
from analyses.services.policy import analysis_approve, analysis_create
from devices.credentials import RegistrationInvalid, devices_register, secret_hash
from devices.models import DeviceCredential, Fleet
from pfs_device.attestation import DeviceKey, attestation_sign, token_request_sign
from pfs_device.report_client import AggregatorKeys, report_seal, report_token_obtain
from pfs_device.tokens import issuer_key_generate, nonce_generate, sign_blinded, token_blind
from tests.adversarial import test_helper_protocol
from tests.adversarial.test_helper_protocol import HELPER_STORE, helper_state, honest_job, send
from tests.attest import attested, devices_enrol
from tests.unit.test_device_http import BUCKETS, CENTRAL, PHONES_SPEC, Device, shape_of, upload, verify
from tests.unit.test_report_protocol import KEY, rules_open

pytestmark = pytest.mark.django_db

helper = test_helper_protocol.helper  # the helper's own service, over its URLs (a fixture)


def _refused(response, code: str) -> None:
    assert response.status_code == 403, response.content
    assert response.json()["code"] == code, response.json()


def _no_token_written(key: str) -> None:
    assert not IssuedToken.objects.filter(collection_key=key).exists()


def test_a_token_request_without_an_attestation_is_refused_and_nothing_is_written(phones, central_round) -> None:
    _, (device, *_) = phones
    unattested = Device(device.device_id, device.secret)  # the same credential, no key, no attestation
    _refused(unattested.token_request(central_round.task_key, 12345), "attestation_missing")
    _no_token_written(central_round.task_key)


def test_a_token_request_with_an_attestation_the_leader_forged_is_refused(phones, central_round) -> None:
    _, (device, *_) = phones
    leaders_own = DeviceKey.generate()  # the leader's operator playing authority for its sybils
    sybil_key = DeviceKey.generate()
    forged = attestation_sign(leaders_own.private, sybil_key.public).as_json()
    sybil = Device(device.device_id, device.secret, key=sybil_key, attestation=forged)
    response = sybil.token_request(central_round.task_key, 12345)
    _refused(response, "attestation_invalid")
    assert "not signed by the attestation authority" in response.json()["detail"]
    _no_token_written(central_round.task_key)


def test_a_stolen_attestation_without_the_devices_private_key_gets_no_token(phones, central_round) -> None:
    """The leader sees every device's attestation at enrolment: with it, and a key of its own, it
    asks for the device's token before the device does."""
    _, (victim, *_) = phones
    key = central_round.task_key
    thief = Device(victim.device_id, victim.secret, key=DeviceKey.generate(), attestation=victim.attestation)
    _refused(thief.token_request(key, 12345), "device_signature_invalid")
    # The device's real signature, replayed from another collection's request, is no better.
    blinded = 12345
    replayed = token_request_sign(victim.key, "t.phones/other/round-1", blinded.to_bytes(2, "big"))
    _refused(
        thief.token_request(key, blinded, device_signature=base64.b64encode(replayed).decode()),
        "device_signature_invalid",
    )
    _no_token_written(key)
    victim.token(key)  # the device's own request still gets its one token
    assert IssuedToken.objects.filter(collection_key=key).count() == 1


def test_one_attested_device_registered_twice_by_the_leader_gets_one_token(phones, central_round) -> None:
    """The one-token rule keys on the attested device key, not the leader's credential."""
    fleet, (device, *_) = phones
    _, (again,) = devices_register(fleet_name=fleet.name, attestations=[device.attestation])
    twin = Device(again.device_id, again.secret, key=device.key, attestation=device.attestation)
    key = central_round.task_key
    device.token(key)
    blinding = token_blind(
        collection_key=key, nonce=nonce_generate(), report_digest=os.urandom(32), issuer=issuer_public_key(key)
    )
    response = twin.token_request(key, blinding.blinded)
    assert response.status_code == 409 and response.json()["code"] == "token_already_issued"
    assert IssuedToken.objects.filter(collection_key=key).count() == 1


def test_registering_an_unattested_device_is_refused_and_registers_nothing(db) -> None:
    (_, good), forged = attested(1)[0], attestation_sign(DeviceKey.generate().private, DeviceKey.generate().public)
    with pytest.raises(RegistrationInvalid, match=r"attestations\[1\]: the attestation is not signed"):
        devices_register(fleet_name="phones", attestations=[good, forged.as_json()])
    with pytest.raises(RegistrationInvalid, match=r"attestations\[0\]"):
        devices_register(fleet_name="phones", attestations=[{"device_key": "x"}])
    assert not DeviceCredential.objects.exists()


# ---------------------------------------------------------------- the attack found last time, replayed

MIN_COHORT = 100  # the recipe's: 116 reports pass it, 3 do not


def _crowd_round(api, analyst, officer, fleet: str) -> Round:
    """An approved analysis of ``fleet`` and a started round releasing batches of MIN_COHORT or more."""
    spec = {**copy.deepcopy(PHONES_SPEC), "identifier": f"t.{fleet}", "fleet": fleet}
    analysis_approve(analysis=analysis_create(spec=spec, owner=analyst), officer=officer)
    recipe = {
        **CENTRAL,
        "AnalysisIdentifier": f"t.{fleet}",
        "privacy": {**CENTRAL["privacy"], "minCohort": MIN_COHORT},
    }
    created = api.post(f"/api/analyses/t.{fleet}/recipes/", recipe, format="json")
    assert created.status_code == 201, created.json()
    # A fleet this small is too noisy for its buckets (docs/accuracy.md): the sybils are the point here.
    started = api.post(f"/api/recipes/{created.json()['id']}/rounds/", {"confirmSmallCohorts": True}, format="json")
    return Round.objects.get(pk=started.json()["id"])


def _close(api, round_: Round, django_capture_on_commit_callbacks) -> dict:
    with django_capture_on_commit_callbacks(execute=True):
        assert api.post(f"/api/rounds/{round_.pk}/close/", {}, format="json").status_code == 202
    round_.refresh_from_db()
    [batch] = round_.release.content["batches"]
    return batch


def _sybils(fleet_name: str, count: int) -> list[Device]:
    """Devices the leader's operator writes into its own credential table, bypassing enrolment (it
    controls its own database), with attestations it signs itself."""
    fleet = Fleet.objects.get(name=fleet_name)
    forger = DeviceKey.generate()
    sybils = []
    for index in range(count):
        secret, key = secrets.token_urlsafe(16), DeviceKey.generate()
        credential = DeviceCredential.objects.create(
            fleet=fleet, device_id=f"sybil-{index}", secret_hash=secret_hash(secret)
        )
        forged = attestation_sign(forger.private, key.public).as_json()
        sybils.append(Device(credential.device_id, secret, key=key, attestation=forged))
    Fleet.objects.filter(pk=fleet.pk).update(size=F("size") + count)  # its fleet table says 116
    return sybils


def test_113_sybils_and_3_real_devices_in_one_burst_reveal_nothing(
    api, analyst, officer, django_capture_on_commit_callbacks
) -> None:
    """Last time: released with m = 116, exactly the 3 victims' sum. Now the sybils get no token, their
    uploads with tokens the leader signed itself are rejected, and 3 reports are below the cohort."""
    _, victims = devices_enrol(fleet_name="crowd", count=3)
    victims = [Device.of(v) for v in victims]
    sybils = _sybils("crowd", 113)
    assert Fleet.objects.get(name="crowd").size == 116
    round_ = _crowd_round(api, analyst, officer, "crowd")
    key = round_.task_key
    for sybil in sybils:  # through the token endpoint: forged attestations
        response = sybil.token_request(key, 12345)
        assert response.status_code == 403 and response.json()["code"] == "attestation_invalid"
    assert not IssuedToken.objects.filter(collection_key=key).exists()
    leaders_key = issuer_key_generate()  # so the leader signs the sybils' tokens itself
    for sybil in sybils:
        sealed = report_seal(
            collection_key=key,
            batch_key="",
            vector=np.eye(BUCKETS, dtype=np.int64)[0],
            keys=_keys(),
            shape=shape_of(key),
        )
        zero = report_token_obtain(
            report=sealed, issuer=leaders_key.public, issue=lambda blinded: sign_blinded(leaders_key, blinded)
        )
        assert upload(zero).status_code == 202  # received: verified in bulk, as every upload
    for victim, bucket in zip(victims, (2, 5, 6), strict=True):
        assert upload(victim.report(key, bucket)).status_code == 202
    verify(key)
    assert rejections(key) == {"leader": {"token_invalid": 113}}
    assert IssuedToken.objects.filter(collection_key=key).count() == 3

    batch = _close(api, round_, django_capture_on_commit_callbacks)
    assert batch["suppressed"] and f"fewer than {MIN_COHORT}" in batch["reason"]
    assert "estimates" not in batch and not batch.get("reports")


def test_116_attested_devices_uploading_within_3_seconds_are_refused_by_both_aggregators(
    api, analyst, officer, django_capture_on_commit_callbacks, monkeypatch
) -> None:
    """The same burst from devices the leader could not have faked (all attested, 116 tokens): each
    paces over at least 600 s, so 116 reports in one minute is no honest batch. The leader refuses it,
    and so does the helper, from the issuer's signed count and its own floor."""
    _, enrolled = devices_enrol(fleet_name="crowd", count=116)
    devices = [Device.of(e) for e in enrolled]
    round_ = _crowd_round(api, analyst, officer, "crowd")
    key = round_.task_key
    for device, bucket in zip(devices, np.arange(116) % BUCKETS, strict=True):
        assert upload(device.report(key, int(bucket))).status_code == 202
    verify(key)
    helpers_answers = []
    real = helper_client.aggregate_shares

    def spy(request):  # the helper's own answer, which the release shows only when the leader's passes
        helpers_answers.append(answer := real(request))
        return answer

    monkeypatch.setattr(helper_client, "aggregate_shares", spy)
    batch = _close(api, round_, django_capture_on_commit_callbacks)
    assert batch["suppressed"] and batch["reason"].startswith("leader:") and "rate validation" in batch["reason"]
    assert "116 devices given tokens" in batch["reason"] and "estimates" not in batch
    [answer] = helpers_answers
    [share] = answer.batches.values()
    assert share.reports is None and share.refused.startswith("helper:") and "rate validation" in share.refused


# ---------------------------------------------------------------- the issuer's statement, relayed


def _issuer_signs(**fields) -> dict:
    """A statement signed with the issuer's statement key (the test plays the issuer)."""
    content = {"collection": KEY, "issued": 3, "at": timezone.now().replace(microsecond=0), **fields}
    return statement_sign(settings.PFS_ISSUER_STATEMENT_KEY, **content).as_json()


def _forged() -> dict:
    leaders_own = DeviceKey.generate()
    return statement_sign(leaders_own.private, collection=KEY, issued=1000, at=timezone.now()).as_json()


def _inflated() -> dict:
    genuine = _issuer_signs()
    return {**genuine, "issued": 1000}


@pytest.mark.parametrize(
    ("statement", "says"),
    [
        (lambda: None, "needs the token issuer's statement"),
        (_forged, "not signed by the issuer's statement key"),
        (_inflated, "not signed by the issuer's statement key"),
        (lambda: _issuer_signs(collection="t.other/round-1", issued=1000), "another collection"),
        (lambda: _issuer_signs(at=timezone.now().replace(microsecond=0) - timedelta(hours=2)), "stale"),
        (lambda: {"collection": KEY, "issued": "many"}, "an issuer statement is"),
    ],
    ids=["missing", "forged", "inflated", "other-collection", "old", "malformed"],
)
def test_the_helper_refuses_a_statement_the_issuer_did_not_sign_for_this_collection_and_keeps_everything(
    rules, monkeypatch, helper, statement, says
) -> None:
    honest_job(monkeypatch)
    before = helper_state()
    pairs = list(HelperShare.objects.using(HELPER_STORE).values_list("pair", flat=True))
    request = dap_request(pairs, statement())
    refused = send(helper, "POST", "/aggregate_shares", dap.SHARE_REQ, request)
    assert refused.status_code == 403, refused.content
    assert refused.json()["code"] == "issuer_statement_invalid" and says in refused.json()["detail"]
    assert helper_state() == before  # nothing closed, summed or deleted
    # The issuer's own statement, relayed unchanged, is taken.
    taken = send(helper, "POST", "/aggregate_shares", dap.SHARE_REQ, dap_request(pairs, _issued()))
    assert taken.status_code == 200


def test_the_helper_refuses_more_reports_than_the_issuer_issued_tokens(rules, monkeypatch, helper) -> None:
    honest_job(monkeypatch)  # 3 reports
    pairs = list(HelperShare.objects.using(HELPER_STORE).values_list("pair", flat=True))
    answer = send(helper, "POST", "/aggregate_shares", dap.SHARE_REQ, dap_request(pairs, _issuer_signs(issued=2)))
    assert answer.status_code == 200
    [share] = _shares(answer)
    assert share.reports is None and "more reports than the token issuer issued tokens" in share.refused


def test_the_issuer_serves_its_signed_count_publicly(client, rules, monkeypatch) -> None:
    honest_job(monkeypatch)
    answer = client.get(f"/api/issuer/collections/{KEY}/issued")
    assert answer.status_code == 200
    assert answer.json()["issued"] == 3 and answer.json()["collection"] == KEY
    assert client.get("/api/issuer/collections/t.nowhere/round-1/issued").status_code == 404


def _issued() -> dict:
    return issued_statement(KEY).as_json()


def dap_request(pairs: list[str], statement: dict | None) -> bytes:
    return dap.encode(dap.AggregateShareReq(collection=KEY, batches={"": pairs}, issued_statement=statement))


def _shares(answer):
    return list(dap.AggregateShareResp.parse(answer.content).batches.values())


def _keys() -> AggregatorKeys:
    return AggregatorKeys(leader=LEADER.public_key(), helper=HELPER.public_key())


@pytest.fixture
def rules():
    return rules_open()
