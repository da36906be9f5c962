"""The attestation authority: it signs devices' public keys (pfs_device.attestation).

It stands for the platform's device attestation (the SAA paper's "device attestation service"),
which vouches that a key lives in a real device: in this project a small authority of its own, with
its Ed25519 key from PFS_ATTESTATION_KEY or PFS_ATTESTATION_KEY_FILE (docs/deployment.md, "Keys").
Its operator is neither the leader's nor the issuer's: the leader and the issuer hold only its
public key (PFS_ATTESTATION_PUBLIC_KEY) and verify with it, so a leader that registers devices of
its own cannot make them count. The code lives here for the management commands
(``attestation_keygen``, ``attestation_sign``) only; nothing the leader serves calls it.
"""

from __future__ import annotations

import base64
from datetime import datetime

from django.conf import settings

from pfs_device.attestation import Attestation, AttestationInvalid, attestation_sign


class AuthorityUnavailable(Exception):
    """This host holds no attestation authority's key."""


def authority_key() -> bytes:
    key = settings.PFS_ATTESTATION_KEY
    if key is None:
        raise AuthorityUnavailable(
            "no attestation authority key here: set PFS_ATTESTATION_KEY or PFS_ATTESTATION_KEY_FILE "
            "(manage.py attestation_keygen writes one), on the authority's host only"
        )
    return key


def devices_attest(*, public_keys: list[str], expires_at: datetime | None = None) -> list[Attestation]:
    """Attest each device public key (base64 of 32 raw Ed25519 bytes); AttestationInvalid naming the
    first bad one, before anything is signed."""
    decoded = []
    for index, text in enumerate(public_keys):
        try:
            raw = base64.b64decode(text.encode("ascii"), validate=True) if isinstance(text, str) else b""
        except (ValueError, UnicodeEncodeError):
            raw = b""
        if len(raw) != 32:
            raise AttestationInvalid(f"keys[{index}]: must be base64 of a 32-byte Ed25519 public key")
        decoded.append(raw)
    key = authority_key()
    return [attestation_sign(key, raw, expires_at=expires_at) for raw in decoded]
