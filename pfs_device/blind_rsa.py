"""RSA blind signatures, RFC 9474 (RSABSSA): the four SHA-384 variants of Section 5. No Django.

The protocol (RFC 9474 Section 4), between a client (a device) and a server (the token issuer)::

    input_msg = prepare(msg, variant)                                 # client, Section 4.1
    blinded_msg, inv = blind(public_key, input_msg, variant)          # client, Section 4.2
    blind_sig = blind_sign(private_key, blinded_msg)                  # server, Section 4.3
    sig = finalize(public_key, input_msg, blind_sig, inv, variant)    # client, Section 4.4
    verify(public_key, input_msg, sig, variant)                       # anyone, Section 4.5

The server sees only ``blinded_msg``, a uniformly random residue mod n whatever the message, so
it cannot link ``sig`` to the request that produced it. ``sig`` is a standard RSASSA-PSS signature
(RFC 8017 Section 8.1) over ``input_msg``: SHA-384, MGF1 with SHA-384, the variant's salt length.
With a randomized variant, ``input_msg`` starts with a 32-byte random prefix that the verifier needs
too (it is part of the signed message).

Keys are ``cryptography`` RSA keys (``rsa.RSAPrivateKey`` / ``rsa.RSAPublicKey``); generation,
serialization and the PSS check of Finalize and Verify are ``cryptography``'s. The RSA arithmetic
of Blind, BlindSign and Finalize is Python ints, because ``cryptography`` exposes no raw RSA, and
EMSA-PSS-ENCODE (RFC 8017 Section 9.1.1) is written here because Blind must encode before it
signs anything.

Side channels (RFC 9474 Section 7, "Timing Side Channels and Fault Attacks"): Python's ints are not
constant time — multiplication, reduction and ``pow`` take time that depends on the operands'
values and sizes, and ``pow`` walks the exponent's bits. So:

- BlindSign (server) works on the private exponents. It applies base blinding (the RFC's SHOULD):
  it exponentiates ``m * b^e`` for a fresh random ``b``, never the client-chosen ``m``, which
  removes the correlation between an attacker's input and the timing, but not the dependence on
  the exponents themselves. It checks its result (``s^e == m``) before returning, the RFC's MUST
  against fault attacks on the CRT. A deployment that signs for untrusted clients at volume should
  keep the key behind an HSM or a constant-time RSA implementation.
- Blind and Finalize (client) handle ``r`` and ``inv``; variable timing there leaks to an observer
  of the device's own CPU, and only the blinding, not a key.
"""

from __future__ import annotations

import hashlib
import math
import secrets
from dataclasses import dataclass

from cryptography.exceptions import InvalidSignature as _PSSInvalid
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

KEY_BITS = 2048
PUBLIC_EXPONENT = 65537
HASH_BYTES = 48  # SHA-384
PREFIX_BYTES = 32  # PrepareRandomize's msgPrefix, Section 4.1
# Blind draws r uniformly from [1, n); it is not invertible only if it shares a factor with n, a
# chance of about 2^-1000 for a 2,048-bit n, so a few retries stand for "SHOULD retry" (Section 4.2).
_BLIND_ATTEMPTS = 8


@dataclass(frozen=True)
class Variant:
    """A named RSABSSA variant (RFC 9474 Section 5): SHA-384, MGF1-SHA-384, a salt length, a Prepare."""

    name: str
    salt_length: int
    randomized: bool


PSS_RANDOMIZED = Variant("RSABSSA-SHA384-PSS-Randomized", salt_length=HASH_BYTES, randomized=True)
PSSZERO_RANDOMIZED = Variant("RSABSSA-SHA384-PSSZERO-Randomized", salt_length=0, randomized=True)
PSS_DETERMINISTIC = Variant("RSABSSA-SHA384-PSS-Deterministic", salt_length=HASH_BYTES, randomized=False)
PSSZERO_DETERMINISTIC = Variant("RSABSSA-SHA384-PSSZERO-Deterministic", salt_length=0, randomized=False)
VARIANTS = {
    variant.name: variant for variant in (PSS_RANDOMIZED, PSSZERO_RANDOMIZED, PSS_DETERMINISTIC, PSSZERO_DETERMINISTIC)
}


