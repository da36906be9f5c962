"""HPKE (RFC 9180) for report shares: each share is sealed to one aggregator's public key.

Suite: DHKEM(X25519, HKDF-SHA256), HKDF-SHA256, ChaCha20-Poly1305 (RFC 9180 Section 7: KEM 0x0020,
KDF 0x0001, AEAD 0x0003), base mode, through the single-shot API of ``cryptography``'s HPKE
(Section 6.1: SealBase / OpenBase). The wire format is the one used before the move to
``cryptography``: a 32-byte encapsulated key and the AEAD ciphertext (plaintext length + 16-byte
tag), kept apart.

The HPKE ``info`` binds a ciphertext to its collection and its aggregator, so a share sealed for
another round, or for the other aggregator, does not open.

Additional authenticated data (``aad``) is bound through the key schedule, not the AEAD: RFC 9180
Section 8.1 tells applications that use only the single-shot API to put auxiliary authenticated
information in the Setup ``info``, and ``cryptography`` follows it by exposing no ``aad`` argument
(pyca/cryptography #14203). So a non-empty ``aad`` is folded into the info (``_setup_info``); an
empty one leaves the info exactly as before, so every share sealed without aad still opens. Another
implementation interoperates by computing the same info and sealing with an empty AEAD aad.
"""

from __future__ import annotations

import json

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hpke
from cryptography.hazmat.primitives.asymmetric import x25519

SUITE = hpke.Suite(hpke.KEM.X25519, hpke.KDF.HKDF_SHA256, hpke.AEAD.CHACHA20_POLY1305)
ENC_BYTES = hpke.KEM.X25519.enc_length()  # Nenc = 32 for DHKEM(X25519, HKDF-SHA256), RFC 9180 Section 7.1
# Starts every info that carries aad; share_info's infos (and any info this project builds) start
# with other bytes, so an info with aad never equals an info without.
_AAD_LABEL = b"pfs-studio hpke aad v1"


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


def share_info(collection_key: str, role: str, *, batch_key: str, token_digest: str) -> bytes:
    """The HPKE info of one report's share: its aggregator, collection, batch and token, unambiguously
    encoded (a JSON array). A share sealed for another report does not open under this one's
    envelope: replayed under another token, or moved into another batch, it fails to open."""
    return json.dumps(["pfs-studio report share v2", role, collection_key, batch_key, token_digest]).encode()


def _setup_info(info: bytes, aad: bytes) -> bytes:
    """The Setup info that authenticates ``aad`` too (RFC 9180 Section 8.1).

    ``label || I2OSP(len(info), 4) || info || aad``: the length prefix makes the split between
    info and aad unambiguous, so no two (info, aad) pairs share a key schedule.
    """
    if not aad:
        return info
    return _AAD_LABEL + len(info).to_bytes(4, "big") + info + aad


def seal(public_key: bytes, plaintext: bytes, info: bytes, *, aad: bytes = b"") -> tuple[bytes, bytes]:
    """(encapsulated key, ciphertext) of ``plaintext`` for the holder of ``public_key`` (SealBase).

    Raises ValueError for a public key that is not 32 bytes.
    """
    recipient = x25519.X25519PublicKey.from_public_bytes(public_key)
    # The single-shot API returns enc || ct (RFC 9180 Section 6.1 returns the pair); enc has a fixed length.
    sealed = SUITE.encrypt(plaintext, recipient, info=_setup_info(info, aad))
    return sealed[:ENC_BYTES], sealed[ENC_BYTES:]


def open_sealed(private_key: bytes, enc: bytes, ciphertext: bytes, info: bytes, *, aad: bytes = b"") -> bytes:
    """The plaintext of ``(enc, ciphertext)`` (OpenBase); OpenFailed if it does not open.

    Every failure — a malformed key or enc, a low-order enc, a wrong key, info or aad, a
    truncated or altered ciphertext — is the same OpenFailed, so a caller cannot tell them apart.
    """
    # Checked here because cryptography takes enc || ct as one string: a short enc would
    # otherwise borrow bytes from the ciphertext instead of failing.
    if len(enc) != ENC_BYTES:
        raise OpenFailed(f"the encapsulated key must be {ENC_BYTES} bytes")
    try:
        recipient = x25519.X25519PrivateKey.from_private_bytes(private_key)
        return SUITE.decrypt(enc + ciphertext, recipient, info=_setup_info(info, aad))
    except (InvalidTag, ValueError) as error:
        raise OpenFailed(str(error) or type(error).__name__) from None
