"""The leader and helper aggregators: each holds its own key, its own shares, and enforces batch rules alone.

Neither trusts the other. Each, on its own:
- opens only the report share sealed to its own HPKE key (pfs_device.hpke; a v2 report stored
  before the upgrade to v3: aggregation.hpke_v2);
- accepts an anonymous token once per collection (pfs_device.tokens);
- refuses to release the aggregate share of a batch smaller than the minimum cohort — the larger
  of its collection rules' and the one the devices routed with;
- refuses a collection of real devices' reports with no valid statement of the token issuer's count
  of tokens, more reports than that count, or reports that arrived faster than that many devices'
  own pacing allows (devices_refusal, aggregation.batch_rules);
- adds its own discrete Gaussian (or, for pure epsilon-DP, discrete Laplace) noise when the
  collection uses aggregator noise (privacy.aggregator_noise), so either one alone being honest suffices.

Each keeps its state in its own store (``Aggregator.store``, pfs_base.db_router): the helper's
shares, keys, rules, spent tokens and counters are in the ``helper`` database. At aggregation the
leader names the pairs it sums (``AggregateShare.pairs``: what its aggregate request carries, no
report content); the helper sums exactly those, drops the rows no one named (left by a leader
transaction that failed after the helper's committed) and refuses a batch whose named pair it
does not hold.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

import numpy as np
from django.conf import settings
from django.db import IntegrityError, transaction

from aggregation import hpke_v2
from aggregation.batch_rules import rate_refusal
from aggregation.keys import DATABASE, ENVIRONMENT, key_source, source_keys
from aggregation.models import (
    FIELD64,
    FIELD128,
    AggregatorKey,
    Collection,
    CollectionRules,
    HelperShare,
    LeaderShare,
    StoredShare,
)
from pfs_base.db_router import aggregator_store
from pfs_device import hpke, tokens, wire
from privacy import field as prime_field
from privacy.aggregator_noise import aggregator_noise
from privacy.field import FieldVector, add, field_sum
from privacy.heavy_hitters import VDAF as POPLAR1
from privacy.heavy_hitters import share_sizes as poplar1_share_sizes
from privacy.report_vdaf import ReportShape, input_share_sizes
from privacy.vdaf.field import Field128

REPORT_SOURCE = "report:"  # source prefix of individually uploaded reports
# The wire versions of the reports an aggregator opens: the one devices send, and v2 and v3 for the
# PendingReport rows received before the upgrades to v3 and v4 (aggregation.hpke_v2 says when 2 can
# go; 3 can go with it: its tokens are unbound, token_valid).
STORED_VERSIONS = (hpke_v2.VERSION, wire.SEALED_V3, wire.VERSION)


def token_valid(
    issuer: tokens.IssuerPublicKey, collection_key: str, token: tokens.Token, *, version: int, report_digest: bytes
) -> bool:
    """Whether a report's token is the issuer's, for this collection and (wire v4) for this very
    report: ``report_digest`` as the aggregator recomputed it from what it holds.

    A report of an older version, stored before the upgrade, has a token that signs the collection
    only: it is checked so, as it was when it arrived. A token issued since signs a v4 message, which
    does not verify as an older one, so relabelling a report as v3 cannot unbind its token.
    """
    if version == wire.VERSION:
        return tokens.verify(issuer, collection_key, token, report_digest=report_digest)
    if version in STORED_VERSIONS:
        return tokens.verify_unbound(issuer, collection_key, token)
    return False


@dataclass(frozen=True)
class AggregateShare:
    vector: FieldVector | list[int]  # uint64 residues (Field64), or Python integers (Field128)
    reports: int
    min_cohort: int
    field: str = FIELD64
    pairs: tuple[str, ...] = ()  # the pair ids summed (the leader names them to the helper)


def devices_refusal(arrivals: list[float], reports: int, *, issued: int | None, spread: float) -> str | None:
    """Why a collection of real devices' reports is refused whole, or None (issue 29, requirement 1).

    ``issued``: the tokens the issuer says it issued for the collection (its signed statement,
    aggregation.statements; None: no valid statement, and the collection is refused: fail closed).
    ``reports``: the reports accepted in all its batches, which cannot outnumber the tokens.
    ``spread``: the least time this aggregator's operator trusts devices to pace over
    (PFS_DEVICE_MIN_SPREAD), which no one else configures."""
    if issued is None:
        return "no valid statement from the token issuer of how many tokens it issued"
    if reports > issued:
        return "more reports than the token issuer issued tokens (plausibility)"
    return rate_refusal(arrivals, devices=issued, spread=spread)


def share_sizes_of(rules: CollectionRules) -> tuple[int, int, int]:
    """(leader input share, helper input share, public share) of the collection's reports, in bytes:
    Prio3's of its shape, or a Poplar1 collection's (heavy hitters) of its bits."""
    if rules.vdaf == POPLAR1:
        return poplar1_share_sizes(rules.length)
    return input_share_sizes(rules_shape(rules).vdaf())


def rules_shape(rules: CollectionRules) -> ReportShape:
    """The Prio3 shape every uploaded report of the collection is verified against."""
    return ReportShape(rules.vdaf, rules.length, rules.weight_bound)


@dataclass(frozen=True)
class BatchRefused:
    """A batch the aggregator will not release. It carries no report count: the size of a batch
    below the minimum cohort is exactly what the cohort hides ("fewer than m" is all it says)."""

    min_cohort: int
    reason: str
    empty: bool  # no report at all: whether any device answered (and spent budget), no more
    pairs: tuple[str, ...] = ()  # the pair ids this aggregator held for the batch


def noise_rng() -> np.random.Generator | None:
    """None: the aggregators' noise draws its bits from the operating system's CSPRNG (os.urandom).
    Tests replace this with a seeded Generator to replay a draw."""
    return None


class Aggregator:
    def __init__(self, role: str, model: type[StoredShare]) -> None:
        self.role = role
        self.model = model
        self.store = aggregator_store(role)  # the database alias of this aggregator's state

    # ------------------------------------------------------------ keys and report shares

    def public_key(self) -> bytes:
        """The current key's public half: what devices seal to (served with every task)."""
        if key_source(self.role).kind == DATABASE:
            return bytes(self._current_row().public_key)
        return hpke.public_key_of(self.private_key())

    def private_key(self) -> bytes:
        """The current private key. Read once per batch of reports by a caller that opens many
        (aggregation.ingest); a share sealed to a retired key is opened by ``open_share``."""
        source = key_source(self.role)
        if source.kind == DATABASE:
            return bytes(self._current_row().private_key)
        return source_keys(source)[0].key

    def retired_keys(self, *, for_collection_opened: datetime | None = None) -> list[bytes]:
        """Retired private keys still kept: each opens the shares of collections opened before it
        was retired (aggregation.key_rotation deletes it once they are all closed).
        ``for_collection_opened``: only the keys retired after that time (a key retired before a
        collection opened was never served for it). Keys from the environment carry no time."""
        source = key_source(self.role)
        if source.kind == DATABASE:
            rows = AggregatorKey.objects.using(self.store).filter(role=self.role, retired_at__isnull=False)
            if for_collection_opened is not None:
                rows = rows.filter(retired_at__gt=for_collection_opened)
            return [bytes(key) for key in rows.order_by("-retired_at").values_list("private_key", flat=True)]
        return [
            stored.key
            for stored in source_keys(source)[1:]
            if source.kind == ENVIRONMENT or for_collection_opened is None or stored.retired_at > for_collection_opened
        ]

    def _current_row(self) -> AggregatorKey:
        keys = AggregatorKey.objects.using(self.store)
        key = keys.filter(role=self.role, retired_at__isnull=True).first()
        if key is None:
            private, public = hpke.key_pair_generate()
            try:
                with transaction.atomic(using=self.store):
                    key = keys.create(role=self.role, public_key=public, private_key=private)
            except IntegrityError:  # another process created it first: every device gets that one
                key = keys.get(role=self.role, retired_at__isnull=True)
        return key

    def open_share(
        self,
        rules: CollectionRules,
        enc: bytes,
        ciphertext: bytes,
        *,
        batch_key: str,
        token_digest: str,
        public_share: bytes = b"",
        private_key: bytes | None = None,
        version: int = wire.VERSION,
    ) -> bytes:
        """This aggregator's Prio3 input share of one report, encoded: opened, and of its length.

        Raises hpke.OpenFailed for a share not sealed to this aggregator (hpke.share_info) for this
        collection, batch, token and public share (hpke.share_aad), and ValueError for one of the
        wrong length (its contents are checked by the proof's verification). ``private_key``: this
        aggregator's key when the caller has read it already. ``version``: the report's wire
        version; a v2 report (stored before the upgrade to v3) is opened as v2 sealed it.
        """
        if private_key is None:
            private_key = self.private_key()
        opener = self._opener(
            version, rules.key, batch_key=batch_key, token_digest=token_digest, public_share=public_share
        )
        try:
            plaintext = opener(private_key, enc, ciphertext)
        except hpke.OpenFailed:
            plaintext = self._open_retired(opener, enc, ciphertext, opened=rules.created_at)
        leader, helper, _ = share_sizes_of(rules)
        expected = leader if self.role == "leader" else helper
        if len(plaintext) != expected:
            raise ValueError(f"input share of {len(plaintext)} bytes, expected {expected}")
        return plaintext

    def open_report(self, rules: CollectionRules, report: wire.Report, *, private_key: bytes | None = None) -> bytes:
        """open_share of this aggregator's share of an uploaded report, in the report's own context."""
        sealed = report.share_for(self.role)
        return self.open_share(
            rules,
            sealed.enc,
            sealed.ciphertext,
            batch_key=report.batch_key,
            token_digest=report.token.digest,
            public_share=report.public,
            private_key=private_key,
            version=report.version,
        )

    def _opener(
        self, version: int, collection_key: str, *, batch_key: str, token_digest: str, public_share: bytes
    ) -> Callable[[bytes, bytes, bytes], bytes]:
        """How a share of this wire version opens under a private key: (key, enc, ciphertext) -> plaintext."""
        if version in (wire.SEALED_V3, wire.VERSION):
            info = hpke.share_info(self.role)
            aad = hpke.share_aad(
                collection_key, batch_key=batch_key, token_digest=token_digest, public_share=public_share
            )
            return lambda key, enc, ciphertext: hpke.open_sealed(key, enc, ciphertext, info, aad=aad)
        if version == hpke_v2.VERSION:
            info = hpke_v2.share_info(collection_key, self.role, batch_key=batch_key, token_digest=token_digest)
            return lambda key, enc, ciphertext: hpke_v2.open_sealed(key, enc, ciphertext, info, aad=public_share)
        raise hpke.OpenFailed(f"no aggregator opens a share of wire version {version}")

    def _open_retired(
        self, opener: Callable[[bytes, bytes, bytes], bytes], enc: bytes, ciphertext: bytes, *, opened: datetime
    ) -> bytes:
        """A share sealed before a rotation, by a device that fetched its task then: only keys
        retired after the collection opened are tried, so a device served a long-retired key (to
        tell its report apart) is refused. Only reports with a valid unspent token get here, so a
        flood of bad shares cannot make this a hot path."""
        for key in self.retired_keys(for_collection_opened=opened):
            try:
                return opener(key, enc, ciphertext)
            except hpke.OpenFailed:
                continue
        raise hpke.OpenFailed("the share opens under none of this aggregator's keys")

    # ------------------------------------------------------------ aggregation

    def rules(self, key: str) -> CollectionRules | None:
        """This aggregator's copy of a collection's rules."""
        return CollectionRules.objects.using(self.store).filter(key=key).first()

    def aggregate(
        self,
        key: str,
        *,
        pairs: dict[str, tuple[str, ...]] | None = None,
        floor: int = 0,
        issued: int | None = None,
    ) -> dict[str, AggregateShare | BatchRefused]:
        """Sum this aggregator's shares of each batch of a collection, then delete them (released or not).

        Results are keyed by batch key. ``pairs``: the pair ids the leader named, by batch key (the
        helper's call): only those are summed, a batch whose named pair is not held here is refused,
        and a batch or a share no one named is deleted uncounted. Rate validation looks at the whole
        collection at once — a flood into one cohort is a flood — so it is decided before any share
        is deleted. ``floor``: the smallest minimum cohort this aggregator's operator allows, whatever
        the rules say. A collection of real devices (its rules name a token key) is validated against
        ``issued``, the issuer's signed count of its tokens, with devices pacing over this aggregator's
        own PFS_DEVICE_MIN_SPREAD at least (devices_refusal). Run
        inside a transaction on this aggregator's store.
        """
        collections = list(
            Collection.objects.using(self.store).select_for_update().filter(key=key).order_by("batch_key")
        )
        rules = self.rules(key)
        # One read and one delete for the whole collection, not one per batch.
        held: dict[str, list[StoredShare]] = {collection.batch_key: [] for collection in collections}
        batch_of = {collection.pk: collection.batch_key for collection in collections}
        shares = self.model.objects.using(self.store).filter(collection__in=collections).order_by("pk")
        for share in shares:
            held[batch_of[share.collection_id]].append(share)
        self.model.objects.using(self.store).filter(collection__in=collections).delete()
        lengths = {collection.batch_key: collection.length for collection in collections}
        missing: set[str] = set()
        if pairs is not None:
            named = {batch_key: set(batch_pairs) for batch_key, batch_pairs in pairs.items()}
            counted = {b: [s for s in held.get(b, []) if s.pair in named[b]] for b in named}
            missing = {b for b in named if len(named[b]) > len(counted[b])}
            held = counted
        arrivals = [
            at
            for batch in held.values()
            for share in batch
            if share.source.startswith(REPORT_SOURCE)
            for at in share.load_arrivals()
        ]
        flooded = None
        if rules is not None and rules.token_key is not None:
            accepted = sum(share.reports for batch in held.values() for share in batch)
            flooded = devices_refusal(arrivals, accepted, issued=issued, spread=settings.PFS_DEVICE_MIN_SPREAD)
        results: dict[str, AggregateShare | BatchRefused] = {}
        for batch_key, batch in held.items():
            reports = sum(share.reports for share in batch)
            min_cohort = max([share.min_cohort for share in batch] + [rules.min_cohort if rules else 0, floor])
            batch_pairs = tuple(share.pair for share in batch)
            if batch_key in missing:
                # The leader counted a pair this helper never stored: the sums would not match.
                reason = "shares missing (a pair the leader named is not held)"
            elif not batch or reports < min_cohort:
                reason = f"fewer than {min_cohort:,} reports (the minimum cohort)"
            elif flooded:
                reason = flooded
            else:
                field, vector = self._noised_sum(batch, lengths[batch_key], rules)
                results[batch_key] = AggregateShare(
                    vector=vector, reports=reports, min_cohort=min_cohort, field=field, pairs=batch_pairs
                )
                continue
            results[batch_key] = BatchRefused(
                min_cohort=min_cohort,
                reason=f"{self.role}: {reason}",
                empty=reports == 0 and batch_key not in missing,
                pairs=batch_pairs,
            )
        return results

    def _noised_sum(
        self, shares: list[StoredShare], length: int, rules: CollectionRules | None
    ) -> tuple[str, FieldVector | list[int]]:
        """(field, this aggregator's noised sum of the shares): Field64 (simulated shards, Prio3Count)
        or Field128 (verified histograms and multi-hot vectors). A batch holds one field only."""
        fields = {share.field for share in shares}
        if len(fields) != 1:
            raise ValueError(f"a batch holds shares of several fields: {sorted(fields)}")
        noise = None
        if rules is not None and rules.noise_epsilon is not None:
            noise = aggregator_noise(rules.noise_epsilon, rules.noise_delta).noise(length, noise_rng())
        if fields == {FIELD64}:
            vector = field_sum([share.load_vector() for share in shares], length)
            return FIELD64, vector if noise is None else add(vector, prime_field.from_signed(noise))
        p = Field128.MODULUS
        total = [0] * length
        for share in shares:
            total = [a + b for a, b in zip(total, share.load_ints(), strict=True)]
        if noise is not None:
            total = [a + int(e) for a, e in zip(total, noise, strict=True)]
        return FIELD128, [a % p for a in total]


LEADER = Aggregator("leader", LeaderShare)
HELPER = Aggregator("helper", HelperShare)
AGGREGATORS = (LEADER, HELPER)
