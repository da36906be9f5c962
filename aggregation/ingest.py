"""Verifying uploaded reports in bulk: the leader's aggregation jobs on a collection's pending reports.

The upload endpoint only stores what arrives (aggregation.intake → PendingReport). Here, a chunk
at a time, each report gets the protocol of aggregation.reports.reports_check: the leader's checks
(the token's signature, its spent record, its own share opened, verify_init), then one aggregation
job at the helper (aggregation.helper_client, DAP's interaction: the helper checks and commits its
own part before it answers), then the leader's verify_next. A token seen twice in a chunk is
accepted once. The leader's accepted output shares of a chunk are summed per batch and stored as one
share each with the count of reports in it and their arrival times (rate validation reads them);
its spent tokens are recorded, the rejections counted by reason, and the pending rows deleted.

The two aggregators share no transaction (nor any store), so a chunk is an aggregation job with a
durable id: T0 assigns the rows the job id (committed); T1 locks them (a concurrent run skips a job
another holds), runs the job and stores the leader's part under the same pair id (the job), deletes
the rows and commits. The helper commits its part when it answers, idempotently by job id: should
T1 fail after that (or the helper's answer be lost), the rows keep their job id, the next run
resumes the same job with the same request, the helper answers it as it did, and every report is
counted exactly once. While the helper does not answer (helper_client.HelperUnavailable) the rows
wait, assigned, for the next run.

Runs from a task while the collection is open (aggregation.tasks, for progress), and always
before a collection is released (aggregation.services.collection_aggregate drains it first).
"""

from __future__ import annotations

import json
import secrets
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import psycopg
from django.db import IntegrityError, connection, transaction
from django.db.models import QuerySet

from aggregation.aggregators import LEADER, REPORT_SOURCE, STORED_VERSIONS, rules_shape
from aggregation.heavy_hitters_uploads import uploads_job
from aggregation.issuer import issuer_public_key
from aggregation.models import CollectionRules, PendingReport, SpentToken
from aggregation.reports import REPORT_MALFORMED, TOKEN_REUSED, rejections_add, reports_check
from aggregation.upload import output_share_store
from aggregation.verification import VerifyConfig, output_sum
from pfs_base import metrics
from pfs_device import wire
from pfs_device.tokens import IssuerPublicKey
from privacy.heavy_hitters import VDAF as POPLAR1

# The verification task's stable name (aggregation.tasks): the upload path sends it by name.
INGEST_TASK = "aggregation.tasks.ingest_reports"

# Reports per job. Each costs about 1 ms of checks (an RSA verification, two HPKE opens, both
# aggregators' Prio3 verification, the helper's in its own process), so a chunk holds its row locks
# for about half a second and commits once for 500 reports.
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
    """One batch's accepted output shares of the leader (encoded) in a chunk, and when they arrived."""

    shares: list[bytes] = field(default_factory=list)
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
    private_key = LEADER.private_key()
    passed: set[str] = set()  # jobs another run held or finished
    while limit is None or result.verified < limit:
        size = chunk if limit is None else min(chunk, limit - result.verified)
        for attempt in range(ATTEMPTS):
            try:
                job = _job_take(rules.key, size=size, wait=wait, passed=passed)
                done = None if job is None else _job_run(rules, issuer, private_key, job, wait=wait)
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
        # The rows' ids and jobs only: their bodies (about 25 KB each at 1,024 buckets) are read
        # once, by the run that verifies them.
        pending = PendingReport.objects.filter(collection_key=collection_key).order_by("pk").only("pk", "job")
        skip = not wait and connection.features.has_select_for_update_skip_locked
        started = pending.filter(job__isnull=False).exclude(job__in=passed).select_for_update(skip_locked=skip).first()
        if started is not None:
            return started.job
        rows = list(pending.filter(job__isnull=True).select_for_update(skip_locked=skip)[:size])
        if not rows:
            return None
        # Unique for good, at the helper too (which keys its answers by it): a leader's store restored
        # from a backup may give out its pending ids again.
        job = f"chunk:{rows[0].pk}-{rows[-1].pk}:{secrets.token_hex(8)}"
        PendingReport.objects.filter(pk__in=[row.pk for row in rows]).update(job=job)
        return job


def _job_run(
    rules: CollectionRules,
    issuer: IssuerPublicKey,
    private_key: bytes,
    job: str,
    *,
    wait: bool,
) -> IngestResult | None:
    """The leader's transaction T1, holding all the job's rows from the checks to its commit (a
    concurrent run skips them): the job at the helper (which commits its part, idempotent by job),
    then the leader's part. None when another run holds or finished the job."""
    with transaction.atomic():
        skip = not wait and connection.features.has_select_for_update_skip_locked
        of_job = PendingReport.objects.filter(collection_key=rules.key, job=job).order_by("pk")
        # Whoever locks a job's first row owns the job: it then waits for the rest (a moment: only
        # another run's T0 holds one), and a run that cannot have the first row passes the job over.
        # All of the job or nothing: a run on part of it would store the job under its id for good.
        first = of_job.values_list("pk", flat=True).first()
        if first is None or not list(of_job.filter(pk=first).select_for_update(skip_locked=skip).values_list("pk")):
            return None
        rows = _rows_locked(of_job)
        if rules.vdaf == POPLAR1:  # heavy hitters: each report kept whole by both, for the walk's levels
            kept, refused = uploads_job(
                rules, issuer, private_key, job, [(row, _parse(bytes(row.body))) for row in rows]
            )
            PendingReport.objects.filter(pk__in=[row.pk for row in rows]).delete()
            metrics.reports_counted(accepted=kept)
            return IngestResult(accepted=kept, rejected=refused, chunks=1)
        batches, accepted, rejected = _job_check(rules, issuer, private_key, job, rows)
        config = VerifyConfig.of(collection_key=rules.key, shape=rules_shape(rules), verify_key=bytes(rules.verify_key))
        sums = {batch_key: output_sum(config, batch.shares) for batch_key, batch in batches.items()}
        _job_store(rules, job, batches, sums, accepted, rejected)
        PendingReport.objects.filter(pk__in=[row.pk for row in rows]).delete()
    result = IngestResult(
        accepted=sum(len(b.arrivals) for b in batches.values()), rejected=len(rows) - len(accepted), chunks=1
    )
    metrics.reports_counted(accepted=result.accepted)
    return result


