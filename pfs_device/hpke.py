"""HPKE (RFC 9180) for report shares: each share is sealed to one aggregator's public key, with the
report's context as the AEAD's associated data.

Suite: DHKEM(X25519, HKDF-SHA256), HKDF-SHA256, ChaCha20-Poly1305 (RFC 9180 Section 7: KEM 0x0020,
KDF 0x0001, AEAD 0x0003), base mode: SealBase and OpenBase of Section 6.1. A device seals through
``pyhpke``, whose contexts take the AEAD's associated data (``cryptography``'s single-shot HPKE takes
none: pyca/cryptography #14203). The aggregators open two shares a report, where pyhpke's general
key schedule in Python was half of each opening: ``open_sealed`` is OpenBase of this one suite,
written out from the RFC on ``cryptography``'s X25519 and ChaCha20-Poly1305 and the standard
library's HMAC-SHA256, and checked against the RFC's test vector and against pyhpke's and
cryptography's sealing (tests/unit/test_hpke.py). The wire format keeps the 32-byte encapsulated key
and the AEAD ciphertext (plaintext length + 16-byte tag) apart.

What binds a share is what binds a DAP input share (draft-ietf-ppm-dap, "Input share encryption"),
in the same places:

- the info names the protocol and the recipient (``share_info``): a share sealed for the helper
  does not open as the leader's, nor anything sealed by another protocol as a share;
- the aad is the report's context (``share_aad``): its collection, batch, token and Prio3 public
  share, each length-prefixed, so a share moved to another report does not open.

Another HPKE implementation opens these shares by building the same info and aad. Shares of wire
format v2 carried their context in the info instead; only the aggregators still open those
(aggregation.hpke_v2), for reports stored before the upgrade.
"""

from __future__ import annotations

import functools
import hmac

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.asymmetric import x25519
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from pyhpke import AEADId, CipherSuite, KDFId, KEMId

SUITE = CipherSuite.new(KEMId.DHKEM_X25519_HKDF_SHA256, KDFId.HKDF_SHA256, AEADId.CHACHA20_POLY1305)
ENC_BYTES = 32  # Nenc of DHKEM(X25519, HKDF-SHA256), RFC 9180 Section 7.1
# The info of a share: this label, the sender's role, the recipient's role. DAP's is
# "dap-NN input share" || 0x01 || server_role, with its Role values (client 1, leader 2, helper 3);
# the label's version is the sealing's: the wire format's since v3 (v4 bound the token to its
# report, pfs_device.tokens, and sealed as v3 did).
SHARE_INFO_LABEL = b"pfs-studio input share v3"
CLIENT_ROLE = 0x01
AGGREGATOR_ROLES = {"leader": 0x02, "helper": 0x03}
# Length prefixes of the aad's fields: 4 bytes, as DAP's public_share<0..2^32-1>.
LENGTH_BYTES = 4


class OpenFailed(ValueError):
    """The ciphertext does not open with this key, info and aad."""


def key_pair_generate() -> tuple[bytes, bytes]:
    """A fresh (private, public) key pair, raw 32-byte X25519 keys (RFC 9180 Section 7.1.1 and 7.1.2).

    The private key is 32 random bytes, as GenerateKeyPair gives; X25519 clamps it when it is used.
    """
    private = x25519.X25519PrivateKey.generate()
    return private.private_bytes_raw(), private.public_key().public_bytes_raw()


def public_key_of(private_key: bytes) -> bytes:
    """The raw X25519 public key of a raw private key (RFC 9180 Section 7.1.1, pk(skR))."""
    return x25519.X25519PrivateKey.from_private_bytes(private_key).public_key().public_bytes_raw()


def share_info(role: str) -> bytes:
    """The HPKE info of a share sealed for the aggregator ``role``: the protocol, the sender (a
    client), the recipient. ValueError for a role that is no aggregator's."""
    if role not in AGGREGATOR_ROLES:
        raise ValueError(f"no aggregator has the role {role!r}")
    return SHARE_INFO_LABEL + bytes([CLIENT_ROLE, AGGREGATOR_ROLES[role]])


def share_aad(collection_key: str, *, batch_key: str, token_digest: str, public_share: bytes) -> bytes:
    """The AEAD associated data of a report's shares: its collection, batch, token and public share.

    Each field is length-prefixed, so no two contexts share an encoding: bytes moved from one
    field to the next (a batch key ending where the token digest starts) are another aad.
    """
    fields = (collection_key.encode(), batch_key.encode(), token_digest.encode(), public_share)
    return b"".join(len(field).to_bytes(LENGTH_BYTES, "big") + field for field in fields)


