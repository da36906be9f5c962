"""Oblivious HTTP (RFC 9458): key configurations and the encapsulation of requests and responses.

A client seals a Binary HTTP request (``pfs_device.bhttp``) to an Oblivious Gateway's HPKE key and
sends it through a relay, which sees the client's address but not the message; the gateway sees the
message but not the address. This module is the cryptography of both ends, no transport:

- key configurations (Section 3) and their ``application/ohttp-keys`` list (Section 3.2);
- ``request_encapsulate`` (client) and ``request_decapsulate`` (gateway), Section 4.3: HPKE base
  mode, ``info = "message/bhttp request" || 0x00 || hdr``, empty aad, encapsulated request
  ``hdr || enc || ct`` with ``hdr = key_id || kem_id || kdf_id || aead_id``;
- ``response_encapsulate`` (gateway) and ``response_decapsulate`` (client), Section 4.4: a secret
  exported from the request's HPKE context, a random response nonce, HKDF to an AEAD key and nonce,
  encapsulated response ``response_nonce || ct``.

HPKE is ``pyhpke`` (as ``pfs_device.hpke``), HKDF and the AEADs ``cryptography``. Suites: KEM
DHKEM(X25519, HKDF-SHA256), KDF HKDF-SHA256, AEAD AES-128-GCM (RFC 9458 Appendix A's), AES-256-GCM
and ChaCha20-Poly1305 (the project's share suite). Anything else is refused with
``UnsupportedAlgorithm``; a request to a key id the gateway does not hold with ``UnknownKeyId``;
bytes that do not open with ``DecryptionFailed``.

``ephemeral_private_key`` and ``response_nonce`` exist so RFC 9458 Appendix A can be reproduced byte
for byte (tests/unit/test_ohttp.py); in use both are drawn fresh, and reusing either breaks the
privacy and the confidentiality the protocol gives.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import x25519
from cryptography.hazmat.primitives.ciphers.aead import AESGCM, ChaCha20Poly1305
from cryptography.hazmat.primitives.kdf.hkdf import HKDF, HKDFExpand
from pyhpke import AEADId, CipherSuite, KDFId, KEMId, KEMKeyPair, PyHPKEError

KEYS_MEDIA_TYPE = "application/ohttp-keys"
REQUEST_MEDIA_TYPE = "message/ohttp-req"
RESPONSE_MEDIA_TYPE = "message/ohttp-res"

REQUEST_LABEL = b"message/bhttp request"
RESPONSE_LABEL = b"message/bhttp response"

KEM_X25519_SHA256 = 0x0020
KDF_HKDF_SHA256 = 0x0001
AEAD_AES_128_GCM = 0x0001
AEAD_AES_256_GCM = 0x0002
AEAD_CHACHA20_POLY1305 = 0x0003

# Npk and Nenc of DHKEM(X25519, HKDF-SHA256) (RFC 9180 Section 7.1): both 32 bytes.
_KEMS = {KEM_X25519_SHA256: (KEMId.DHKEM_X25519_HKDF_SHA256, 32)}
_KDFS = {KDF_HKDF_SHA256: (KDFId.HKDF_SHA256, hashes.SHA256)}
# Per AEAD: pyhpke's id, Nk, Nn (RFC 9180 Section 7.3), cryptography's class.
_AEADS = {
    AEAD_AES_128_GCM: (AEADId.AES128_GCM, 16, 12, AESGCM),
    AEAD_AES_256_GCM: (AEADId.AES256_GCM, 32, 12, AESGCM),
    AEAD_CHACHA20_POLY1305: (AEADId.CHACHA20_POLY1305, 32, 12, ChaCha20Poly1305),
}
TAG_BYTES = 16  # Nt of all three AEADs
HEADER_BYTES = 7  # key id (1) || KEM id (2) || KDF id (2) || AEAD id (2)


class OhttpError(ValueError):
    """An Oblivious HTTP message or key configuration this module refuses."""


class MalformedKeyConfig(OhttpError):
    """A key configuration, or the list of them, that does not parse."""


class MalformedMessage(OhttpError):
    """An encapsulated request or response too short or badly framed to be opened."""


class UnknownKeyId(OhttpError):
    """An encapsulated request to a key id the gateway does not hold."""


class UnsupportedAlgorithm(OhttpError):
    """A KEM, KDF or AEAD this module does not implement, or the key configuration does not offer."""


class DecryptionFailed(OhttpError):
    """The ciphertext does not open: altered, truncated inside the ciphertext, or sealed to another key
    or for another request. Every such cause is this one error, so they cannot be told apart."""


@dataclass(frozen=True)
class KeyConfig:
    """One key configuration (RFC 9458 Section 3.1): a key id, a KEM and its public key, and the
    (KDF, AEAD) pairs the gateway accepts with it."""

    key_id: int
    kem_id: int
    public_key: bytes
    algorithms: tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class ResponseKeying:
    """What both ends keep of a request to seal or open its response (RFC 9458 Section 4.4): the
    AEAD, the request's encapsulated key and the secret exported from its HPKE context."""

    aead_id: int
    enc: bytes
    secret: bytes


