"""An uploaded report on the wire: the dataclasses and their compact JSON, with no Django.

Both ends use this module: the device SDK writes a report with ``report_json`` and the leader's
upload endpoint reads it with ``report_parse``. Binary fields are standard base64 with padding::

    {"v": 4, "collection": "<key>", "batch": "locale=en_US",
     "token": {"nonce": "<32 bytes>", "signature": "<issuer key size>"},
     "public": "<the Prio3 public share: 64 bytes, or empty for a Count>",
     "leader": {"enc": "<32 bytes>", "ct": "<the leader's Prio3 input share + 16 bytes>"},
     "helper": {"enc": "<32 bytes>", "ct": "<the helper's Prio3 input share + 16 bytes>"}}

Each share is a Prio3 input share (privacy.report_vdaf names the VDAF): the leader's holds its
measurement and proof shares, the helper's two 32-byte seeds. The public share holds the joint
randomness parts. Each share's HPKE info names its aggregator, and its AEAD associated data is the
report's collection, batch, token and public share (pfs_device.hpke). The token's signed message
names the report (``report_digest``: its batch, public share and both sealed shares), so a token
carries only the report it was issued for. Nothing else travels: no device id, no time, no address
the aggregators keep.
"""

from __future__ import annotations

import binascii
import hashlib
import json
import math
from collections.abc import Collection
from dataclasses import dataclass

# SIMD base64: a report's shares are about 25 KB of base64 at 1,024 buckets, which the standard
# library decodes in 0.1 ms and pybase64 in 2 us, a tenth of the leader's work on a report
# (bench/results/upload_prio3.md). It refuses what the standard library refuses, and excess
# padding too (tests/unit/test_wire_base64.py).
from pybase64 import b64decode as _b64decode
from pybase64 import b64encode as _b64encode

from pfs_device.tokens import NONCE_BYTES, REPORT_DIGEST_BYTES, Token

# 4: the token is bound to its report (its signed message holds report_digest; 3 sealed shares as 4
# does, but with a token any report could carry); 3: each share's context in the AEAD's associated
# data (2 had it in the HPKE info; 1 carried bare Field64 vectors). A device sends this version,
# and the upload path takes no other.
VERSION = 4
SEALED_V3 = 3  # sealed as 4 is; its token signs the collection only (aggregation.aggregators.token_valid)
ENC_BYTES = 32  # an X25519 encapsulated key (pfs_device.hpke)
AEAD_TAG_BYTES = 16  # ChaCha20-Poly1305
MAX_KEY_LENGTH = 200  # CollectionRules.key and Collection.batch_key are 200-character columns
# Room for the JSON punctuation, the keys and a 4,096-bit issuer's signature.
ENVELOPE_BYTES = 2_048


@dataclass(frozen=True)
class SealedShare:
    enc: bytes
    ciphertext: bytes


@dataclass(frozen=True)
class Report:
    collection_key: str
    batch_key: str
    token: Token
    leader: SealedShare
    helper: SealedShare
    public: bytes = b""  # the Prio3 public share
    version: int = VERSION  # how its shares are sealed (an aggregator opens an older one it stored)

    def share_for(self, role: str) -> SealedShare:
        return self.leader if role == "leader" else self.helper


_DIGEST_LABEL = b"pfs-studio report digest v1"


def share_digest(sealed: SealedShare) -> bytes:
    """The SHA-256 of one sealed share (its encapsulated key and ciphertext, each length-prefixed):
    what the leader tells the helper of its own share (aggregation.dap.VerifyInit)."""
    return hashlib.sha256(_framed(sealed.enc, sealed.ciphertext)).digest()


def report_digest(*, batch_key: str, public: bytes, leader_share_digest: bytes, helper_share_digest: bytes) -> bytes:
    """What a token's signed message names of its report (pfs_device.tokens.token_message): the
    SHA-256 of a label, the batch, the public share and both sealed shares' digests.

    Each aggregator recomputes it with only its own sealed share in hand and the other's digest:
    the leader from the whole upload, the helper from its share and the ``leader_share_digest`` of
    the job's entry. Variable parts are length-prefixed, so no two reports share a digest by
    moving bytes from one part to the next.
    """
    for digest in (leader_share_digest, helper_share_digest):
        if len(digest) != REPORT_DIGEST_BYTES:
            raise ValueError(f"a share's digest is {REPORT_DIGEST_BYTES} bytes, not {len(digest)}")
    framed = _framed(_DIGEST_LABEL, batch_key.encode(), public)
    return hashlib.sha256(framed + leader_share_digest + helper_share_digest).digest()


def report_digest_of(report: Report) -> bytes:
    """report_digest of a whole report (the device's, or the leader's with the upload in hand)."""
    return report_digest(
        batch_key=report.batch_key,
        public=report.public,
        leader_share_digest=share_digest(report.leader),
        helper_share_digest=share_digest(report.helper),
    )


def _framed(*parts: bytes) -> bytes:
    return b"".join(len(part).to_bytes(8, "big") + part for part in parts)


class WireError(ValueError):
    """The body is not a report; ``fields`` maps each bad field (a dotted path) to its messages."""

    def __init__(self, fields: dict[str, list[str]]) -> None:
        super().__init__("; ".join(f"{k}: {' '.join(v)}" for k, v in fields.items()))
        self.fields = fields


