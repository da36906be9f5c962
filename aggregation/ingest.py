"""Verifying uploaded reports in bulk: both aggregators' checks on a collection's pending reports.

The upload endpoint only stores what arrives (aggregation.intake → PendingReport). Here, a chunk
at a time and in one transaction per chunk, each report gets exactly the checks of the per-report
path (aggregation.reports.report_check: the token's signature, its spent record, each aggregator
opening only its own share, the form, the weight bound); a token seen twice in a chunk is accepted
once. The accepted shares of a chunk are summed per batch — the leader sums only leader shares,
the helper only helper shares — and stored as one share each with the count of reports in it and
their arrival times (rate validation reads them); the tokens are recorded spent, the rejections
counted by reason, and the pending rows deleted. A failure anywhere rolls the chunk back whole:
its rows wait for the next run, and nothing of it is stored.

Runs from a task while the collection is open (aggregation.tasks, for progress), and always
before a collection is released (aggregation.services.collection_release drains it first).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
from django.db import IntegrityError, connection, transaction

from aggregation import wire
from aggregation.aggregators import AGGREGATORS, REPORT_SOURCE
from aggregation.issuer import issuer_public_key
from aggregation.models import Collection, CollectionRules, HelperShare, LeaderShare, PendingReport, SpentToken
from aggregation.reports import REPORT_MALFORMED, rejections_add, report_check
from aggregation.tokens import IssuerPublicKey
from pfs_base import metrics
from privacy.field import FieldVector, field_sum

# The verification task's stable name (aggregation.tasks): the upload path sends it by name.
INGEST_TASK = "aggregation.tasks.ingest_reports"

# Reports per transaction. Each costs about 1.5 ms of checks (two RSA verifications, two HPKE
# opens), so a chunk holds its row locks for under a second and commits once for 500 reports.
CHUNK = 500
# A chunk fails on a unique token when a concurrent chunk spent the same token first; the next
# attempt reads that token as spent and rejects the report.
ATTEMPTS = 3


@dataclass
class IngestResult:
    accepted: int = 0
    rejected: int = 0
    chunks: int = 0

    @property
    def verified(self) -> int:
        return self.accepted + self.rejected


@dataclass
class _BatchSum:
    """One batch's accepted shares in a chunk, per aggregator, and when they arrived."""

    shares: dict[str, list[FieldVector]] = field(default_factory=lambda: {a.role: [] for a in AGGREGATORS})
    arrivals: list[float] = field(default_factory=list)


def reports_ingest(
    *, collection_key: str, limit: int | None = None, chunk: int = CHUNK, wait: bool = False
) -> IngestResult:
    """Verify up to ``limit`` pending reports of a collection (all of them when None), a chunk at a time.

    Concurrent runs take different chunks (rows locked by another run are skipped). ``wait``: wait
    for rows another run holds instead (the drain before a release: every report received must be
    decided before the shares are read).
    """
    result = IngestResult()
    rules = CollectionRules.objects.filter(key=collection_key).first()
    if rules is None or not PendingReport.objects.filter(collection_key=collection_key).exists():
        return result
    issuer = issuer_public_key(collection_key)
    private_keys = {aggregator.role: aggregator.private_key() for aggregator in AGGREGATORS}
    while limit is None or result.verified < limit:
        size = chunk if limit is None else min(chunk, limit - result.verified)
        for attempt in range(ATTEMPTS):
            try:
                done = _chunk_ingest(rules, issuer, private_keys, size=size, wait=wait)
                break
            except IntegrityError:
                if attempt + 1 == ATTEMPTS:
                    raise
        if done is None:
            break
        result.accepted += done.accepted
        result.rejected += done.rejected
        result.chunks += 1
    return result


def _chunk_ingest(
    rules: CollectionRules, issuer: IssuerPublicKey, private_keys: dict[str, bytes], *, size: int, wait: bool
) -> IngestResult | None:
    """One chunk in one transaction; None when no pending report is left to take."""
    with transaction.atomic():
        pending = PendingReport.objects.filter(collection_key=rules.key).order_by("pk")
        skip = not wait and connection.features.has_select_for_update_skip_locked
        rows = list(pending.select_for_update(skip_locked=skip)[:size])
        if not rows:
            return None
        reports = []
        rejected: Counter[tuple[str, str]] = Counter()
        for row in rows:
            report = _parse(bytes(row.body))
            if report is None or report.collection_key != rules.key:
                rejected["leader", REPORT_MALFORMED] += 1  # the upload parsed it: only a corrupted row lands here
            else:
                reports.append((row, report))

        spent: dict[str, set[str]] = {}
        digests = {report.token.digest for _, report in reports}
        for role, digest in SpentToken.objects.filter(collection_key=rules.key, token_digest__in=digests).values_list(
            "role", "token_digest"
        ):
            spent.setdefault(digest, set()).add(role)

        every_role = {aggregator.role for aggregator in AGGREGATORS}
        accepted: set[str] = set()
        batches: dict[str, _BatchSum] = {}
        for row, report in reports:
            digest = report.token.digest
            spent_at = every_role if digest in accepted else spent.get(digest, set())
            check = report_check(report, rules=rules, issuer=issuer, spent_at=spent_at, private_keys=private_keys)
            if not check.accepted:
                for role, reason in check.reasons.items():
                    rejected[role, reason] += 1
                continue
            accepted.add(digest)
            batch = batches.setdefault(report.batch_key, _BatchSum())
            for role, share in check.shares.items():
                batch.shares[role].append(share)
            batch.arrivals.append(row.received_at.timestamp())

        source = f"{REPORT_SOURCE}chunk:{rows[0].pk}-{rows[-1].pk}"  # pending ids are never reused
        for batch_key, batch in sorted(batches.items()):
            _batch_store(rules, batch_key, batch, source=source)
        SpentToken.objects.bulk_create(
            SpentToken(role=role, collection_key=rules.key, token_digest=digest)
            for digest in sorted(accepted)
            for role in sorted(every_role)
        )
        if rejected:
            rejections_add(collection_key=rules.key, counts=dict(rejected))
        PendingReport.objects.filter(pk__in=[row.pk for row in rows]).delete()
        result = IngestResult(
            accepted=sum(len(b.arrivals) for b in batches.values()), rejected=len(rows) - len(accepted), chunks=1
        )
        metrics.reports_counted(accepted=result.accepted)
    return result


def _parse(body: bytes) -> wire.Report | None:
    try:
        return wire.report_parse(json.loads(body))
    except (UnicodeDecodeError, ValueError):  # WireError is a ValueError
        return None


def _batch_store(rules: CollectionRules, batch_key: str, batch: _BatchSum, *, source: str) -> None:
    """Each aggregator stores the sum of its own shares of the batch's accepted reports."""
    collection, _ = Collection.objects.get_or_create(
        key=rules.key, batch_key=batch_key, defaults={"length": rules.length}
    )
    if collection.length != rules.length:
        raise ValueError(f"collection {collection} holds vectors of {collection.length}, not {rules.length}")
    arrivals = np.asarray(batch.arrivals, dtype="<f8").tobytes()
    for model, role in ((LeaderShare, "leader"), (HelperShare, "helper")):
        model.objects.create(
            collection=collection,
            source=source,
            vector=field_sum(batch.shares[role], rules.length).astype("<u8").tobytes(),
            reports=len(batch.arrivals),
            min_cohort=rules.min_cohort,
            arrivals=arrivals,
        )
