"""Opening the shares of wire format v2 reports: those a leader stored before the upgrade to v3.

v2 sealed each share with the report's context in HPKE's info, not the AEAD's associated data:
a JSON array of a label, the aggregator's role, the collection, the batch and the token, with the
public share folded in after it (``setup_info``) and an empty AEAD aad, through ``cryptography``'s
single-shot HPKE (same suite, same wire sizes as v3). Devices seal v3 now (pfs_device.hpke), and
the upload path refuses a v2 body (pfs_device.wire). But the upload only stores a body
(aggregation.intake → PendingReport); both aggregators open it later, in bulk
(aggregation.ingest), so a v2 report received before the upgrade is still to be opened after it.
That opening, and nothing else of v2, is kept here, on the aggregators' side only.

Once no PendingReport holds a v2 body — every collection open at the upgrade has been released
(its pending reports are verified first) or discarded (they are deleted) — this module, its
dispatch (aggregation.aggregators.Aggregator.open_share) and ``STORED_VERSIONS``' 2 can go.
"""

from __future__ import annotations

import json

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hpke
from cryptography.hazmat.primitives.asymmetric import x25519

from pfs_device.hpke import ENC_BYTES, OpenFailed

VERSION = 2
SUITE = hpke.Suite(hpke.KEM.X25519, hpke.KDF.HKDF_SHA256, hpke.AEAD.CHACHA20_POLY1305)
# Started every v2 info that carried aad; share_info's infos start with "[", so never equal one.
AAD_LABEL = b"pfs-studio hpke aad v1"


def share_info(collection_key: str, role: str, *, batch_key: str, token_digest: str) -> bytes:
    """The v2 HPKE info of one report's share: its aggregator, collection, batch and token (a JSON array)."""
    return json.dumps(["pfs-studio report share v2", role, collection_key, batch_key, token_digest]).encode()


def setup_info(info: bytes, aad: bytes) -> bytes:
    """The v2 Setup info that authenticates ``aad`` too (RFC 9180 Section 8.1):
    ``label || I2OSP(len(info), 4) || info || aad``, or ``info`` alone when ``aad`` is empty."""
    if not aad:
        return info
    return AAD_LABEL + len(info).to_bytes(4, "big") + info + aad


def open_sealed(private_key: bytes, enc: bytes, ciphertext: bytes, info: bytes, *, aad: bytes = b"") -> bytes:
    """The plaintext of a v2 ``(enc, ciphertext)``; the same OpenFailed as v3 for every failure."""
    # cryptography takes enc || ct as one string: a short enc would borrow bytes from the ciphertext.
    if len(enc) != ENC_BYTES:
        raise OpenFailed(f"the encapsulated key must be {ENC_BYTES} bytes")
    try:
        recipient = x25519.X25519PrivateKey.from_private_bytes(private_key)
        return SUITE.decrypt(enc + ciphertext, recipient, info=setup_info(info, aad))
    except (InvalidTag, ValueError) as error:
        raise OpenFailed(str(error) or type(error).__name__) from None
