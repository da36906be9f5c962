"""The leader's Oblivious Gateway (RFC 9458) in front of the anonymous upload, and its keys.

A device seals ``POST /api/device/reports/`` in Binary HTTP to the gateway's key and sends it
through a relay: the relay sees the device's address and an opaque capsule, the leader sees the
report and the relay's address. The gateway opens the capsule, hands the inner request to the
upload path in-process (``aggregation.intake.upload_answer``, the same answers as a direct
upload) and seals the answer back (pfs_device.ohttp, pfs_device.bhttp).

Only the upload goes through it. The token request is refused inside the capsule: the issuer's
one-token-per-device rule keys on the device's credential and signature (aggregation.issuer), so
the issuer learns who asks whatever the path; hiding the address would hide nothing the request
does not already say, and a gateway that accepted it would be a second door to the issuer for no
gain in privacy. What the relay protects is the link between the token request's address and the
upload's, which the upload alone carries.

Keys: the gateway's X25519 private key is derived from the leader's HPKE key (HKDF-SHA256 with its
own info), so it rotates with it (``manage.py rotate_keys``, a key file, the environment) with no
new setting or store, and the same X25519 key is never used for two protocols. Key ids are the
first byte of SHA-256 over the gateway's public key: a client with a configuration from before a
rotation still reaches the key it used, as long as the leader keeps the retired key.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from aggregation import intake
from aggregation.aggregators import LEADER
from pfs_base.api_errors import error_body, server_error_body
from pfs_device import bhttp, ohttp

logger = logging.getLogger("pfs_web.api")

# The one inner request the gateway serves.
INNER_METHOD = b"POST"
INNER_PATH = intake.UPLOAD_PATH.encode()
GATEWAY_KEY_INFO = b"pfs-studio ohttp gateway key v1"
# Offered to clients, the first preferred: the project's AEAD, then the RFC's example's.
ALGORITHMS = (
    (ohttp.KDF_HKDF_SHA256, ohttp.AEAD_CHACHA20_POLY1305),
    (ohttp.KDF_HKDF_SHA256, ohttp.AEAD_AES_128_GCM),
)


@dataclass(frozen=True)
class GatewayKey:
    config: ohttp.KeyConfig
    private_key: bytes


@dataclass(frozen=True)
class Refusal:
    """An outer error: the capsule did not open, so the answer cannot be sealed (RFC 9458 Section 5.2)."""

    status: int
    body: dict[str, Any]
    content_type: str = "application/json"


@functools.lru_cache(maxsize=16)
def gateway_key_of(leader_private_key: bytes) -> GatewayKey:
    """The gateway key derived from one leader key: HKDF-SHA256(ikm = the leader's key, info =
    GATEWAY_KEY_INFO), 32 bytes as an X25519 private key (clamped when used, RFC 7748)."""
    private_key = HKDF(hashes.SHA256(), 32, salt=None, info=GATEWAY_KEY_INFO).derive(leader_private_key)
    public = ohttp.key_config_for(private_key, key_id=0, algorithms=ALGORITHMS).public_key
    key_id = hashlib.sha256(public).digest()[0]
    return GatewayKey(ohttp.key_config_for(private_key, key_id=key_id, algorithms=ALGORITHMS), private_key)


def gateway_keys() -> list[GatewayKey]:
    """The current gateway key first, then those of the leader's retired keys it still keeps."""
    return [gateway_key_of(key) for key in [LEADER.private_key(), *LEADER.retired_keys()]]


# How long a process opens capsules with the keys it read, without asking the key store again: two
# queries a capsule were most of the gateway's cost (bench/results/upload_relay.md). A capsule that
# none of them opens is tried again with the keys read afresh, so a rotation is seen by the first
# capsule sealed to the new key; a retired key deleted may still open capsules for up to this long
# (their collections are closed: the upload refuses them).
KEYS_TTL = 1.0
_kept: tuple[float, list[GatewayKey]] = (-math.inf, [])


def _keys(*, fresh: bool = False) -> list[GatewayKey]:
    global _kept
    read_at, keys = _kept
    if fresh or time.monotonic() - read_at > KEYS_TTL:
        keys = gateway_keys()
        _kept = (time.monotonic(), keys)
    return keys


