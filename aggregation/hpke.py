"""HPKE (RFC 9180) for report shares: each share is sealed to one aggregator's public key.

Suite: DHKEM(X25519, HKDF-SHA256), HKDF-SHA256, ChaCha20-Poly1305, via the ``pyhpke`` package.
The HPKE ``info`` binds a ciphertext to its collection and its aggregator, so a share sealed for
another round, or for the other aggregator, does not open.
"""

from __future__ import annotations

import os

from pyhpke import AEADId, CipherSuite, KDFId, KEMId

SUITE = CipherSuite.new(KEMId.DHKEM_X25519_HKDF_SHA256, KDFId.HKDF_SHA256, AEADId.CHACHA20_POLY1305)


class OpenFailed(ValueError):
    """The ciphertext does not open with this key and info."""


def key_pair_generate() -> tuple[bytes, bytes]:
    """A fresh (private, public) key pair, raw 32-byte X25519 keys."""
    pair = SUITE.kem.derive_key_pair(os.urandom(32))
    return pair.private_key.to_private_bytes(), pair.public_key.to_public_bytes()


def share_info(collection_key: str, role: str) -> bytes:
    return f"pfs-studio report share v1|{role}|{collection_key}".encode()


def seal(public_key: bytes, plaintext: bytes, info: bytes) -> tuple[bytes, bytes]:
    """(encapsulated key, ciphertext) of ``plaintext`` for the holder of ``public_key``."""
    enc, context = SUITE.create_sender_context(SUITE.kem.deserialize_public_key(public_key), info=info)
    return enc, context.seal(plaintext)


def open_sealed(private_key: bytes, enc: bytes, ciphertext: bytes, info: bytes) -> bytes:
    try:
        context = SUITE.create_recipient_context(enc, SUITE.kem.deserialize_private_key(private_key), info=info)
        return context.open(ciphertext)
    except Exception as error:  # pyhpke raises its own and pyca's errors for every kind of garbage
        raise OpenFailed(str(error) or type(error).__name__) from None
