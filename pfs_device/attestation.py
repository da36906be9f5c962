"""Device attestation: a device's own key pair, the attestation authority's signature on its public
key, and the device's signature on each of its token requests (issue 29, requirement 1).

The token issuer signs at most one token per *attested* device and collection. The attestation is
what makes a device count: an authority whose key is neither the leader's nor the issuer's (the
platform's device attestation, the SAA paper's "device attestation service"; in this project a
small authority of its own, devices.attestation) signs

    b"pfs-studio attestation v1|" + device public key [+ b"|expires:" + ISO expiry]

with Ed25519. A leader that registers devices of its own (sybils) cannot make such a signature, so
the issuer gives them no tokens. A leader that sees a real device's attestation at enrolment cannot
use it to take that device's token either: each token request is signed by the device's private
key, which never leaves the device,

    b"pfs-studio token request v1|" + collection key + b"|" + blinded message (big-endian bytes)

Pure: the ``cryptography`` library's Ed25519 and the standard library, no Django.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from dataclasses import dataclass
from datetime import UTC, datetime

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat, PublicFormat

ATTESTATION_CONTEXT = b"pfs-studio attestation v1|"
TOKEN_REQUEST_CONTEXT = b"pfs-studio token request v1|"
KEY_SIZE = 32  # Ed25519 public keys and private seeds
SIGNATURE_SIZE = 64


class AttestationInvalid(ValueError):
    """Not an attestation the authority signed (malformed, forged, or expired); the message says which."""


@dataclass(frozen=True)
class DeviceKey:
    """A device's Ed25519 key pair; the private half is kept in the device's state and nowhere else."""

    private: bytes  # the 32-byte seed

    @classmethod
    def generate(cls) -> DeviceKey:
        seed = Ed25519PrivateKey.generate().private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
        return cls(seed)

    @property
    def public(self) -> bytes:
        return public_of(self.private)

    def sign(self, message: bytes) -> bytes:
        return Ed25519PrivateKey.from_private_bytes(self.private).sign(message)


def public_of(private: bytes) -> bytes:
    """The raw 32-byte public key of an Ed25519 private seed."""
    return Ed25519PrivateKey.from_private_bytes(private).public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


def key_digest(public_key: bytes) -> str:
    """What names a device's key in the issuer's records: SHA-256 of the raw public key, hex."""
    return hashlib.sha256(b"pfs-studio device key|" + public_key).hexdigest()


@dataclass(frozen=True)
class Attestation:
    """The authority's Ed25519 signature over a device's public key (and its expiry, if any)."""

    device_public_key: bytes
    signature: bytes
    expires_at: datetime | None = None

    def signed_message(self) -> bytes:
        return attestation_message(self.device_public_key, self.expires_at)

    def as_json(self) -> dict[str, str]:
        content = {"device_key": _b64(self.device_public_key), "signature": _b64(self.signature)}
        if self.expires_at is not None:
            content["expires_at"] = self.expires_at.isoformat()
        return content

    @classmethod
    def from_json(cls, content: object) -> Attestation:
        """AttestationInvalid for anything but {"device_key", "signature"[, "expires_at"]} of the right sizes."""
        if not isinstance(content, dict) or set(content) - {"device_key", "signature", "expires_at"}:
            raise AttestationInvalid("an attestation is an object with 'device_key', 'signature' and 'expires_at'")
        public_key = _unb64(content.get("device_key"), KEY_SIZE, "device_key")
        signature = _unb64(content.get("signature"), SIGNATURE_SIZE, "signature")
        expires = content.get("expires_at")
        if expires is None:
            return cls(public_key, signature)
        try:
            expires_at = datetime.fromisoformat(expires) if isinstance(expires, str) else None
        except ValueError:
            expires_at = None
        if expires_at is None or expires_at.tzinfo is None:
            raise AttestationInvalid("expires_at: must be an ISO 8601 time with its time zone")
        return cls(public_key, signature, expires_at)

    @property
    def digest(self) -> str:
        return key_digest(self.device_public_key)


def attestation_message(device_public_key: bytes, expires_at: datetime | None = None) -> bytes:
    message = ATTESTATION_CONTEXT + device_public_key
    if expires_at is not None:
        message += b"|expires:" + expires_at.isoformat().encode()
    return message


def attestation_sign(
    authority_private_key: bytes, device_public_key: bytes, *, expires_at: datetime | None = None
) -> Attestation:
    """The authority's act: attest ``device_public_key`` (raw 32 bytes)."""
    if len(device_public_key) != KEY_SIZE:
        raise AttestationInvalid(f"a device key is {KEY_SIZE} bytes, not {len(device_public_key)}")
    signer = Ed25519PrivateKey.from_private_bytes(authority_private_key)
    return Attestation(device_public_key, signer.sign(attestation_message(device_public_key, expires_at)), expires_at)


def attestation_verify(authority_public_key: bytes, attestation: Attestation, *, now: datetime | None = None) -> None:
    """Returns if the authority signed ``attestation`` and it has not expired; AttestationInvalid otherwise."""
    if not _signed(authority_public_key, attestation.signature, attestation.signed_message()):
        raise AttestationInvalid("the attestation is not signed by the attestation authority")
    if attestation.expires_at is not None and attestation.expires_at <= (now or datetime.now(UTC)):
        raise AttestationInvalid(f"the attestation expired at {attestation.expires_at.isoformat()}")


def token_request_message(collection_key: str, blinded: bytes) -> bytes:
    return TOKEN_REQUEST_CONTEXT + collection_key.encode() + b"|" + blinded


def token_request_sign(key: DeviceKey, collection_key: str, blinded: bytes) -> bytes:
    """The device's signature over its token request for ``collection_key``."""
    return key.sign(token_request_message(collection_key, blinded))


def token_request_verify(device_public_key: bytes, collection_key: str, blinded: bytes, signature: bytes) -> bool:
    """Whether the holder of ``device_public_key``'s private half signed this very request."""
    return _signed(device_public_key, signature, token_request_message(collection_key, blinded))


def _signed(public_key: bytes, signature: bytes, message: bytes) -> bool:
    try:
        Ed25519PublicKey.from_public_bytes(public_key).verify(signature, message)
    except (InvalidSignature, ValueError):
        return False
    return True


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(value: object, size: int, name: str) -> bytes:
    try:
        data = base64.b64decode(value.encode("ascii"), validate=True) if isinstance(value, str) else b""
    except (binascii.Error, UnicodeEncodeError):
        data = b""
    if len(data) != size:
        raise AttestationInvalid(f"{name}: must be base64 of {size} bytes")
    return data