def _job_check(
    rules: CollectionRules,
    issuer: IssuerPublicKey,
    private_key: bytes,
    job: str,
    rows: list[PendingReport],
) -> tuple[dict[tuple[str, str], _BatchSum], set[str], Counter[tuple[str, str]]]:
    """Both aggregators' checks on a job's reports, with nothing of the leader's written: the
    leader's accepted output shares by (the pass's job id, batch), the tokens accepted, the
    rejections by (role, reason).

    A token's first report in the chunk is checked in the job's first pass; a report whose token an
    earlier one spent is reused, and one whose token's earlier report was rejected waits for the
    next pass (as if checked in order), which is an aggregation job of its own (``<job>.<pass>``)."""
    reports = []
    rejected: Counter[tuple[str, str]] = Counter()
    for row in rows:
        report = _parse(bytes(row.body))
        if report is None or report.collection_key != rules.key:
            rejected["leader", REPORT_MALFORMED] += 1  # the upload parsed it: only a corrupted row lands here
        else:
            reports.append((row, report))

    # The leader's record of the tokens other jobs spent: a replayed job gets the verdicts it got the
    # first time (the helper keeps its own, and answers a replayed job as it did).
    digests = {report.token.digest for _, report in reports}
    spent = set(
        SpentToken.objects.filter(role=LEADER.role, collection_key=rules.key, token_digest__in=digests)
        .exclude(job=job)
        .values_list("token_digest", flat=True)
    )

    accepted: set[str] = set()
    batches: dict[tuple[str, str], _BatchSum] = {}
    waiting, number = reports, 0
    while waiting:
        this_pass, later, seen = [], [], set()
        for row, report in waiting:
            digest = report.token.digest
            if digest in accepted:
                rejected["leader", TOKEN_REUSED] += 1
            elif digest in seen:
                later.append((row, report))
            else:
                seen.add(digest)
                this_pass.append((row, report))
        pass_job = job if number == 0 else f"{job}.{number}"
        checks = reports_check(
            [report for _, report in this_pass],
            rules=rules,
            issuer=issuer,
            spent=spent,
            job=pass_job,
            times=[row.received_at.timestamp() for row, _ in this_pass],
            private_key=private_key,
        )
        for (row, report), check in zip(this_pass, checks, strict=True):
            if not check.accepted:
                for role, reason in check.reasons.items():
                    rejected[role, reason] += 1
                continue
            accepted.add(report.token.digest)
            batch = batches.setdefault((pass_job, report.batch_key), _BatchSum())
            batch.shares.append(check.output)
            batch.arrivals.append(row.received_at.timestamp())
        waiting, number = later, number + 1

    return batches, accepted, rejected


def _job_store(
    rules: CollectionRules,
    job: str,
    batches: dict[tuple[str, str], _BatchSum],
    sums: dict[tuple[str, str], bytes],
    accepted: set[str],
    rejected: Counter[tuple[str, str]],
) -> None:
    """The leader's part of a job: the sum of its output shares of each batch's accepted reports,
    one per pass (pair id: the pass's job id, as at the helper), the tokens it spent, the rejection counts."""
    for (pass_job, batch_key), batch in sorted(batches.items()):
        output_share_store(
            role=LEADER.role,
            rules=rules,
            batch_key=batch_key,
            source=f"{REPORT_SOURCE}{pass_job}",
            pair=pass_job,
            output=sums[pass_job, batch_key],
            reports=len(batch.arrivals),
            arrivals=np.asarray(batch.arrivals, dtype="<f8").tobytes(),
            check_open=False,
        )
    SpentToken.objects.bulk_create(
        SpentToken(role=LEADER.role, collection_key=rules.key, token_digest=digest, job=job)
        for digest in sorted(accepted)
    )
    if rejected:
        rejections_add(collection_key=rules.key, counts=dict(rejected))


def _rows_locked(of_job: QuerySet[PendingReport]) -> list[PendingReport]:
    """The job's rows, locked. From PostgreSQL the bodies come in the binary format: in the text
    format (Django's client-side cursors) bytea travels hex-encoded, twice its size, and decoding a
    job's 12 MB cost the leader about 0.1 ms a report of its 0.9 (bench/results/upload_prio3.md)."""
    locked = of_job.select_for_update()
    if connection.vendor != "postgresql":
        return list(locked)
    sql, params = locked.query.get_compiler(using=locked.db).as_sql()
    fields = PendingReport._meta.concrete_fields
    connection.ensure_connection()
    # A server-side-binding cursor on the same connection, so in the same transaction.
    with psycopg.Cursor(connection.connection) as cursor:
        cursor.execute(sql, params, binary=True)
        if [column.name for column in cursor.description] != [f.column for f in fields]:
            raise AssertionError("the job's query selects other columns than PendingReport's")
        names = [f.attname for f in fields]
        return [PendingReport.from_db(locked.db, names, row) for row in cursor]


def _parse(body: bytes) -> wire.Report | None:
    try:
        # A stored body may predate the current wire version: the aggregators still open those.
        return wire.report_parse(json.loads(body), versions=STORED_VERSIONS)
    except (UnicodeDecodeError, ValueError):  # WireError is a ValueError
        return None