def _b64(data: bytes) -> str:
    return _b64encode(data).decode("ascii")


def report_json(report: Report) -> dict:
    return {
        "v": report.version,
        "collection": report.collection_key,
        "batch": report.batch_key,
        "token": {"nonce": _b64(report.token.nonce), "signature": _b64(report.token.signature)},
        "public": _b64(report.public),
        "leader": {"enc": _b64(report.leader.enc), "ct": _b64(report.leader.ciphertext)},
        "helper": {"enc": _b64(report.helper.enc), "ct": _b64(report.helper.ciphertext)},
    }


def report_bytes(report: Report) -> bytes:
    """The upload body: compact JSON, ASCII only."""
    return json.dumps(report_json(report), separators=(",", ":")).encode("ascii")


def body_limit(leader_bytes: int, helper_bytes: int, public_bytes: int) -> int:
    """The largest upload body an honest device sends with input shares and a public share of these sizes."""
    encoded = sum(4 * math.ceil(size / 3) for size in (leader_bytes + AEAD_TAG_BYTES, helper_bytes + AEAD_TAG_BYTES))
    return encoded + 4 * math.ceil(public_bytes / 3) + ENVELOPE_BYTES + 2 * MAX_KEY_LENGTH


def collection_key_of(data: object) -> str | None:
    """The collection a parsed body names, if it names one plausibly (to count a rejection there)."""
    if isinstance(data, dict):
        key = data.get("collection")
        if isinstance(key, str) and 0 < len(key) <= MAX_KEY_LENGTH:
            return key
    return None


def report_parse(data: object, *, versions: Collection[int] = (VERSION,), signed: bool = True) -> Report:
    """The Report in a parsed JSON body; WireError with every bad field otherwise.

    ``versions``: the wire versions taken. An upload is of this one only; an aggregator reading a
    body it stored before an upgrade names the older versions it still opens. ``signed``: False
    for a sealed report its device keeps until it has the token (pfs_device.sdk.device), whose
    token has its nonce and an empty signature.
    """
    if not isinstance(data, dict):
        raise WireError({"non_field_errors": ["The body must be a JSON object."]})
    problems: dict[str, list[str]] = {}

    def add(path: str, message: str) -> None:
        problems.setdefault(path, []).append(message)

    version = data.get("v")
    if type(version) is not int or version not in versions:  # not a bool, nor a float that equals one
        if type(version) is int and 0 < version < VERSION:
            add("v", f"Must be {VERSION}: version {version} is no longer accepted (update the device SDK).")
        else:
            add("v", f"Must be {VERSION} (the version of this wire format).")
    unknown = sorted(set(data) - {"v", "collection", "batch", "token", "public", "leader", "helper"})
    for key in unknown:
        add(key, "Unknown field.")
    collection = _text(data, "collection", add, required=True)
    batch = _text(data, "batch", add, required=False)

    def binary(parent: str, name: str, length: int | None = None, *, empty: bool = False) -> bytes:
        path = f"{parent}.{name}"
        value = data.get(parent, {}).get(name) if isinstance(data.get(parent), dict) else None
        if not isinstance(value, str):
            add(path, "Must be a base64 string.")
            return b""
        try:
            decoded = _b64decode(value.encode("ascii"), validate=True)
        except (binascii.Error, UnicodeEncodeError):
            add(path, "Not valid base64.")
            return b""
        if length is not None and len(decoded) != length:
            add(path, f"Must be {length} bytes, not {len(decoded)}.")
        elif not decoded and not empty:
            add(path, "Must not be empty.")
        elif decoded and empty:
            add(path, "Must be empty (a report not yet signed).")
        return decoded

    for parent in ("token", "leader", "helper"):
        if not isinstance(data.get(parent), dict):
            add(parent, "Must be an object.")
    public = data.get("public", None)
    if not isinstance(public, str):
        add("public", "Must be a base64 string (empty for a report with no public share).")
        public_bytes = b""
    else:
        try:
            public_bytes = _b64decode(public.encode("ascii"), validate=True)
        except (binascii.Error, UnicodeEncodeError):
            add("public", "Not valid base64.")
            public_bytes = b""
    nonce = binary("token", "nonce", NONCE_BYTES)
    signature = binary("token", "signature", empty=not signed)
    shares = {
        role: SealedShare(enc=binary(role, "enc", ENC_BYTES), ciphertext=binary(role, "ct"))
        for role in ("leader", "helper")
    }
    if problems:
        raise WireError(problems)
    return Report(
        collection_key=collection,
        batch_key=batch,
        token=Token(nonce=nonce, signature=signature),
        leader=shares["leader"],
        helper=shares["helper"],
        public=public_bytes,
        version=version,
    )


def _text(data: dict, key: str, add, *, required: bool) -> str:
    value = data.get(key, None if required else "")
    if not isinstance(value, str) or (required and not value):
        add(key, "Must be a non-empty string." if required else "Must be a string.")
        return ""
    if len(value) > MAX_KEY_LENGTH or not value.isprintable():
        add(key, f"Must be at most {MAX_KEY_LENGTH} printable characters.")
    return value