def gateway_key_configs() -> bytes:
    """The ``application/ohttp-keys`` body: the current key's configuration only."""
    return ohttp.key_configs_encode([gateway_key_of(LEADER.private_key()).config])


def _decapsulate(encapsulated: bytes) -> tuple[bytes, ohttp.ResponseKeying]:
    """The inner request and its response keying, with the key its key id names: from the keys this
    process holds, else from the keys read afresh. UnknownKeyId, or DecryptionFailed, if none opens it."""
    try:
        return _open_with(encapsulated, _keys())
    except (ohttp.UnknownKeyId, ohttp.DecryptionFailed):
        return _open_with(encapsulated, _keys(fresh=True))


def _open_with(encapsulated: bytes, keys: list[GatewayKey]) -> tuple[bytes, ohttp.ResponseKeying]:
    """Two keys may share an id (one byte of a hash): each is tried, and a capsule that opens with
    none is refused."""
    key_id = ohttp.request_key_id(encapsulated)
    candidates = [key for key in keys if key.config.key_id == key_id]
    if not candidates:
        raise ohttp.UnknownKeyId(f"key id {key_id} is not this gateway's")
    for key in candidates[:-1]:
        try:
            return ohttp.request_decapsulate(encapsulated, config=key.config, private_key=key.private_key)
        except ohttp.DecryptionFailed:
            continue
    last = candidates[-1]
    return ohttp.request_decapsulate(encapsulated, config=last.config, private_key=last.private_key)


def gateway_answer(meta: Mapping[str, Any], encapsulated: bytes) -> bytes | Refusal:
    """The encapsulated response to one encapsulated request, or the Refusal of one that does not open.

    ``meta``: the outer request's (the relay's address is what the upload rate counts).
    """
    try:
        inner, keying = _decapsulate(encapsulated)
    except (ohttp.UnknownKeyId, ohttp.UnsupportedAlgorithm) as error:
        # RFC 9458 Section 6.6: the key configuration is outdated or wrong; the client may refetch it
        problem = {"type": "https://iana.org/assignments/http-problem-types#ohttp-key", "title": str(error)}
        return Refusal(HTTPStatus.BAD_REQUEST, problem, "application/problem+json")
    except ohttp.OhttpError as error:
        return Refusal(HTTPStatus.BAD_REQUEST, error_body(str(error), "ohttp_invalid"))
    return ohttp.response_encapsulate(keying, bhttp.response_encode(_inner_answer(meta, inner)))


def _inner_answer(meta: Mapping[str, Any], inner: bytes) -> bhttp.Response:
    """The answer to the opened request: the upload's, or a refusal sealed like it (Section 5.2)."""
    try:
        request = bhttp.request_decode(inner)
    except bhttp.BinaryHttpError as error:
        return _json_response(HTTPStatus.BAD_REQUEST, error_body(f"Not a Binary HTTP request: {error}", "invalid"))
    if request.method != INNER_METHOD or request.path != INNER_PATH:
        detail = f"This gateway serves POST {intake.UPLOAD_PATH} only."
        return _json_response(HTTPStatus.NOT_FOUND, error_body(detail, "not_found"))
    headers = {name.lower(): value for name, value in request.headers}
    if b"100-continue" in headers.get(b"expect", b"").lower():  # RFC 9458 Section 5.1: an error
        return _json_response(HTTPStatus.BAD_REQUEST, error_body("Expect: 100-continue is refused.", "invalid"))
    upload_meta = {**meta, "CONTENT_LENGTH": str(len(request.content))}
    try:
        answer = intake.upload_answer(upload_meta, lambda _size: request.content)
    except Exception:  # after the capsule opened, even a crash is answered sealed (Section 5.2)
        logger.exception("Unhandled exception in the upload path, through the gateway")
        return _json_response(HTTPStatus.INTERNAL_SERVER_ERROR, server_error_body())
    return _json_response(answer.status, answer.body, answer.headers)


def _json_response(status: int, body: dict[str, Any], headers: Mapping[str, str] | None = None) -> bhttp.Response:
    fields = [(b"content-type", b"application/json")]
    fields += [(name.lower().encode(), value.encode()) for name, value in (headers or {}).items()]
    return bhttp.Response(status=int(status), headers=tuple(fields), content=json.dumps(body).encode())
