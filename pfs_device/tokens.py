"""Anonymous single-use tokens: RSA blind signatures as RFC 9474 specifies them
(RSABSSA-SHA384-PSS-Randomized, pfs_device.blind_rsa), one issuer key per collection.

The device prepares the token message (RFC 9474 Section 4.1: a fresh random 32-byte prefix, which
is also the token's nonce, before "pfs-studio token v2|<collection>"), blinds it and asks the
issuer to sign. The issuer checks the device and its rate limit — one token per device per
collection — but sees only the blinded message, so it cannot link the token it signed to the
device when an aggregator sees it (seed 003, Section 4.3).

A token is good for one collection because each collection has its own key: a device that asks
in collection X for a signature over a message naming Y gets a signature by X's key, which Y's
key does not verify. Every device is served the same key for a collection, and the task it
fetches commits to it (``DeviceTask.token_key``, the SHA-256 of the key): a device refuses a key
that differs, so a server cannot hand each device its own key to link tokens to devices. Each
aggregator keeps the digests of the tokens it accepted, so a token is good for one report.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable
from dataclasses import dataclass

from cryptography.hazmat.primitives.asymmetric import rsa

from pfs_device import blind_rsa

KEY_BITS = blind_rsa.KEY_BITS
NONCE_BYTES = blind_rsa.PREFIX_BYTES
VARIANT = blind_rsa.PSS_RANDOMIZED


@dataclass(frozen=True)
class IssuerPublicKey:
    modulus: int
    exponent: int

    @property
    def size(self) -> int:
        return (self.modulus.bit_length() + 7) // 8

    def rsa(self) -> rsa.RSAPublicKey:
        return _public_key(self.modulus, self.exponent)

    @property
    def digest(self) -> str:
        """What a task commits to: the SHA-256 of the key's DER (SubjectPublicKeyInfo), hex."""
        return hashlib.sha256(blind_rsa.public_key_to_der(self.rsa())).hexdigest()


@dataclass(frozen=True)
class IssuerPrivateKey:
    public: IssuerPublicKey
    prime_p: int
    prime_q: int

    def rsa(self) -> rsa.RSAPrivateKey:
        return _private_key(self.public.modulus, self.public.exponent, self.prime_p, self.prime_q)


@dataclass(frozen=True)
class Token:
    nonce: bytes  # RFC 9474's random message prefix: 32 fresh bytes per token
    signature: bytes

    @property
    def digest(self) -> str:
        """What an aggregator records to refuse the token a second time."""
        return hashlib.sha256(self.nonce).hexdigest()


def issuer_key_generate(bits: int = KEY_BITS) -> IssuerPrivateKey:
    numbers = blind_rsa.key_generate(bits).private_numbers()
    public = IssuerPublicKey(numbers.public_numbers.n, numbers.public_numbers.e)
    return IssuerPrivateKey(public, numbers.p, numbers.q)


def token_message(collection_key: str) -> bytes:
    return b"pfs-studio token v2|" + collection_key.encode()


@dataclass(frozen=True)
class Blinding:
    """A token request in flight: the prepared message (its first NONCE_BYTES are the token's
    nonce), the blinded message the issuer signs, and the blind inverse the device keeps secret.
    A device stores it before sending ``blinded`` (pfs_device.sdk.ledger), so that a device stopped
    before the answer came asks again with the same blinded message, and can unblind the answer."""

    input_msg: bytes
    blinded: int
    inv: int


def token_blind(*, collection_key: str, issuer: IssuerPublicKey) -> Blinding:
    """Prepare and blind a token message for one collection (RFC 9474 Sections 4.1 and 4.2)."""
    input_msg = blind_rsa.prepare(token_message(collection_key), VARIANT)
    blinded_msg, inv = blind_rsa.blind(issuer.rsa(), input_msg, VARIANT)
    return Blinding(input_msg=input_msg, blinded=int.from_bytes(blinded_msg, "big"), inv=inv)


def token_finalize(*, issuer: IssuerPublicKey, blinding: Blinding, blind_sig: int) -> Token:
    """The token from the issuer's blind signature (RFC 9474 Section 4.4, which verifies it, so a
    misbehaving issuer is caught at once: blind_rsa.BlindRSAError)."""
    if not 0 <= blind_sig < issuer.modulus:
        raise blind_rsa.UnexpectedInputSize("the issuer's blind signature is not below the modulus")
    signature = blind_rsa.finalize(
        issuer.rsa(), blinding.input_msg, blind_sig.to_bytes(issuer.size, "big"), blinding.inv, VARIANT
    )
    return Token(nonce=blinding.input_msg[:NONCE_BYTES], signature=signature)


def token_obtain(*, collection_key: str, issuer: IssuerPublicKey, issue: Callable[[int], int]) -> Token:
    """A token for one collection: prepare and blind its message, have ``issue`` sign the blinded
    message (an integer, as the HTTP API carries it), finalize (token_blind, token_finalize)."""
    blinding = token_blind(collection_key=collection_key, issuer=issuer)
    return token_finalize(issuer=issuer, blinding=blinding, blind_sig=issue(blinding.blinded))


def sign_blinded(key: IssuerPrivateKey, blinded: int) -> int:
    """The issuer's blind signature (RFC 9474 BlindSign, which checks what it signed)."""
    if not 0 < blinded < key.public.modulus:
        raise ValueError("the blinded message must lie in (0, n)")
    return int.from_bytes(blind_rsa.blind_sign(key.rsa(), blinded.to_bytes(key.public.size, "big")), "big")


def verify(key: IssuerPublicKey, collection_key: str, token: Token) -> bool:
    """The token's signature under the collection's key, over its prefix and the collection."""
    if len(token.nonce) != NONCE_BYTES or len(token.signature) != key.size:
        return False
    return blind_rsa.verify(key.rsa(), token.nonce + token_message(collection_key), token.signature, VARIANT)


@functools.lru_cache(maxsize=256)
def _public_key(modulus: int, exponent: int) -> rsa.RSAPublicKey:
    return rsa.RSAPublicNumbers(exponent, modulus).public_key()


@functools.lru_cache(maxsize=64)
def _private_key(modulus: int, exponent: int, p: int, q: int) -> rsa.RSAPrivateKey:
    d = rsa.rsa_recover_private_exponent(exponent, p, q)
    numbers = rsa.RSAPrivateNumbers(
        p=p,
        q=q,
        d=d,
        dmp1=rsa.rsa_crt_dmp1(d, p),
        dmq1=rsa.rsa_crt_dmq1(d, q),
        iqmp=rsa.rsa_crt_iqmp(p, q),
        public_numbers=rsa.RSAPublicNumbers(exponent, modulus),
    )
    return numbers.private_key()
