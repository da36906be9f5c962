"""The token issuer: one RSA key per collection, and at most one blind signature per device and
collection (aggregation.tokens, RFC 9474).

The issuer is told who the device is (in a deployment, by a device-attestation service) and which
collection the token is for, but sees only a blinded message: it cannot recognise the token when
an aggregator later receives it. It keeps no time finer than the day of an issue, so its records
cannot be joined with the aggregators' arrival times to link a report to its device.
"""

from __future__ import annotations

import hashlib

from django.db import IntegrityError, transaction

from aggregation.models import IssuedToken, TokenIssuerKey
from aggregation.tokens import IssuerPrivateKey, IssuerPublicKey, issuer_key_generate, sign_blinded


class TokenRefused(Exception):
    """The issuer will not sign: the device already has its token for this collection, or the request is malformed."""


def issuer_key(collection_key: str) -> IssuerPrivateKey:
    """The collection's signing key, created the first time the collection needs one."""
    row = TokenIssuerKey.objects.filter(collection_key=collection_key).first()
    if row is None:
        key = issuer_key_generate()
        try:
            with transaction.atomic():
                TokenIssuerKey.objects.create(
                    collection_key=collection_key,
                    modulus=str(key.public.modulus),
                    public_exponent=str(key.public.exponent),
                    prime_p=str(key.prime_p),
                    prime_q=str(key.prime_q),
                )
        except IntegrityError:
            pass  # another request created it first: every device gets that one
        row = TokenIssuerKey.objects.get(collection_key=collection_key)
    public = IssuerPublicKey(int(row.modulus), int(row.public_exponent))
    return IssuerPrivateKey(public, int(row.prime_p), int(row.prime_q))


def issuer_public_key(collection_key: str) -> IssuerPublicKey:
    return issuer_key(collection_key).public


def token_issue(*, collection_key: str, device_identity: str, blinded: int) -> int:
    """Sign ``blinded`` with the collection's key, once per device; TokenRefused for a second request."""
    key = issuer_key(collection_key)
    if not 0 < blinded < key.public.modulus:
        raise TokenRefused("the blinded message must be an integer in (0, n)")
    digest = hashlib.sha256(device_identity.encode()).hexdigest()
    try:
        with transaction.atomic():
            IssuedToken.objects.create(collection_key=collection_key, device_digest=digest)
            return sign_blinded(key, blinded)
    except IntegrityError:
        raise TokenRefused("this device already has its token for this collection") from None