# ---- suites ----


def _suite(kem_id: int, kdf_id: int, aead_id: int) -> CipherSuite:
    """The pyhpke suite of these ids; UnsupportedAlgorithm naming the first unknown one."""
    if kem_id not in _KEMS:
        raise UnsupportedAlgorithm(f"KEM 0x{kem_id:04x} is not supported")
    if kdf_id not in _KDFS:
        raise UnsupportedAlgorithm(f"KDF 0x{kdf_id:04x} is not supported")
    if aead_id not in _AEADS:
        raise UnsupportedAlgorithm(f"AEAD 0x{aead_id:04x} is not supported")
    return CipherSuite.new(_KEMS[kem_id][0], _KDFS[kdf_id][0], _AEADS[aead_id][0])


def _header(key_id: int, kem_id: int, kdf_id: int, aead_id: int) -> bytes:
    return bytes([key_id]) + kem_id.to_bytes(2, "big") + kdf_id.to_bytes(2, "big") + aead_id.to_bytes(2, "big")


def request_info(header: bytes) -> bytes:
    """The HPKE info of an encapsulated request: ``"message/bhttp request" || 0x00 || hdr``."""
    return REQUEST_LABEL + b"\x00" + header


# ---- key configurations (Section 3) ----


def key_config_encode(config: KeyConfig) -> bytes:
    """One key configuration, without the 2-byte length of the ``application/ohttp-keys`` list."""
    if not 0 <= config.key_id <= 0xFF:
        raise ValueError(f"key id {config.key_id} is not one byte")
    if not config.algorithms:
        raise ValueError("a key configuration offers at least one (KDF, AEAD) pair")
    algorithms = b"".join(kdf.to_bytes(2, "big") + aead.to_bytes(2, "big") for kdf, aead in config.algorithms)
    return (
        bytes([config.key_id])
        + config.kem_id.to_bytes(2, "big")
        + config.public_key
        + len(algorithms).to_bytes(2, "big")
        + algorithms
    )


def key_config_decode(data: bytes) -> KeyConfig:
    """One key configuration; MalformedKeyConfig if it is cut short, overlong or badly sized,
    UnsupportedAlgorithm for a KEM whose public key length this module does not know."""
    if len(data) < 3:
        raise MalformedKeyConfig(f"a key configuration of {len(data)} bytes is too short for its key id and KEM")
    key_id, kem_id = data[0], int.from_bytes(data[1:3], "big")
    if kem_id not in _KEMS:
        raise UnsupportedAlgorithm(f"KEM 0x{kem_id:04x} is not supported")
    key_end = 3 + _KEMS[kem_id][1]
    if len(data) < key_end + 2:
        raise MalformedKeyConfig("a key configuration is truncated in its public key or algorithms length")
    public_key = data[3:key_end]
    length = int.from_bytes(data[key_end : key_end + 2], "big")
    algorithms = data[key_end + 2 :]
    if length != len(algorithms) or length < 4 or length % 4:
        raise MalformedKeyConfig(
            f"symmetric algorithms of length {length} (a multiple of 4, at least 4) with {len(algorithms)} bytes"
        )
    pairs = tuple(
        (int.from_bytes(algorithms[i : i + 2], "big"), int.from_bytes(algorithms[i + 2 : i + 4], "big"))
        for i in range(0, length, 4)
    )
    return KeyConfig(key_id=key_id, kem_id=kem_id, public_key=public_key, algorithms=pairs)


def key_configs_encode(configs: list[KeyConfig]) -> bytes:
    """An ``application/ohttp-keys`` body: each configuration after its 2-byte length (Section 3.2)."""
    encoded = (key_config_encode(config) for config in configs)
    return b"".join(len(config).to_bytes(2, "big") + config for config in encoded)


