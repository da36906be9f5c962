"""Idempotency keys: a request that starts something, sent again with the same key, starts nothing new.

The first request with a key claims it (``IdempotentRequest``: user, key, endpoint, SHA-256 of
the body) and does its work in the same transaction, then stores its answer there; any error
rolls back both, so the key stays unused and a retry runs again. A repeat with the same endpoint
and body gets the stored answer; anything else under that key is refused (``KeyReused``).

Two requests with the same key at once: the unique (user, key) constraint makes the second
insert wait for the first transaction, then fail; the second then reads the first's answer.
The second's own work, if it did any, rolls back with it, and so do the tasks it queued on commit.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, transaction

from analyses.models import IdempotentRequest
from pfs_base.errors import ValidationFailed

HEADER = "Idempotency-Key"
KEY_PATTERN = re.compile(r"^[\x20-\x7e]{1,255}$")  # printable ASCII, as an HTTP header carries it


class KeyReused(Exception):
    """The key was first used for another endpoint or another body."""


@dataclass(frozen=True)
class Answer:
    status: int
    body: Any
    headers: dict[str, str] = field(default_factory=dict)
    replayed: bool = False


def request_digest(payload: Any) -> str:
    """SHA-256 of the body's canonical JSON: keys sorted, no spaces, so equal JSON hashes equal."""
    canonical = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


def idempotent_answer(
    *, user: AbstractBaseUser, key: str | None, endpoint: str, payload: Any, respond: Callable[[], Answer]
) -> Answer:
    """``respond()`` once per (user, key); its stored answer for a repeat. No key: just ``respond()``."""
    if key is None:
        return respond()
    if not KEY_PATTERN.match(key):
        raise ValidationFailed({HEADER: ["Must be 1 to 255 printable ASCII characters."]})
    digest = request_digest(payload)
    stored = _stored(user, key)
    if stored is None:
        try:
            with transaction.atomic():
                claim = IdempotentRequest.objects.create(
                    user=user, key=key, endpoint=endpoint, request_digest=digest, response_status=0, response_body={}
                )
                answer = respond()
                claim.response_status = answer.status
                claim.response_body = answer.body
                claim.response_headers = answer.headers
                claim.save(update_fields=["response_status", "response_body", "response_headers"])
            return answer
        except IntegrityError:
            stored = _stored(user, key)  # a concurrent request with this key committed first
            if stored is None:  # the error was the work's own, not the key's
                raise
    if stored.endpoint != endpoint or stored.request_digest != digest:
        raise KeyReused(f"This {HEADER} was already used with another request ({stored.endpoint}).")
    return Answer(stored.response_status, stored.response_body, stored.response_headers, replayed=True)


def _stored(user: AbstractBaseUser, key: str) -> IdempotentRequest | None:
    return IdempotentRequest.objects.filter(user=user, key=key).first()
