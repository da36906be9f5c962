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

import pytest

from aggregation.issuer import issuer_public_key
from aggregation.models import IssuedToken
from devices.credentials import devices_register
from pfs_device.attestation import DeviceKey, attestation_sign, token_request_sign
from pfs_device.tokens import token_blind
from tests.attest import attested
from tests.unit.test_device_http import Device

pytestmark = pytest.mark.django_db


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
    blinding = token_blind(collection_key=key, issuer=issuer_public_key(key))
    response = twin.token_request(key, blinding.blinded)
    assert response.status_code == 409 and response.json()["code"] == "token_already_issued"
    assert IssuedToken.objects.filter(collection_key=key).count() == 1


def test_registering_an_unattested_device_is_refused_and_registers_nothing(db) -> None:
    from devices.credentials import RegistrationInvalid
    from devices.models import DeviceCredential

    (_, good), forged = attested(1)[0], attestation_sign(DeviceKey.generate().private, DeviceKey.generate().public)
    with pytest.raises(RegistrationInvalid, match=r"attestations\[1\]: the attestation is not signed"):
        devices_register(fleet_name="phones", attestations=[good, forged.as_json()])
    with pytest.raises(RegistrationInvalid, match=r"attestations\[0\]"):
        devices_register(fleet_name="phones", attestations=[{"device_key": "x"}])
    assert not DeviceCredential.objects.exists()