def seal(public_key: bytes, plaintext: bytes, info: bytes, *, aad: bytes = b"") -> tuple[bytes, bytes]:
    """(encapsulated key, ciphertext) of ``plaintext`` for the holder of ``public_key``:
    SealBase(pkR, info, aad, pt).

    Raises ValueError for a public key that is not 32 bytes.
    """
    recipient = SUITE.kem.deserialize_public_key(public_key)
    enc, sender = SUITE.create_sender_context(recipient, info)
    return enc, sender.seal(plaintext, aad)


# OpenBase's constants (RFC 9180): the suite_id of the KEM (Section 4.1) and of HPKE (Section 5.1),
# from the suite's ids; Nsecret, Nk and Nn of Section 7; the base mode.
_KEM_SUITE_ID = b"KEM" + SUITE.kem.id.value.to_bytes(2, "big")
_HPKE_SUITE_ID = b"HPKE" + b"".join(i.value.to_bytes(2, "big") for i in (SUITE.kem.id, SUITE.kdf.id, SUITE.aead.id))
_N_SECRET, _N_K, _N_N = 32, 32, 12
_MODE_BASE = b"\x00"


def _labeled_extract(salt: bytes, label: bytes, ikm: bytes, suite_id: bytes) -> bytes:
    """LabeledExtract (Section 4): HKDF-Extract with SHA-256, an empty salt being Nh zero bytes."""
    return hmac.digest(salt or bytes(32), b"HPKE-v1" + suite_id + label + ikm, "sha256")


def _labeled_expand(prk: bytes, label: bytes, info: bytes, length: int, suite_id: bytes) -> bytes:
    """LabeledExpand (Section 4) for at most one SHA-256 block: T(1) of HKDF-Expand, cut to ``length``."""
    labeled_info = length.to_bytes(2, "big") + b"HPKE-v1" + suite_id + label + info
    return hmac.digest(prk, labeled_info + b"\x01", "sha256")[:length]


@functools.lru_cache(maxsize=16)
def _recipient(private_key: bytes) -> tuple[x25519.X25519PrivateKey, bytes]:
    """The decoded private key and its serialized public key, kept: an aggregator opens thousands of
    shares with one key (an ingest chunk). A few keys at most are in use at once (each role's
    current key and the retired ones still needed)."""
    key = x25519.X25519PrivateKey.from_private_bytes(private_key)
    return key, key.public_key().public_bytes_raw()


@functools.lru_cache(maxsize=16)
def _key_schedule_context(info: bytes) -> bytes:
    """mode || psk_id_hash || info_hash of the base mode's KeySchedule (Section 5.1): the same for
    every share of a role (its info is share_info's)."""
    psk_id_hash = _labeled_extract(b"", b"psk_id_hash", b"", _HPKE_SUITE_ID)
    return _MODE_BASE + psk_id_hash + _labeled_extract(b"", b"info_hash", info, _HPKE_SUITE_ID)


def open_sealed(private_key: bytes, enc: bytes, ciphertext: bytes, info: bytes, *, aad: bytes = b"") -> bytes:
    """The plaintext of ``(enc, ciphertext)``: OpenBase(enc, skR, info, aad, ct); OpenFailed if it
    does not open.

    Decap of DHKEM(X25519, HKDF-SHA256) (Section 4.1: DH, then ExtractAndExpand over enc || pkR),
    the base mode's KeySchedule (Section 5.1: key and base_nonce; no exporter secret, which
    nothing here exports), and the AEAD's Open at sequence number 0 (Section 5.2: the nonce is
    base_nonce). Every failure — a malformed key or enc, a low-order enc (an all-zero shared
    secret, which cryptography refuses as Section 7.1.4 asks), a wrong key, info or aad, a
    truncated or altered ciphertext — is the same OpenFailed, so a caller cannot tell them apart.
    """
    try:
        key, public_key = _recipient(private_key)
        dh = key.exchange(x25519.X25519PublicKey.from_public_bytes(enc))
        eae_prk = _labeled_extract(b"", b"eae_prk", dh, _KEM_SUITE_ID)
        shared_secret = _labeled_expand(eae_prk, b"shared_secret", enc + public_key, _N_SECRET, _KEM_SUITE_ID)
        context = _key_schedule_context(info)
        secret = _labeled_extract(shared_secret, b"secret", b"", _HPKE_SUITE_ID)
        aead_key = _labeled_expand(secret, b"key", context, _N_K, _HPKE_SUITE_ID)
        base_nonce = _labeled_expand(secret, b"base_nonce", context, _N_N, _HPKE_SUITE_ID)
        return ChaCha20Poly1305(aead_key).decrypt(base_nonce, ciphertext, aad)
    except (InvalidTag, ValueError) as error:  # cryptography's X25519 raises ValueError
        raise OpenFailed(str(error) or type(error).__name__) from None
