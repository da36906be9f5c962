"""The per-report path of the tests: both aggregators' checks on one report, and its shares stored.

Devices' uploads are verified in bulk (aggregation.ingest, a chunk of pending reports per job);
the tests check the protocol report by report, with the same checks (aggregation.reports.reports_check)
and the same stores, as an aggregation job of one report: the helper's output share and spent token
first, in one transaction on its own store, then the leader's on the default store.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import IntegrityError, connections, transaction

from aggregation.aggregators import AGGREGATORS, LEADER, REPORT_SOURCE
from aggregation.aggregators import HELPER as HELPER_AGGREGATOR
from aggregation.issuer import issuer_public_key
from aggregation.models import CollectionRules, SpentToken
from aggregation.reports import (
    COLLECTION_CLOSED,
    TOKEN_REUSED,
    UNKNOWN_COLLECTION,
    collection_rules_get,
    helper_job_begin,
    rejections_add,
    reports_check,
)
from aggregation.upload import CollectionClosed, output_share_store
from pfs_base import metrics
from pfs_base.db_router import DEFAULT
from pfs_device.wire import Report


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
        return _rejected(report.collection_key, {a.role: COLLECTION_CLOSED for a in AGGREGATORS})
    issuer = issuer_public_key(report.collection_key)
    job = f"{REPORT_SOURCE}{report.token.digest}"  # a job of one report: a replay is the same job
    (check,) = reports_check([report], rules=rules, issuer=issuer, spent_at=[_spent_at(report, job=job)])
    if not check.accepted:
        return _rejected(report.collection_key, check.reasons)
    try:
        for aggregator in (HELPER_AGGREGATOR, LEADER):  # the helper's first, committed
            with transaction.atomic(using=aggregator.store):
                _hold_open(report.collection_key, using=aggregator.store)
                if aggregator is HELPER_AGGREGATOR and not helper_job_begin(report.collection_key, job):
                    continue  # stored by an earlier attempt of this job
                SpentToken.objects.using(aggregator.store).create(
                    role=aggregator.role,
                    collection_key=report.collection_key,
                    token_digest=report.token.digest,
                    job=job,
                )
                output_share_store(
                    role=aggregator.role,
                    rules=rules,
                    batch_key=report.batch_key,
                    source=job,
                    pair=job,
                    output=check.outputs[aggregator.role],
                    reports=1,
                )
    except IntegrityError:  # the same token raced in concurrently: it was spent meanwhile
        return _rejected(report.collection_key, {a.role: TOKEN_REUSED for a in AGGREGATORS})
    except CollectionClosed:  # closed while the report was being checked
        return _rejected(report.collection_key, {a.role: COLLECTION_CLOSED for a in AGGREGATORS})
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


def _spent_at(report: Report, *, job: str) -> set[str]:
    """The aggregators that have accepted the report's token before, in another job than ``job``
    (each reads its own record in its own store)."""
    return {
        aggregator.role
        for aggregator in AGGREGATORS
        if SpentToken.objects.using(aggregator.store)
        .filter(role=aggregator.role, collection_key=report.collection_key, token_digest=report.token.digest)
        .exclude(job=job)
        .exists()
    }


def _rejected(collection_key: str, reasons: dict[str, str]) -> ReportOutcome:
    rejections_add(collection_key=collection_key, counts={(role, reason): 1 for role, reason in reasons.items()})
    return ReportOutcome(accepted=False, reason=next(iter(reasons.values())))