class BlindRSAError(ValueError):
    """A step of RFC 9474 refused its input; the subclass names the RFC's error."""


class EncodingError(BlindRSAError):
    """EMSA-PSS-ENCODE's "encoding error": the modulus is too short for the hash and salt."""


class InvalidInput(BlindRSAError):
    """Blind's "invalid input": the encoded message shares a factor with n."""


class InvalidBlind(BlindRSAError):
    """Blind's "invalid blind": the blinding factor r has no inverse mod n."""


class UnexpectedInputSize(BlindRSAError):
    """A blinded message or blind signature that is not kLen bytes long."""


class MessageRepresentativeOutOfRange(BlindRSAError):
    """RSASP1's "message representative out of range": the blinded message is not below n."""


class SigningFailure(BlindRSAError):
    """BlindSign's "signing failure": the private-key operation did not invert the public one."""


class InvalidSignature(BlindRSAError):
    """Finalize's "invalid signature": the unblinded signature does not verify."""


def key_generate(bits: int = KEY_BITS) -> rsa.RSAPrivateKey:
    """A fresh signing key (RFC 9474 Section 6.2).

    Use one key per variant and for nothing but RSABSSA: the RFC forbids reusing a key across
    protocols or across encoding options.
    """
    return rsa.generate_private_key(public_exponent=PUBLIC_EXPONENT, key_size=bits)


def private_key_to_pem(private_key: rsa.RSAPrivateKey) -> bytes:
    """PKCS #8 PEM, unencrypted: protecting it at rest is the storage's job."""
    return private_key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def private_key_from_pem(data: bytes) -> rsa.RSAPrivateKey:
    key = serialization.load_pem_private_key(data, password=None)
    if not isinstance(key, rsa.RSAPrivateKey):
        raise ValueError("not an RSA private key")
    return key


def public_key_to_der(public_key: rsa.RSAPublicKey) -> bytes:
    """DER SubjectPublicKeyInfo with the rsaEncryption OID.

    RFC 9474 Section 6.2 asks for the RSASSA-PSS OID only in an X.509 certificate, which this
    project does not issue; ``cryptography`` writes no other SPKI for RSA.
    """
    return public_key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


def public_key_from_der(data: bytes) -> rsa.RSAPublicKey:
    key = serialization.load_der_public_key(data)
    if not isinstance(key, rsa.RSAPublicKey):
        raise ValueError("not an RSA public key")
    return key


def prepare(msg: bytes, variant: Variant, *, msg_prefix: bytes | None = None) -> bytes:
    """Prepare (RFC 9474 Section 4.1): PrepareRandomize — 32 random bytes, then ``msg`` — or PrepareIdentity.

    ``msg_prefix``: PrepareRandomize's random bytes, drawn by the caller beforehand (from the OS
    CSPRNG too: the RFC asks only that they be random). A device draws them first because its
    report is sealed with them before the message that names the report is prepared
    (pfs_device.tokens). None draws them here.
    """
    if msg_prefix is None:
        msg_prefix = secrets.token_bytes(PREFIX_BYTES) if variant.randomized else b""
    return _prepare(msg, variant, msg_prefix)


