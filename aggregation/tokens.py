"""Anonymous single-use tokens: RSA full-domain-hash blind signatures (Chaum 1982).

The device picks a random nonce, blinds the token message with a random factor and asks the
issuer to sign. The issuer checks the device (attestation) and its rate limit — one token per device
per collection — but sees only the blinded message, so the token it signed cannot be linked back to
the device when an aggregator sees it (seed 003, Section 4.3; Privacy Pass's blind RSA tokens work
the same way with a PSS encoding instead of a full-domain hash).

The token message names the collection, so a token is good for one collection only; each
aggregator keeps the digests of tokens it has accepted there, so it is good for one report only.
"""

from __future__ import annotations

import hashlib
import math
import secrets
from dataclasses import dataclass

from cryptography.hazmat.primitives.asymmetric import rsa

KEY_BITS = 2048
NONCE_BYTES = 32


@dataclass(frozen=True)
class IssuerPublicKey:
    modulus: int
    exponent: int

    @property
    def size(self) -> int:
        return (self.modulus.bit_length() + 7) // 8


@dataclass(frozen=True)
class IssuerPrivateKey:
    public: IssuerPublicKey
    prime_p: int
    prime_q: int

    def sign(self, value: int) -> int:
        """value^d mod n by the Chinese remainder theorem (about 4x faster than one pow mod n)."""
        p, q, e = self.prime_p, self.prime_q, self.public.exponent
        s_p = pow(value % p, pow(e, -1, p - 1), p)
        s_q = pow(value % q, pow(e, -1, q - 1), q)
        return s_q + q * ((s_p - s_q) * pow(q, -1, p) % p)


@dataclass(frozen=True)
class Token:
    nonce: bytes
    signature: bytes

    @property
    def digest(self) -> str:
        """What an aggregator records to refuse the token a second time."""
        return hashlib.sha256(self.nonce).hexdigest()


def issuer_key_generate(bits: int = KEY_BITS) -> IssuerPrivateKey:
    numbers = rsa.generate_private_key(public_exponent=65537, key_size=bits).private_numbers()
    public = IssuerPublicKey(numbers.public_numbers.n, numbers.public_numbers.e)
    return IssuerPrivateKey(public, numbers.p, numbers.q)


def token_message(collection_key: str, nonce: bytes) -> bytes:
    return b"pfs-studio token v1|" + collection_key.encode() + b"|" + nonce


def _full_domain_hash(message: bytes, key: IssuerPublicKey) -> int:
    """SHA-256 in counter mode (MGF1) stretched past the modulus, reduced mod n."""
    length = key.size + 16  # 128 extra bits make the reduction's bias negligible
    stream = b"".join(
        hashlib.sha256(message + counter.to_bytes(4, "big")).digest() for counter in range(math.ceil(length / 32))
    )
    return int.from_bytes(stream[:length], "big") % key.modulus


def blind(key: IssuerPublicKey, message: bytes) -> tuple[int, int]:
    """(blinded message for the issuer, unblinding factor the device keeps)."""
    while True:
        factor = secrets.randbelow(key.modulus - 2) + 2
        if math.gcd(factor, key.modulus) == 1:
            break
    blinded = _full_domain_hash(message, key) * pow(factor, key.exponent, key.modulus) % key.modulus
    return blinded, pow(factor, -1, key.modulus)


def sign_blinded(key: IssuerPrivateKey, blinded: int) -> int:
    if not 0 < blinded < key.public.modulus:
        raise ValueError("the blinded message must lie in (0, n)")
    return key.sign(blinded)


def unblind(key: IssuerPublicKey, blind_signature: int, unblinding: int, message: bytes) -> bytes:
    """The signature on ``message``; checked, so a misbehaving issuer is caught at once."""
    signature = blind_signature * unblinding % key.modulus
    encoded = signature.to_bytes(key.size, "big")
    if not verify(key, message, encoded):
        raise ValueError("the issuer's blind signature does not verify")
    return encoded


def verify(key: IssuerPublicKey, message: bytes, signature: bytes) -> bool:
    if len(signature) != key.size:
        return False
    value = int.from_bytes(signature, "big")
    return value < key.modulus and pow(value, key.exponent, key.modulus) == _full_domain_hash(message, key)
