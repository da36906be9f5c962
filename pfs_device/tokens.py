"""Anonymous single-use tokens: RSA blind signatures as RFC 9474 specifies them
(RSABSSA-SHA384-PSS-Randomized, pfs_device.blind_rsa), one issuer key per collection.

The device draws the token's nonce first (RFC 9474 Section 4.1's fresh random 32-byte prefix),
seals its report with it (the VDAF nonce and the shares' associated data derive from it), then
prepares the token message — the nonce before "pfs-studio token v3|<collection>|<report digest>"
(pfs_device.wire.report_digest: the report's batch, public share and both sealed shares) — blinds
it and asks the issuer to sign. So a token carries only the report it was issued for: whoever sees
an upload and takes its token cannot put it on a report of their own, which both aggregators
refuse as token_invalid before they look at the token's spent record. The issuer checks the device and its rate limit — one token per device per
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
import secrets
from collections.abc import Callable
from dataclasses import dataclass

from cryptography.hazmat.primitives.asymmetric import rsa

from pfs_device import blind_rsa

KEY_BITS = blind_rsa.KEY_BITS
NONCE_BYTES = blind_rsa.PREFIX_BYTES
REPORT_DIGEST_BYTES = 32  # pfs_device.wire.report_digest: SHA-256
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


def nonce_generate() -> bytes:
    """A fresh token nonce (RFC 9474's msg_prefix), from the OS CSPRNG: the device's first step."""
    return secrets.token_bytes(NONCE_BYTES)


def token_message(collection_key: str, report_digest: bytes) -> bytes:
    """What a token signs after its nonce: the collection and its report (pfs_device.wire.report_digest).
    The digest has a fixed length at the end, so a collection key holding "|" is no ambiguity."""
    if len(report_digest) != REPORT_DIGEST_BYTES:
        raise ValueError(f"a report digest is {REPORT_DIGEST_BYTES} bytes, not {len(report_digest)}")
    return b"pfs-studio token v3|" + collection_key.encode() + b"|" + report_digest


def token_message_unbound(collection_key: str) -> bytes:
    """What the tokens of reports sealed before wire format v4 sign: the collection only. Kept to
    verify the bodies a leader stored before the upgrade (aggregation.aggregators.token_valid)."""
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


def token_blind(*, collection_key: str, nonce: bytes, report_digest: bytes, issuer: IssuerPublicKey) -> Blinding:
    """Prepare and blind the token message of one report (RFC 9474 Sections 4.1 and 4.2): ``nonce``
    is the prefix the report was sealed with."""
    input_msg = blind_rsa.prepare(token_message(collection_key, report_digest), VARIANT, msg_prefix=nonce)
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


def token_obtain(
    *, collection_key: str, nonce: bytes, report_digest: bytes, issuer: IssuerPublicKey, issue: Callable[[int], int]
) -> Token:
    """The token of one report: prepare and blind its message, have ``issue`` sign the blinded
    message (an integer, as the HTTP API carries it), finalize (token_blind, token_finalize)."""
    blinding = token_blind(collection_key=collection_key, nonce=nonce, report_digest=report_digest, issuer=issuer)
    return token_finalize(issuer=issuer, blinding=blinding, blind_sig=issue(blinding.blinded))


def sign_blinded(key: IssuerPrivateKey, blinded: int) -> int:
    """The issuer's blind signature (RFC 9474 BlindSign, which checks what it signed)."""
    if not 0 < blinded < key.public.modulus:
        raise ValueError("the blinded message must lie in (0, n)")
    return int.from_bytes(blind_rsa.blind_sign(key.rsa(), blinded.to_bytes(key.public.size, "big")), "big")


def verify(key: IssuerPublicKey, collection_key: str, token: Token, *, report_digest: bytes) -> bool:
    """The token's signature under the collection's key, over its prefix, the collection and the
    report it came with (``report_digest`` as the verifier recomputed it from what it holds)."""
    if len(report_digest) != REPORT_DIGEST_BYTES:
        return False
    return _verify(key, token, token_message(collection_key, report_digest))


def verify_unbound(key: IssuerPublicKey, collection_key: str, token: Token) -> bool:
    """The signature of a token of a report sealed before wire format v4, over its prefix and the
    collection only (token_message_unbound)."""
    return _verify(key, token, token_message_unbound(collection_key))


def _verify(key: IssuerPublicKey, token: Token, message: bytes) -> bool:
    if len(token.nonce) != NONCE_BYTES or len(token.signature) != key.size:
        return False
    return blind_rsa.verify(key.rsa(), token.nonce + message, token.signature, VARIANT)


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
