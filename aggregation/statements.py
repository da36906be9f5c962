"""The token issuer's signed statement of how many tokens it issued for a collection (issue 29,
requirement 1).

    {"collection": <key>, "issued": <count>, "at": <ISO time>, "signature": <base64 Ed25519>}

signed with the issuer's own statement key (PFS_ISSUER_STATEMENT_KEY), never a collection's blind
RSA key: a blind signer signs whatever it is sent, so its signature says nothing about what it
signed. The issuer serves the statement publicly (aggregation.api); the leader relays it in its
aggregate-share request (aggregation.dap.AggregateShareReq), and the helper, configured with the
statement key's public half (PFS_ISSUER_STATEMENT_PUBLIC_KEY, exchanged at set-up), takes its rate
and plausibility checks from ``issued`` (aggregation.batch_rules), never from the leader's fleet table.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from datetime import datetime, timedelta

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

CONTEXT = b"pfs-studio issued statement v1|"
# A statement older than this is refused: the leader relays the one the issuer signs when it asks
# for the helper's shares, and a count from before the last tokens would refuse honest reports.
MAX_AGE = timedelta(hours=1)


class StatementInvalid(ValueError):
    """Not a statement the issuer signed for this collection, recently; the message says which."""


@dataclass(frozen=True)
class IssuedStatement:
    collection: str
    issued: int
    at: datetime
    signature: bytes = b""

    def signed_message(self) -> bytes:
        content = {"collection": self.collection, "issued": self.issued, "at": self.at.isoformat()}
        return CONTEXT + json.dumps(content, sort_keys=True, separators=(",", ":")).encode()

    def as_json(self) -> dict:
        return {
            "collection": self.collection,
            "issued": self.issued,
            "at": self.at.isoformat(),
            "signature": base64.b64encode(self.signature).decode(),
        }

    @classmethod
    def from_json(cls, content: object) -> IssuedStatement:
        if not isinstance(content, dict) or set(content) != {"collection", "issued", "at", "signature"}:
            raise StatementInvalid("an issuer statement is {collection, issued, at, signature}")
        issued, collection = content["issued"], content["collection"]
        if isinstance(issued, bool) or not isinstance(issued, int) or issued < 0 or not isinstance(collection, str):
            raise StatementInvalid("an issuer statement's collection is a string, its issued count an integer >= 0")
        try:
            at = datetime.fromisoformat(content["at"]) if isinstance(content["at"], str) else None
            signature = base64.b64decode(str(content["signature"]).encode("ascii"), validate=True)
        except (ValueError, binascii.Error, UnicodeEncodeError):
            at = None
            signature = b""
        if at is None or at.tzinfo is None:
            raise StatementInvalid("an issuer statement's 'at' is an ISO 8601 time with its time zone")
        return cls(collection, issued, at, signature)


def statement_sign(key: bytes, *, collection: str, issued: int, at: datetime) -> IssuedStatement:
    unsigned = IssuedStatement(collection, issued, at)
    return IssuedStatement(
        collection, issued, at, Ed25519PrivateKey.from_private_bytes(key).sign(unsigned.signed_message())
    )


def statement_verify(public_key: bytes, statement: IssuedStatement, *, collection: str, now: datetime) -> None:
    """Returns if the issuer signed ``statement`` for ``collection`` within MAX_AGE of ``now``;
    StatementInvalid naming what is wrong otherwise."""
    try:
        Ed25519PublicKey.from_public_bytes(public_key).verify(statement.signature, statement.signed_message())
    except (InvalidSignature, ValueError):
        raise StatementInvalid("the issuer statement is not signed by the issuer's statement key") from None
    if statement.collection != collection:
        raise StatementInvalid("the issuer statement is about another collection")
    if not now - MAX_AGE <= statement.at <= now + timedelta(minutes=5):
        raise StatementInvalid(f"the issuer statement is stale: signed at {statement.at.isoformat()}")