def key_configs_decode(data: bytes) -> list[KeyConfig]:
    """The configurations of an ``application/ohttp-keys`` body, in order. A client ignores the ones
    it does not support (Section 3.2): they are left out here, malformed framing is refused."""
    configs, offset = [], 0
    while offset < len(data):
        if offset + 2 > len(data):
            raise MalformedKeyConfig(f"truncated: a key configuration length at byte {offset}")
        length = int.from_bytes(data[offset : offset + 2], "big")
        body = data[offset + 2 : offset + 2 + length]
        if len(body) != length:
            raise MalformedKeyConfig(f"truncated: a key configuration of {length} bytes at byte {offset}")
        try:
            configs.append(key_config_decode(body))
        except UnsupportedAlgorithm:
            pass
        offset += 2 + length
    if not configs:
        raise MalformedKeyConfig("no supported key configuration")
    return configs


def key_config_for(private_key: bytes, *, key_id: int, algorithms: tuple[tuple[int, int], ...]) -> KeyConfig:
    """The X25519 key configuration of a raw 32-byte private key."""
    public_key = x25519.X25519PrivateKey.from_private_bytes(private_key).public_key().public_bytes_raw()
    return KeyConfig(key_id=key_id, kem_id=KEM_X25519_SHA256, public_key=public_key, algorithms=algorithms)


# ---- requests (Section 4.3) ----


def _choose(config: KeyConfig, kdf_id: int | None, aead_id: int | None) -> tuple[int, int]:
    """The (KDF, AEAD) pair to use: the asked one if the configuration offers it, else its first
    supported one."""
    for kdf, aead in config.algorithms:
        if (kdf_id is None or kdf == kdf_id) and (aead_id is None or aead == aead_id):
            if kdf in _KDFS and aead in _AEADS:
                return kdf, aead
    raise UnsupportedAlgorithm(f"key {config.key_id} offers no supported KDF/AEAD pair matching {kdf_id}/{aead_id}")


def _ephemeral_pair(suite: CipherSuite, private_key: bytes) -> KEMKeyPair:
    public_key = x25519.X25519PrivateKey.from_private_bytes(private_key).public_key().public_bytes_raw()
    return KEMKeyPair(suite.kem.deserialize_private_key(private_key), suite.kem.deserialize_public_key(public_key))


def _response_secret(context, aead_id: int) -> bytes:
    """``Export("message/bhttp response", max(Nn, Nk))`` of the request's HPKE context."""
    _, key_bytes, nonce_bytes, _ = _AEADS[aead_id]
    return context.export(RESPONSE_LABEL, max(key_bytes, nonce_bytes))


def request_encapsulate(
    config: KeyConfig,
    message: bytes,
    *,
    kdf_id: int | None = None,
    aead_id: int | None = None,
    ephemeral_private_key: bytes | None = None,
) -> tuple[bytes, ResponseKeying]:
    """(encapsulated request, keying for its response) of a Binary HTTP ``message`` for ``config``.

    ``ephemeral_private_key`` is for test vectors only: left out, HPKE draws a fresh one.
    """
    kdf_id, aead_id = _choose(config, kdf_id, aead_id)
    suite = _suite(config.kem_id, kdf_id, aead_id)
    header = _header(config.key_id, config.kem_id, kdf_id, aead_id)
    try:
        recipient = suite.kem.deserialize_public_key(config.public_key)
    except (PyHPKEError, ValueError) as error:
        raise MalformedKeyConfig(f"key {config.key_id}: its public key does not decode ({error})") from None
    ephemeral = None if ephemeral_private_key is None else _ephemeral_pair(suite, ephemeral_private_key)
    enc, context = suite.create_sender_context(recipient, request_info(header), eks=ephemeral)
    ciphertext = context.seal(message, b"")
    return header + enc + ciphertext, ResponseKeying(aead_id, enc, _response_secret(context, aead_id))


def request_key_id(encapsulated: bytes) -> int:
    """The key id an encapsulated request names, so a gateway holding several keys picks one."""
    if not encapsulated:
        raise MalformedMessage("an empty encapsulated request")
    return encapsulated[0]


