"""Device attestation (pfs_device.attestation), the device's key in its state (pfs_device.sdk.identity),
and the attestation authority's commands (devices.attestation)."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import CommandError, call_command

from pfs_device.attestation import (
    Attestation,
    AttestationInvalid,
    DeviceKey,
    attestation_sign,
    attestation_verify,
    token_request_sign,
    token_request_verify,
)
from pfs_device.sdk import identity

AUTHORITY = DeviceKey(bytes(range(32)))


def test_an_attestation_the_authority_signed_verifies_through_its_json_form() -> None:
    device = DeviceKey.generate()
    attestation = Attestation.from_json(
        json.loads(json.dumps(attestation_sign(AUTHORITY.private, device.public).as_json()))
    )
    attestation_verify(AUTHORITY.public, attestation)
    assert attestation.device_public_key == device.public and attestation.digest == attestation.digest


def test_an_attestation_signed_by_another_key_is_refused() -> None:
    leaders_own = DeviceKey.generate()  # what a leader making sybils would sign with
    forged = attestation_sign(leaders_own.private, DeviceKey.generate().public)
    with pytest.raises(AttestationInvalid, match="not signed by the attestation authority"):
        attestation_verify(AUTHORITY.public, forged)


def test_an_attestation_moved_to_another_device_key_is_refused() -> None:
    genuine = attestation_sign(AUTHORITY.private, DeviceKey.generate().public)
    moved = Attestation(DeviceKey.generate().public, genuine.signature)
    with pytest.raises(AttestationInvalid, match="not signed"):
        attestation_verify(AUTHORITY.public, moved)


def test_an_expired_attestation_is_refused_and_its_expiry_cannot_be_extended() -> None:
    now = datetime(2026, 11, 26, 12, tzinfo=UTC)
    attestation = attestation_sign(AUTHORITY.private, DeviceKey.generate().public, expires_at=now + timedelta(days=1))
    attestation_verify(AUTHORITY.public, attestation, now=now)
    with pytest.raises(AttestationInvalid, match="expired"):
        attestation_verify(AUTHORITY.public, attestation, now=now + timedelta(days=2))
    extended = Attestation(attestation.device_public_key, attestation.signature, now + timedelta(days=365))
    with pytest.raises(AttestationInvalid, match="not signed"):
        attestation_verify(AUTHORITY.public, extended, now=now + timedelta(days=2))


@pytest.mark.parametrize(
    "content",
    [
        None,
        [],
        {"device_key": "AAAA", "signature": base64.b64encode(bytes(64)).decode()},
        {"device_key": base64.b64encode(bytes(32)).decode(), "signature": "not base64!"},
        {"device_key": base64.b64encode(bytes(32)).decode(), "signature": base64.b64encode(bytes(64)).decode(), "x": 1},
        {
            "device_key": base64.b64encode(bytes(32)).decode(),
            "signature": base64.b64encode(bytes(64)).decode(),
            "expires_at": "2026-11-26T12:00:00",  # no time zone
        },
    ],
)
def test_a_malformed_attestation_is_refused_with_a_reason(content) -> None:
    with pytest.raises(AttestationInvalid):
        Attestation.from_json(content)


def test_a_token_request_signature_binds_the_collection_and_the_blinded_message() -> None:
    device = DeviceKey.generate()
    signature = token_request_sign(device, "t.a/r/1", b"\x01\x02")
    assert token_request_verify(device.public, "t.a/r/1", b"\x01\x02", signature)
    assert not token_request_verify(device.public, "t.a/r/2", b"\x01\x02", signature)
    assert not token_request_verify(device.public, "t.a/r/1", b"\x01\x03", signature)
    assert not token_request_verify(DeviceKey.generate().public, "t.a/r/1", b"\x01\x02", signature)
    assert not token_request_verify(device.public, "t.a/r/1", b"\x01\x02", b"short")


def test_a_device_key_is_kept_owner_only_in_the_state_and_found_by_its_public_key(tmp_path) -> None:
    key = identity.device_key_create(tmp_path)
    path = identity.key_path(tmp_path, key.public)
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    assert identity.device_key_load(tmp_path, key.public) == key
    with pytest.raises(identity.KeyMissing):
        identity.device_key_load(tmp_path, DeviceKey.generate().public)


def test_the_identity_command_writes_public_keys_only(tmp_path) -> None:
    out = tmp_path / "keys.json"
    assert identity.main(["--state", str(tmp_path / "state"), "--count", "3", "--out", str(out)]) == 0
    keys = [base64.b64decode(k) for k in json.loads(out.read_text())["keys"]]
    assert len(keys) == 3 and all(identity.device_key_load(tmp_path / "state", k).public == k for k in keys)
    assert identity.main(["--state", str(tmp_path / "state"), "--count", "1", "--out", str(out)]) == 2


def test_the_authority_keygen_and_sign_commands_attest_what_its_public_key_verifies(tmp_path, settings) -> None:
    keyfile = tmp_path / "authority.key"
    printed = _run("attestation_keygen", "--out", str(keyfile))
    assert oct(keyfile.stat().st_mode & 0o777) == "0o600"
    public = base64.b64decode(printed.strip().split("=", 1)[1])
    settings.PFS_ATTESTATION_KEY = base64.b64decode(keyfile.read_text())
    keys = tmp_path / "keys.json"
    identity.main(["--state", str(tmp_path / "state"), "--count", "2", "--out", str(keys)])
    out = tmp_path / "attestations.json"
    _run("attestation_sign", "--keys", str(keys), "--out", str(out), "--days", "30")
    attestations = [Attestation.from_json(a) for a in json.loads(out.read_text())["attestations"]]
    assert [a.device_public_key for a in attestations] == [
        base64.b64decode(k) for k in json.loads(keys.read_text())["keys"]
    ]
    for attestation in attestations:
        attestation_verify(public, attestation)
        assert attestation.expires_at is not None


def test_the_authority_refuses_without_its_key_or_with_a_bad_public_key(tmp_path, settings) -> None:
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps({"keys": ["AAAA"]}))
    with pytest.raises(CommandError, match="32-byte") as bad:
        _run("attestation_sign", "--keys", str(keys), "--out", str(tmp_path / "a.json"))
    assert bad.value.returncode == 2 and not (tmp_path / "a.json").exists()
    settings.PFS_ATTESTATION_KEY = None  # a leader's or an issuer's host: no authority key
    keys.write_text(json.dumps({"keys": [base64.b64encode(DeviceKey.generate().public).decode()]}))
    with pytest.raises(CommandError, match="no attestation authority key") as missing:
        _run("attestation_sign", "--keys", str(keys), "--out", str(tmp_path / "a.json"))
    assert missing.value.returncode == 2 and not (tmp_path / "a.json").exists()


def _run(*arguments: str) -> str:
    from io import StringIO

    out = StringIO()
    call_command(*arguments, stdout=out)
    return out.getvalue()
