"""Verifying uploaded reports in bulk: both aggregators' checks on a collection's pending reports.

The upload endpoint only stores what arrives (aggregation.intake → PendingReport). Here, a chunk
at a time, each report gets exactly the checks of the per-report
path (aggregation.reports.reports_check: the token's signature, its spent record, each aggregator
opening only its own share, then the Prio3 proof, verified for the whole chunk at once by the
leader's and the helper's sides); a token seen twice in a chunk is accepted once. The accepted
output shares of a chunk are summed per batch — the leader sums only its own, the helper only its
own — and stored as one share each with the count of reports in it and
their arrival times (rate validation reads them); the tokens are recorded spent, the rejections
counted by reason, and the pending rows deleted.

The two aggregators keep separate stores (pfs_base.db_router) and no transaction spans them, so a
chunk is an aggregation job with a durable id: T0 assigns the rows the job id (committed); T1 locks
them (a concurrent run skips a job another holds) and the checks are computed; the helper stores
its part in one transaction on its store, idempotent by job (a job it has stored is not stored
again; its spent-token check ignores the job's own tokens, so a replay gets the same verdicts) and
commits; then T1 stores the leader's part (same pair id: the job), deletes the rows and commits. A
failure before T1 commits leaves the rows assigned: the next run resumes the same job, and every
report is counted exactly once.

Runs from a task while the collection is open (aggregation.tasks, for progress), and always
before a collection is released (aggregation.services.collection_aggregate drains it first).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
from django.db import IntegrityError, connection, transaction

from aggregation.aggregators import (
    AGGREGATORS,
    HELPER,
    LEADER,
    REPORT_SOURCE,
    STORED_VERSIONS,
    Aggregator,
    rules_shape,
)
from aggregation.issuer import issuer_public_key
from aggregation.models import CollectionRules, PendingReport, SpentToken
from aggregation.reports import REPORT_MALFORMED, TOKEN_REUSED, helper_job_begin, rejections_add, reports_check
from aggregation.upload import output_share_store
from aggregation.verification import VerifyConfig, output_sum
from pfs_base import metrics
from pfs_device import wire
from pfs_device.tokens import IssuerPublicKey

# The verification task's stable name (aggregation.tasks): the upload path sends it by name.
INGEST_TASK = "aggregation.tasks.ingest_reports"

# Reports per transaction. Each costs about 1 ms of checks (an RSA verification, two HPKE opens,
# both aggregators' Prio3 verification), so a chunk holds its row locks for about half a second and
# commits once for 500 reports.
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
    """One batch's accepted output shares (encoded) in a chunk, per aggregator, and when they arrived."""

    shares: dict[str, list[bytes]] = field(default_factory=lambda: {a.role: [] for a in AGGREGATORS})
    arrivals: list[float] = field(default_factory=list)


def reports_ingest(
    *, collection_key: str, limit: int | None = None, chunk: int = CHUNK, wait: bool = False
) -> IngestResult:
    """Verify up to ``limit`` pending reports of a collection (all of them when None), a job at a time.

    Concurrent runs take different chunks (rows locked by another run are skipped). ``wait``: wait
    for rows another run holds instead (the drain before a release: every report received must be
    decided before the shares are read). A job left unfinished by an earlier run is resumed first.
    """
    result = IngestResult()
    rules = CollectionRules.objects.filter(key=collection_key).first()
    if rules is None or not PendingReport.objects.filter(collection_key=collection_key).exists():
        return result
    issuer = issuer_public_key(collection_key)
    private_keys = {aggregator.role: aggregator.private_key() for aggregator in AGGREGATORS}
    passed: set[str] = set()  # jobs another run held or finished
    while limit is None or result.verified < limit:
        size = chunk if limit is None else min(chunk, limit - result.verified)
        for attempt in range(ATTEMPTS):
            try:
                job = _job_take(rules.key, size=size, wait=wait, passed=passed)
                done = None if job is None else _job_run(rules, issuer, private_keys, job, wait=wait)
                break
            except IntegrityError:
                if attempt + 1 == ATTEMPTS:
                    raise
        if job is None:
            break
        if done is None:
            passed.add(job)
        else:
            result.accepted += done.accepted
            result.rejected += done.rejected
            result.chunks += 1
    return result


def _job_take(collection_key: str, *, size: int, wait: bool, passed: set[str]) -> str | None:
    """Step T0, committed on its own: an unfinished job no other run holds (and not one this run
    ``passed`` over: another run has it), or a new job of up to ``size`` new rows. None when no
    pending report is left to take."""
    with transaction.atomic():
        pending = PendingReport.objects.filter(collection_key=collection_key).order_by("pk")
        skip = not wait and connection.features.has_select_for_update_skip_locked
        started = pending.filter(job__isnull=False).exclude(job__in=passed).select_for_update(skip_locked=skip).first()
        if started is not None:
            return started.job
        rows = list(pending.filter(job__isnull=True).select_for_update(skip_locked=skip)[:size])
        if not rows:
            return None
        job = f"chunk:{rows[0].pk}-{rows[-1].pk}"  # pending ids are never reused
        PendingReport.objects.filter(pk__in=[row.pk for row in rows]).update(job=job)
        return job