def blind(public_key: rsa.RSAPublicKey, input_msg: bytes, variant: Variant) -> tuple[bytes, int]:
    """Blind (RFC 9474 Section 4.2): (blinded_msg for the server, inv the client keeps secret).

    The salt and r come from the OS CSPRNG; the caller cannot choose them (Section 7, "PSS Salt
    Choice": a chosen salt could carry a covert message).
    """
    n = public_key.public_numbers().n
    salt = secrets.token_bytes(variant.salt_length)
    for _ in range(_BLIND_ATTEMPTS):
        r = secrets.randbelow(n - 1) + 1  # random_integer_uniform(1, n)
        try:
            return _blind(public_key, input_msg, variant, salt=salt, r=r)
        except InvalidBlind:
            continue
    raise InvalidBlind(f"no invertible blinding factor in {_BLIND_ATTEMPTS} draws: is n a product of two large primes?")


def blind_sign(private_key: rsa.RSAPrivateKey, blinded_msg: bytes) -> bytes:
    """BlindSign (RFC 9474 Section 4.3): RSASP1 on the blinded message, checked before it is returned.

    Raises UnexpectedInputSize unless ``blinded_msg`` is kLen bytes, MessageRepresentativeOutOfRange
    if it is not below n, and SigningFailure if ``s^e mod n`` is not the message again — a fault
    in the private-key operation, whose output could otherwise reveal a factor of n.
    """
    numbers = private_key.private_numbers()
    n, e = numbers.public_numbers.n, numbers.public_numbers.e
    k_len = _byte_length(n)
    if len(blinded_msg) != k_len:
        raise UnexpectedInputSize(f"the blinded message must be {k_len} bytes, not {len(blinded_msg)}")
    m = int.from_bytes(blinded_msg, "big")
    if m >= n:
        raise MessageRepresentativeOutOfRange("the blinded message must be below n")
    # Base blinding (Section 7): the exponentiation sees m * b^e for a fresh b, not the client's m.
    b = _unit(n)
    s = _rsasp1(numbers, m * pow(b, e, n) % n) * pow(b, -1, n) % n
    if pow(s, e, n) != m:  # m' = RSAVP1(pkS, s); compare with m (steps 3 and 4)
        raise SigningFailure("the private-key operation does not verify")
    return s.to_bytes(k_len, "big")


def finalize(public_key: rsa.RSAPublicKey, input_msg: bytes, blind_sig: bytes, inv: int, variant: Variant) -> bytes:
    """Finalize (RFC 9474 Section 4.4): unblind the server's answer into ``sig`` and verify it.

    Raises UnexpectedInputSize unless ``blind_sig`` is kLen bytes, and InvalidSignature if the
    unblinded signature is not a valid RSASSA-PSS signature on ``input_msg`` — a server that signed
    with another key, or signed something else, is caught here.
    """
    n = public_key.public_numbers().n
    k_len = _byte_length(n)
    if len(blind_sig) != k_len:
        raise UnexpectedInputSize(f"the blind signature must be {k_len} bytes, not {len(blind_sig)}")
    s = int.from_bytes(blind_sig, "big") * inv % n
    sig = s.to_bytes(k_len, "big")
    if not verify(public_key, input_msg, sig, variant):
        raise InvalidSignature("the unblinded signature does not verify")
    return sig


def verify(public_key: rsa.RSAPublicKey, input_msg: bytes, sig: bytes, variant: Variant) -> bool:
    """Verification (RFC 9474 Section 4.5): RSASSA-PSS-VERIFY (RFC 8017 Section 8.1.2) by ``cryptography``.

    SHA-384, MGF1-SHA-384 and exactly the variant's salt length, so a signature made under one
    variant does not verify under another.
    """
    pss = padding.PSS(mgf=padding.MGF1(hashes.SHA384()), salt_length=variant.salt_length)
    try:
        public_key.verify(sig, input_msg, pss, hashes.SHA384())
    except _PSSInvalid:
        return False
    return True


def _prepare(msg: bytes, variant: Variant, msg_prefix: bytes) -> bytes:
    """Prepare with the prefix given: the deterministic core, which the RFC's test vectors fix."""
    if len(msg_prefix) != (PREFIX_BYTES if variant.randomized else 0):
        raise ValueError(f"{variant.name} takes a {PREFIX_BYTES if variant.randomized else 0}-byte prefix")
    return msg_prefix + msg