def request_decapsulate(encapsulated: bytes, *, config: KeyConfig, private_key: bytes) -> tuple[bytes, ResponseKeying]:
    """(Binary HTTP request, keying for its response) of an encapsulated request to ``config``.

    UnknownKeyId for another key id, UnsupportedAlgorithm for a suite ``config`` does not offer,
    MalformedMessage if it is too short, DecryptionFailed if it does not open.
    """
    if len(encapsulated) < HEADER_BYTES:
        raise MalformedMessage(f"truncated: an encapsulated request of {len(encapsulated)} bytes has no header")
    key_id = encapsulated[0]
    kem_id, kdf_id, aead_id = (int.from_bytes(encapsulated[i : i + 2], "big") for i in (1, 3, 5))
    if key_id != config.key_id:
        raise UnknownKeyId(f"key id {key_id} is not this gateway's ({config.key_id})")
    if kem_id != config.kem_id or (kdf_id, aead_id) not in config.algorithms:
        raise UnsupportedAlgorithm(
            f"key {key_id} is not offered with KEM 0x{kem_id:04x}, KDF 0x{kdf_id:04x}, AEAD 0x{aead_id:04x}"
        )
    suite = _suite(kem_id, kdf_id, aead_id)
    enc_end = HEADER_BYTES + _KEMS[kem_id][1]
    if len(encapsulated) < enc_end + TAG_BYTES:
        raise MalformedMessage(
            f"truncated: an encapsulated request of {len(encapsulated)} bytes, at least {enc_end + TAG_BYTES}"
        )
    header, enc, ciphertext = encapsulated[:HEADER_BYTES], encapsulated[HEADER_BYTES:enc_end], encapsulated[enc_end:]
    try:
        context = suite.create_recipient_context(
            enc, suite.kem.deserialize_private_key(private_key), request_info(header)
        )
        message = context.open(ciphertext, b"")
    except (PyHPKEError, ValueError) as error:  # cryptography's X25519 raises ValueError (low-order enc)
        raise DecryptionFailed(f"the encapsulated request does not open ({type(error).__name__})") from None
    return message, ResponseKeying(aead_id, enc, _response_secret(context, aead_id))


# ---- responses (Section 4.4) ----


def response_keys(keying: ResponseKeying, response_nonce: bytes) -> tuple[bytes, bytes, bytes]:
    """(prk, AEAD key, AEAD nonce) of a response (RFC 9458 Section 4.4), with HKDF-SHA256, the only
    KDF supported: ``prk = Extract(enc || response_nonce, secret)``, ``Expand(prk, "key", Nk)``,
    ``Expand(prk, "nonce", Nn)``."""
    _, key_bytes, nonce_bytes, _ = _AEADS[keying.aead_id]
    prk = HKDF.extract(hashes.SHA256(), keying.enc + response_nonce, keying.secret)
    key = HKDFExpand(hashes.SHA256(), key_bytes, b"key").derive(prk)
    nonce = HKDFExpand(hashes.SHA256(), nonce_bytes, b"nonce").derive(prk)
    return prk, key, nonce


def _response_aead(keying: ResponseKeying, response_nonce: bytes):
    """The AEAD, keyed, and its nonce for a response."""
    _, key, nonce = response_keys(keying, response_nonce)
    return _AEADS[keying.aead_id][3](key), nonce


def response_nonce_bytes(aead_id: int) -> int:
    """The length of a response nonce, ``max(Nn, Nk)``."""
    _, key_bytes, nonce_bytes, _ = _AEADS[aead_id]
    return max(key_bytes, nonce_bytes)


def response_encapsulate(keying: ResponseKeying, message: bytes, *, response_nonce: bytes | None = None) -> bytes:
    """The encapsulated response ``response_nonce || ct`` of a Binary HTTP ``message``.

    ``response_nonce`` is for test vectors only: left out, it is drawn from the OS CSPRNG.
    """
    length = response_nonce_bytes(keying.aead_id)
    if response_nonce is None:
        response_nonce = os.urandom(length)
    if len(response_nonce) != length:
        raise ValueError(f"a response nonce is {length} bytes, not {len(response_nonce)}")
    aead, nonce = _response_aead(keying, response_nonce)
    return response_nonce + aead.encrypt(nonce, message, b"")


def response_decapsulate(keying: ResponseKeying, encapsulated: bytes) -> bytes:
    """The Binary HTTP response of an encapsulated response to the request ``keying`` came from.

    MalformedMessage if it is too short, DecryptionFailed if it does not open (altered, or the
    response to another request).
    """
    length = response_nonce_bytes(keying.aead_id)
    if len(encapsulated) < length + TAG_BYTES:
        raise MalformedMessage(
            f"truncated: an encapsulated response of {len(encapsulated)} bytes, at least {length + TAG_BYTES}"
        )
    aead, nonce = _response_aead(keying, encapsulated[:length])
    try:
        return aead.decrypt(nonce, encapsulated[length:], b"")
    except InvalidTag:
        raise DecryptionFailed("the encapsulated response does not open") from None
