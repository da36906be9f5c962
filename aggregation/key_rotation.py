"""Key rotation (``manage.py rotate_keys``): a new private key for the leader, the helper or the
issuer, without breaking a collection already open.

- leader / helper: a new HPKE key becomes current (devices seal to it from their next task); the
  old one is retired, not deleted, and still opens the shares of the collections opened before —
  devices that fetched their task then sealed to it. A retired key is deleted by a later rotation
  once every collection opened before its retirement is closed and its pending reports verified.
- issuer: each collection keeps its own RSA key for its whole life (its task commits to it). A
  rotation erases the private halves of the keys of closed, verified collections (their tokens can
  only be verified now, which needs the public key alone), and re-seals every other key under the
  current wrapping key (from a file: a new one, written first; from the environment: the first of
  PFS_ISSUER_KEY, so the operator can then drop the old one).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from django.db import transaction

from aggregation.issuer import ROLE as ISSUER
from aggregation.issuer import primes_unwrap, primes_wrap, wrapping_key_id
from aggregation.keys import DATABASE, ENVIRONMENT, ROLES, StoredKey, key_file_write, key_new, key_source, source_keys
from aggregation.models import AggregatorKey, CollectionRules, PendingReport, TokenIssuerKey
from pfs_base.db_router import ISSUER as ISSUER_DB
from pfs_base.db_router import aggregator_store
from pfs_device import hpke


class RotationRefused(Exception):
    """Nothing was changed; the message says why and what to do."""


@dataclass(frozen=True)
class Rotation:
    role: str
    source: str
    retired_kept: int = 0  # retired keys still needed by open collections
    retired_deleted: int = 0
    erased: int = 0  # issuer: private halves erased (closed collections)
    resealed: int = 0  # issuer: keys sealed under the current wrapping key

    def summary(self) -> str:
        if self.role == ISSUER:
            return (
                f"issuer ({self.source}): {self.erased} closed collections' signing keys erased, "
                f"{self.resealed} sealed under the current wrapping key"
            )
        return (
            f"{self.role} ({self.source}): a new key is current; {self.retired_kept} retired keys kept "
            f"for collections opened before, {self.retired_deleted} deleted"
        )


def keys_rotate(*, role: str, now: datetime | None = None) -> Rotation:
    if role not in ROLES:
        raise RotationRefused(f"role: {role!r} is not one of {', '.join(ROLES)}")
    now = now or datetime.now(UTC)
    return _issuer_rotate(now) if role == ISSUER else _aggregator_rotate(role, now)


def _aggregator_rotate(role: str, now: datetime) -> Rotation:
    source = key_source(role)
    if source.kind == ENVIRONMENT:
        raise RotationRefused(
            f"{role}: its keys come from {source.where}; put a new key first in it "
            "(base64 of 32 random bytes), keep the old one after it until the collections opened "
            "before are closed, and restart"
        )
    if source.kind == DATABASE:
        store = aggregator_store(role)  # the helper's keys are in the helper's own store
        keys = AggregatorKey.objects.using(store)
        with transaction.atomic(using=store):
            keys.filter(role=role, retired_at__isnull=True).update(retired_at=now)
            private, public = hpke.key_pair_generate()
            keys.create(role=role, public_key=public, private_key=private)
            retired = list(keys.filter(role=role, retired_at__isnull=False))
            stale = [row.pk for row in retired if not _needed(row.retired_at, store=store)]
            keys.filter(pk__in=stale).delete()
        return Rotation(role, source.describe(), retired_kept=len(retired) - len(stale), retired_deleted=len(stale))
    path = Path(source.where)
    old = source_keys(source) if path.exists() else []
    retired = [StoredKey(stored.key, stored.retired_at or now) for stored in old]
    kept = [stored for stored in retired if _needed(stored.retired_at, store=aggregator_store(role))]
    key_file_write(path, [StoredKey(key_new())] + kept)
    return Rotation(role, source.describe(), retired_kept=len(kept), retired_deleted=len(retired) - len(kept))


def _issuer_rotate(now: datetime) -> Rotation:
    source = key_source(ISSUER)
    done = _closed_and_verified()
    with transaction.atomic(using=ISSUER_DB):
        erased = (
            TokenIssuerKey.objects.filter(collection_key__in=done)
            .exclude(prime_p="", wrapped=b"")
            .update(prime_p="", prime_q="", wrapped=b"", wrapping_key="")
        )
    if source.kind == DATABASE:
        return Rotation(ISSUER, source.describe(), erased=erased)
    old = source_keys(source) if source.kind == ENVIRONMENT or Path(source.where).exists() else []
    if source.kind == ENVIRONMENT:
        current = old[0].key
    else:
        current = key_new()
        # The new key first, the old ones still listed: a process reading the file meanwhile opens both.
        key_file_write(Path(source.where), [StoredKey(current)] + [StoredKey(s.key, s.retired_at or now) for s in old])
    by_id = {wrapping_key_id(stored.key): stored.key for stored in old}
    resealed = 0
    with transaction.atomic(using=ISSUER_DB):
        for row in TokenIssuerKey.objects.select_for_update().exclude(prime_p="", wrapped=b""):
            if row.wrapped:
                if row.wrapping_key not in by_id:
                    raise RotationRefused(f"issuer: the key of {row.collection_key} is sealed under a key not held")
                prime_p, prime_q = primes_unwrap(by_id[row.wrapping_key], row.collection_key, bytes(row.wrapped))
            else:
                prime_p, prime_q = int(row.prime_p), int(row.prime_q)
            row.wrapped = primes_wrap(current, row.collection_key, prime_p, prime_q)
            row.wrapping_key = wrapping_key_id(current)
            row.prime_p = row.prime_q = ""
            row.save(update_fields=["wrapped", "wrapping_key", "prime_p", "prime_q"])
            resealed += 1
    if source.kind != ENVIRONMENT:
        key_file_write(Path(source.where), [StoredKey(current)])  # every row is sealed under it now
    return Rotation(ISSUER, source.describe(), erased=erased, resealed=resealed)


def _needed(retired_at: datetime | None, *, store: str) -> bool:
    """A key retired at ``retired_at`` may still have to open a share: some collection opened before
    is open (by the rules in the aggregator's own ``store``), or has reports waiting to be verified.
    A key of unknown retirement is always kept."""
    if retired_at is None or retired_at == datetime.min:
        return True
    earlier = CollectionRules.objects.using(store).filter(created_at__lt=retired_at)
    if earlier.filter(closed=False).exists():
        return True
    # The collections with uploads waiting (few; in the default store, so a list, not a subquery).
    waiting = list(PendingReport.objects.values_list("collection_key", flat=True).distinct())
    return earlier.filter(key__in=waiting).exists()


def _closed_and_verified() -> list[str]:
    closed = set(CollectionRules.objects.filter(closed=True).values_list("key", flat=True))
    waiting = set(PendingReport.objects.filter(collection_key__in=closed).values_list("collection_key", flat=True))
    return sorted(closed - waiting)