def _job_run(
    rules: CollectionRules,
    issuer: IssuerPublicKey,
    private_keys: dict[str, bytes],
    job: str,
    *,
    wait: bool,
) -> IngestResult | None:
    """The leader's transaction T1, holding all the job's rows from the checks to its commit (a
    concurrent run skips them): both aggregators' checks, the helper's transaction (idempotent by job,
    committed first), then the leader's part. None when another run holds or finished the job."""
    with transaction.atomic():
        skip = not wait and connection.features.has_select_for_update_skip_locked
        of_job = PendingReport.objects.filter(collection_key=rules.key, job=job).order_by("pk")
        # Whoever locks a job's first row owns the job: it then waits for the rest (a moment: only
        # another run's T0 holds one), and a run that cannot have the first row passes the job over.
        # All of the job or nothing: a run on part of it would store the job under its id for good.
        first = of_job.values_list("pk", flat=True).first()
        if first is None or not list(of_job.filter(pk=first).select_for_update(skip_locked=skip).values_list("pk")):
            return None
        rows = list(of_job.select_for_update())
        batches, accepted, rejected = _job_check(rules, issuer, private_keys, job, rows)
        config = VerifyConfig.of(collection_key=rules.key, shape=rules_shape(rules), verify_key=bytes(rules.verify_key))
        sums = {
            batch_key: {role: output_sum(config, shares) for role, shares in batch.shares.items()}
            for batch_key, batch in batches.items()
        }
        with transaction.atomic(using=HELPER.store):
            if helper_job_begin(rules.key, job):  # else stored by an earlier run of this job
                _job_store(HELPER, rules, job, batches, sums, accepted, rejected)
        _job_store(LEADER, rules, job, batches, sums, accepted, rejected)
        PendingReport.objects.filter(pk__in=[row.pk for row in rows]).delete()
    result = IngestResult(
        accepted=sum(len(b.arrivals) for b in batches.values()), rejected=len(rows) - len(accepted), chunks=1
    )
    metrics.reports_counted(accepted=result.accepted)
    return result


def _job_check(
    rules: CollectionRules,
    issuer: IssuerPublicKey,
    private_keys: dict[str, bytes],
    job: str,
    rows: list[PendingReport],
) -> tuple[dict[str, _BatchSum], set[str], Counter[tuple[str, str]]]:
    """Both aggregators' checks on a job's reports, with nothing written: each batch's accepted
    output shares, the tokens accepted, the rejections by (role, reason)."""
    reports = []
    rejected: Counter[tuple[str, str]] = Counter()
    for row in rows:
        report = _parse(bytes(row.body))
        if report is None or report.collection_key != rules.key:
            rejected["leader", REPORT_MALFORMED] += 1  # the upload parsed it: only a corrupted row lands here
        else:
            reports.append((row, report))

    # Each aggregator's own record, in its own store, of the tokens other jobs spent: a replayed job
    # gets the verdicts it got the first time.
    spent: dict[str, set[str]] = {}
    digests = {report.token.digest for _, report in reports}
    for aggregator in AGGREGATORS:
        for digest in (
            SpentToken.objects.using(aggregator.store)
            .filter(role=aggregator.role, collection_key=rules.key, token_digest__in=digests)
            .exclude(job=job)
            .values_list("token_digest", flat=True)
        ):
            spent.setdefault(digest, set()).add(aggregator.role)

    every_role = {aggregator.role for aggregator in AGGREGATORS}
    accepted: set[str] = set()
    batches: dict[str, _BatchSum] = {}
    # One pass checks each token's first report in the chunk, all at once (Prio3's verification is
    # vectorised across them); a report whose token an earlier one spent is reused, and one whose
    # token's earlier report was rejected waits for the next pass (as if checked in order).
    waiting = reports
    while waiting:
        this_pass, later, seen = [], [], set()
        for row, report in waiting:
            digest = report.token.digest
            if digest in accepted:
                for role in every_role:
                    rejected[role, TOKEN_REUSED] += 1
            elif digest in seen:
                later.append((row, report))
            else:
                seen.add(digest)
                this_pass.append((row, report))
        checks = reports_check(
            [report for _, report in this_pass],
            rules=rules,
            issuer=issuer,
            spent_at=[spent.get(report.token.digest, set()) for _, report in this_pass],
            private_keys=private_keys,
        )
        for (row, report), check in zip(this_pass, checks, strict=True):
            if not check.accepted:
                for role, reason in check.reasons.items():
                    rejected[role, reason] += 1
                continue
            accepted.add(report.token.digest)
            batch = batches.setdefault(report.batch_key, _BatchSum())
            for role, output in check.outputs.items():
                batch.shares[role].append(output)
            batch.arrivals.append(row.received_at.timestamp())
        waiting = later

    return batches, accepted, rejected


def _job_store(
    aggregator: Aggregator,
    rules: CollectionRules,
    job: str,
    batches: dict[str, _BatchSum],
    sums: dict[str, dict[str, bytes]],
    accepted: set[str],
    rejected: Counter[tuple[str, str]],
) -> None:
    """One aggregator's part of a job, in its own store: the sum of its own output shares of each
    batch's accepted reports (pair id: the job), the tokens it spent, its rejection counts."""
    for batch_key, batch in sorted(batches.items()):
        output_share_store(
            role=aggregator.role,
            rules=rules,
            batch_key=batch_key,
            source=f"{REPORT_SOURCE}{job}",
            pair=job,
            output=sums[batch_key][aggregator.role],
            reports=len(batch.arrivals),
            arrivals=np.asarray(batch.arrivals, dtype="<f8").tobytes(),
            check_open=False,
        )
    SpentToken.objects.using(aggregator.store).bulk_create(
        SpentToken(role=aggregator.role, collection_key=rules.key, token_digest=digest, job=job)
        for digest in sorted(accepted)
    )
    mine = {key: count for key, count in rejected.items() if key[0] == aggregator.role}
    if mine:
        rejections_add(collection_key=rules.key, counts=mine)


def _parse(body: bytes) -> wire.Report | None:
    try:
        # A stored body may predate the current wire version: the aggregators still open those.
        return wire.report_parse(json.loads(body), versions=STORED_VERSIONS)
    except (UnicodeDecodeError, ValueError):  # WireError is a ValueError
        return None
