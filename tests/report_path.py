"""The per-report path of the tests: both aggregators' checks on one report, and its shares stored.

Devices' uploads are verified in bulk (aggregation.ingest, a chunk of pending reports per job);
the tests check the protocol report by report, with the same checks (aggregation.reports.reports_check)
as an aggregation job of one report: the helper checks and commits its part in the job (through
its views, aggregation.helper_client), then the leader stores its own on the default store.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from django.db import IntegrityError, connections, transaction

from aggregation.aggregators import LEADER, REPORT_SOURCE
from aggregation.batch_rules import arrival_coarse
from aggregation.issuer import issuer_public_key
from aggregation.models import CollectionRules, SpentToken
from aggregation.reports import (
    COLLECTION_CLOSED,
    TOKEN_REUSED,
    UNKNOWN_COLLECTION,
    collection_rules_get,
    rejections_add,
    reports_check,
)
from aggregation.upload import CollectionClosed, output_share_store
from pfs_base import metrics
from pfs_base.db_router import DEFAULT
from pfs_device.wire import Report, report_bytes


@dataclass(frozen=True)
class ReportOutcome:
    accepted: bool
    reason: str = ""  # the first aggregator's reason when rejected


def report_submit(report: Report, *, rules: CollectionRules | None = None) -> ReportOutcome:
    """Run both aggregators' checks on one report and store its shares if both accept.

    ``rules``: the collection's rules when the caller has read them already (saves a query).
    """
    if rules is None or rules.key != report.collection_key:
        rules = collection_rules_get(collection_key=report.collection_key)
    if rules is None:
        return ReportOutcome(accepted=False, reason=UNKNOWN_COLLECTION)
    if rules.closed:
        return _rejected(report.collection_key, {"leader": COLLECTION_CLOSED})
    issuer = issuer_public_key(report.collection_key)
    # A job of one report, named by its content: a replay of the same report is the same job.
    job = f"{REPORT_SOURCE}{hashlib.sha256(report_bytes(report)).hexdigest()[:32]}"
    spent = set(
        SpentToken.objects.filter(
            role=LEADER.role, collection_key=report.collection_key, token_digest=report.token.digest
        )
        .exclude(job=job)
        .values_list("token_digest", flat=True)
    )
    (check,) = reports_check(
        [report], rules=rules, issuer=issuer, spent=spent, job=job, times=[arrival_coarse().timestamp()]
    )
    if not check.accepted:
        return _rejected(report.collection_key, check.reasons)
    try:
        with transaction.atomic():
            _hold_open(report.collection_key)
            SpentToken.objects.create(
                role=LEADER.role, collection_key=report.collection_key, token_digest=report.token.digest, job=job
            )
            output_share_store(
                role=LEADER.role,
                rules=rules,
                batch_key=report.batch_key,
                source=job,
                pair=job,
                output=check.output,
                reports=1,
            )
    except IntegrityError:  # the same token raced in concurrently: it was spent meanwhile
        return _rejected(report.collection_key, {"leader": TOKEN_REUSED})
    except CollectionClosed:  # closed while the report was being checked
        return _rejected(report.collection_key, {"leader": COLLECTION_CLOSED})
    metrics.reports_counted(accepted=1)
    return ReportOutcome(accepted=True)


def _hold_open(collection_key: str, *, using: str = DEFAULT) -> None:
    """Inside the storing transaction: keep the collection from closing until it commits.

    PostgreSQL: a FOR SHARE row lock, which uploads share with each other but an UPDATE that
    closes the collection waits for (share_pair_upload then checks ``closed`` again). SQLite takes
    the database's write lock when the transaction starts, which serialises the same way.
    """
    if connections[using].vendor == "postgresql":
        with connections[using].cursor() as cursor:
            cursor.execute(
                f"SELECT 1 FROM {CollectionRules._meta.db_table} WHERE key = %s FOR SHARE",  # noqa: S608 (a model's table)
                [collection_key],
            )


def _rejected(collection_key: str, reasons: dict[str, str]) -> ReportOutcome:
    rejections_add(collection_key=collection_key, counts={(role, reason): 1 for role, reason in reasons.items()})
    return ReportOutcome(accepted=False, reason=next(iter(reasons.values())))
