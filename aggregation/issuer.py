"""The token issuer: one RSA key per collection, and at most one blind signature per device and
collection (pfs_device.tokens, RFC 9474).

The issuer signs for attested devices only (pfs_device.attestation): each token request carries the
device's attestation (the attestation authority's signature on the device's public key, a key the
leader does not hold) and the device's own signature on the request, and the one-token rule keys on
the attested key, never on an identity the leader assigned. The leader can register as many devices
as it likes; it gets no tokens for them. The issuer knows which collection the token is for, but
sees only a blinded message: it cannot recognise the token when
an aggregator later receives it. It keeps no time finer than the day of an issue, so its records
cannot be joined with the aggregators' arrival times to link a report to its device.

Its state lives in a store of its own (the ``issuer`` database alias, pfs_base.db_router). With a
key-wrapping key from the environment or a file (aggregation.keys) each collection's primes are
stored only sealed under it, so a copy of the issuer's database alone signs nothing.
"""

from __future__ import annotations

import hashlib
import secrets

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from aggregation.keys import DATABASE, KeysUnavailable, key_source, source_keys
from aggregation.models import IssuedToken, TokenIssuerKey
from aggregation.statements import IssuedStatement, statement_sign
from pfs_base.db_router import ISSUER as ISSUER_DB
from pfs_device.attestation import Attestation, AttestationInvalid, attestation_verify, token_request_verify
from pfs_device.tokens import IssuerPrivateKey, IssuerPublicKey, issuer_key_generate, sign_blinded

ROLE = "issuer"
_NONCE = 12  # AES-GCM's 96-bit nonce


class TokenRefused(Exception):
    """The issuer will not sign: the device already has its token for this collection, or the request is malformed."""


class RequestUnattested(Exception):
    """The token request does not come from an attested device; ``code`` says why (docs/api.md):
    attestation_missing, attestation_invalid or device_signature_invalid."""

    def __init__(self, message: str, *, code: str) -> None:
        super().__init__(message)
        self.code = code


def attestation_check(content: object) -> Attestation:
    """The attestation in ``content`` (its JSON form) if the attestation authority signed it;
    RequestUnattested otherwise. Verified with the authority's public key alone
    (settings.PFS_ATTESTATION_PUBLIC_KEY): neither the leader nor the issuer holds its private key."""
    if content is None:
        raise RequestUnattested("the request carries no device attestation", code="attestation_missing")
    authority = settings.PFS_ATTESTATION_PUBLIC_KEY
    if authority is None:  # fail closed: nothing can be verified, so nothing is signed
        raise RequestUnattested("no attestation authority is configured here", code="attestation_invalid")
    try:
        attestation = Attestation.from_json(content)
        attestation_verify(authority, attestation)
    except AttestationInvalid as invalid:
        raise RequestUnattested(str(invalid), code="attestation_invalid") from None
    return attestation