def _blind(
    public_key: rsa.RSAPublicKey, input_msg: bytes, variant: Variant, *, salt: bytes, r: int
) -> tuple[bytes, int]:
    """Blind with the salt and r given (RFC 9474 Section 4.2 from step 1): the core the test vectors fix."""
    if len(salt) != variant.salt_length:
        raise ValueError(f"{variant.name} takes a {variant.salt_length}-byte salt")
    public = public_key.public_numbers()
    n, e = public.n, public.e
    m = int.from_bytes(_emsa_pss_encode(input_msg, n.bit_length() - 1, salt), "big")
    # Sharing a factor with n would make m unrecoverable after blinding, and would expose that factor.
    if math.gcd(m, n) != 1:
        raise InvalidInput("the encoded message is not coprime with n")
    try:
        inv = pow(r, -1, n)
    except ValueError:
        raise InvalidBlind("r has no inverse mod n") from None
    z = m * pow(r, e, n) % n  # x = RSAVP1(pkS, r); z = m * x mod n
    return z.to_bytes(_byte_length(n), "big"), inv


def _emsa_pss_encode(message: bytes, em_bits: int, salt: bytes) -> bytes:
    """EMSA-PSS-ENCODE (RFC 8017 Section 9.1.1) with SHA-384 and MGF1-SHA-384, the salt given.

    ``em_bits`` is bit_len(n) - 1 for RSASSA-PSS (Section 8.1.1), so the encoded message is below n.
    Step 1's "message too long" needs more than 2^125 bytes of input for SHA-384 and cannot occur.
    """
    em_len = (em_bits + 7) // 8
    m_hash = hashlib.sha384(message).digest()  # step 2
    if em_len < HASH_BYTES + len(salt) + 2:  # step 3
        raise EncodingError(f"an RSA key of {em_bits + 1} bits is too short for a {len(salt)}-byte salt")
    m_prime = bytes(8) + m_hash + salt  # step 5
    h = hashlib.sha384(m_prime).digest()  # step 6
    db = bytes(em_len - len(salt) - HASH_BYTES - 2) + b"\x01" + salt  # steps 7 and 8
    db_mask = _mgf1_sha384(h, em_len - HASH_BYTES - 1)  # step 9
    masked_db = bytearray(x ^ y for x, y in zip(db, db_mask, strict=True))  # step 10
    masked_db[0] &= 0xFF >> (8 * em_len - em_bits)  # step 11: clear the bits above em_bits
    return bytes(masked_db) + h + b"\xbc"  # step 12


def _mgf1_sha384(seed: bytes, length: int) -> bytes:
    """MGF1 (RFC 8017 Appendix B.2.1) with SHA-384; "mask too long" needs 2^32 blocks and cannot occur here."""
    blocks = -(-length // HASH_BYTES)
    return b"".join(hashlib.sha384(seed + counter.to_bytes(4, "big")).digest() for counter in range(blocks))[:length]


def _rsasp1(numbers: rsa.RSAPrivateNumbers, m: int) -> int:
    """RSASP1 (RFC 8017 Section 5.2.1), the Chinese-remainder form (step 2.b): m^d mod n.

    Variable time (Python ints); BlindSign blinds its input and checks its output.
    """
    p, q = numbers.p, numbers.q
    s_p = pow(m % p, numbers.dmp1, p)
    s_q = pow(m % q, numbers.dmq1, q)
    h = (s_p - s_q) * numbers.iqmp % p  # iqmp = q^-1 mod p
    return s_q + q * h


def _unit(n: int) -> int:
    """A uniformly random invertible residue mod n."""
    while True:
        b = secrets.randbelow(n - 1) + 1
        if math.gcd(b, n) == 1:
            return b


def _byte_length(n: int) -> int:
    """kLen: the length in bytes of the modulus n."""
    return (n.bit_length() + 7) // 8