def token_request_authenticate(
    *, attestation: object, device_signature: bytes | None, collection_key: str, blinded: int
) -> str:
    """The attested device's identity (its key's digest) if ``device_signature`` is its signature over
    this request (pfs_device.attestation.token_request_message); RequestUnattested otherwise.

    A stolen attestation is not enough: the request must be signed with the attested key's private half."""
    attested = attestation_check(attestation)
    blinded_bytes = blinded.to_bytes((blinded.bit_length() + 7) // 8, "big")
    if device_signature is None or not token_request_verify(
        attested.device_public_key, collection_key, blinded_bytes, device_signature
    ):
        raise RequestUnattested(
            "the request is not signed by the attested device's key", code="device_signature_invalid"
        )
    return f"attested:{attested.digest}"


def wrapping_key_id(key: bytes) -> str:
    """Names a wrapping key in the rows it sealed, without revealing it."""
    return hashlib.sha256(b"pfs-studio issuer wrapping key|" + key).hexdigest()[:16]


def primes_wrap(key: bytes, collection_key: str, prime_p: int, prime_q: int) -> bytes:
    """nonce || AES-256-GCM of "p:q", its associated data the collection (a row moved to another
    collection does not open)."""
    nonce = secrets.token_bytes(_NONCE)
    sealed = AESGCM(key).encrypt(nonce, f"{prime_p}:{prime_q}".encode(), collection_key.encode())
    return nonce + sealed


def primes_unwrap(key: bytes, collection_key: str, wrapped: bytes) -> tuple[int, int]:
    plain = AESGCM(key).decrypt(wrapped[:_NONCE], wrapped[_NONCE:], collection_key.encode())
    prime_p, _, prime_q = plain.decode().partition(":")
    return int(prime_p), int(prime_q)


def issuer_key(collection_key: str) -> IssuerPrivateKey:
    """The collection's signing key, created the first time the collection needs one."""
    row = _key_row(collection_key)
    public = IssuerPublicKey(int(row.modulus), int(row.public_exponent))
    if row.wrapped:
        prime_p, prime_q = _unwrapped(row)
    elif row.prime_p:
        prime_p, prime_q = int(row.prime_p), int(row.prime_q)
    else:
        raise KeysUnavailable(f"the signing key of {collection_key} was erased when it closed")
    return IssuerPrivateKey(public, prime_p, prime_q)


def issuer_public_key(collection_key: str) -> IssuerPublicKey:
    """The collection's public key: all that verifying its tokens needs (kept after the private half is erased)."""
    row = _key_row(collection_key)
    return IssuerPublicKey(int(row.modulus), int(row.public_exponent))


def token_issue(*, collection_key: str, device_identity: str, blinded: int) -> int:
    """Sign ``blinded`` with the collection's key, once per device; TokenRefused for a second request.

    ``device_identity``: the attested device's, from token_request_authenticate (never an id the
    leader assigned: the leader could assign as many as it likes).

    The same device asking again with the same blinded message gets the same blind signature again
    (RSA signing is deterministic): a device stopped after sending its request but before storing the
    answer retries with the blinding it stored first (pfs_device.sdk.device). It still gets one token:
    the blinded message determines the message signed. Another blinded message is refused."""
    key = issuer_key(collection_key)
    if not 0 < blinded < key.public.modulus:
        raise TokenRefused("the blinded message must be an integer in (0, n)")
    digest = hashlib.sha256(device_identity.encode()).hexdigest()
    blinded_digest = hashlib.sha256(blinded.to_bytes(key.public.size, "big")).hexdigest()
    try:
        with transaction.atomic(using=ISSUER_DB):
            IssuedToken.objects.create(
                collection_key=collection_key, device_digest=digest, blinded_digest=blinded_digest
            )
            return sign_blinded(key, blinded)
    except IntegrityError:
        earlier = (
            IssuedToken.objects.filter(collection_key=collection_key, device_digest=digest)
            .values_list("blinded_digest", flat=True)
            .first()
        )
        if earlier and earlier == blinded_digest:
            return sign_blinded(key, blinded)
        raise TokenRefused("this device already has its token for this collection") from None


def issued_statement(collection_key: str) -> IssuedStatement:
    """How many tokens the issuer has issued for the collection, now, signed with its statement key
    (aggregation.statements); KeysUnavailable where it holds none (fail closed: no count, no release)."""
    key = settings.PFS_ISSUER_STATEMENT_KEY
    if key is None:
        raise KeysUnavailable("the issuer has no statement key: set PFS_ISSUER_STATEMENT_KEY or its _FILE")
    issued = IssuedToken.objects.filter(collection_key=collection_key).count()
    return statement_sign(key, collection=collection_key, issued=issued, at=timezone.now().replace(microsecond=0))


def _key_row(collection_key: str) -> TokenIssuerKey:
    row = TokenIssuerKey.objects.filter(collection_key=collection_key).first()
    if row is not None:
        return row
    key = issuer_key_generate()
    fields = {"modulus": str(key.public.modulus), "public_exponent": str(key.public.exponent)}
    source = key_source(ROLE)
    if source.kind == DATABASE:
        fields.update(prime_p=str(key.prime_p), prime_q=str(key.prime_q))
    else:
        wrapping = source_keys(source)[0].key
        fields.update(
            prime_p="",
            prime_q="",
            wrapped=primes_wrap(wrapping, collection_key, key.prime_p, key.prime_q),
            wrapping_key=wrapping_key_id(wrapping),
        )
    try:
        with transaction.atomic(using=ISSUER_DB):
            TokenIssuerKey.objects.create(collection_key=collection_key, **fields)
    except IntegrityError:
        pass  # another request created it first: every device gets that one
    return TokenIssuerKey.objects.get(collection_key=collection_key)


def _unwrapped(row: TokenIssuerKey) -> tuple[int, int]:
    source = key_source(ROLE)
    candidates = [] if source.kind == DATABASE else [stored.key for stored in source_keys(source)]
    for wrapping in candidates:
        if wrapping_key_id(wrapping) == row.wrapping_key:
            try:
                return primes_unwrap(wrapping, row.collection_key, bytes(row.wrapped))
            except InvalidTag:
                break
    raise KeysUnavailable(
        f"the signing key of {row.collection_key} is sealed under wrapping key {row.wrapping_key}, "
        f"which {source.describe()} does not hold"
    )
