"""The aggregators' side of a collection: open its rules, aggregate its batches, or discard it.

Each batch's aggregate shares (or refusals) go to the collector (analyses.services.collector), which
combines them and estimates: nothing here reads an estimate.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import transaction

from aggregation.aggregators import HELPER as HELPER_AGGREGATOR
from aggregation.aggregators import LEADER, AggregateShare, BatchRefused
from aggregation.ingest import reports_ingest
from aggregation.models import Collection, CollectionRules, HelperJob, HelperShare, LeaderShare, PendingReport
from pfs_base.db_router import DEFAULT, HELPER
from privacy.aggregator_noise import AggregatorGaussian
from privacy.report_vdaf import KINDS, MULTIHOT


def collection_rules_open(
    *,
    key: str,
    length: int,
    min_cohort: int,
    weight_bound: int,
    noise: AggregatorGaussian | None = None,
    expected_rate: float | None = None,
    rate_window: float = 60.0,
    vdaf: str = MULTIHOT,
) -> CollectionRules:
    """Configure both aggregators for a collection (idempotent: a second call returns the first rules).

    ``vdaf``: the Prio3 every uploaded report is verified with (privacy.report_vdaf.report_shape of
    the recipe); each collection gets its own fresh verification key. Each aggregator keeps its own
    copy of the rules, with the same verification key, in its own store.
    """
    if vdaf not in KINDS:
        raise ValueError(f"unknown report kind {vdaf!r}; known: {', '.join(KINDS)}")
    rules, opened = CollectionRules.objects.using(DEFAULT).get_or_create(
        key=key,
        defaults={
            "length": length,
            "min_cohort": min_cohort,
            "weight_bound": weight_bound,
            "noise_epsilon": noise.epsilon if noise else None,
            "noise_delta": noise.delta if noise else None,
            "expected_rate": expected_rate,
            "rate_window": rate_window,
            "vdaf": vdaf,
        },
    )
    copied = {
        field.name: getattr(rules, field.name)
        for field in CollectionRules._meta.concrete_fields
        if field.name not in ("id", "key", "created_at")
    }
    # Written now, committed at once in the helper's store: should the caller's transaction roll the
    # leader's rules back, a later opening of the key replaces this copy rather than keeping a stale one.
    helper_rules = CollectionRules.objects.using(HELPER)
    if opened:
        helper_rules.update_or_create(key=key, defaults=copied)
    else:
        helper_rules.get_or_create(key=key, defaults=copied)
    # The same opening time: which retired keys may open its shares depends on it.
    helper_rules.filter(key=key).update(created_at=rules.created_at)
    return rules


def collection_discard(*, collection_key: str) -> None:
    """Close a collection that will never be released and drop every share stored for it, in both stores."""
    with transaction.atomic(using=DEFAULT), transaction.atomic(using=HELPER):
        for store, share in ((DEFAULT, LeaderShare), (HELPER, HelperShare)):
            CollectionRules.objects.using(store).filter(key=collection_key).update(closed=True)
            share.objects.using(store).filter(collection__key=collection_key).delete()
            Collection.objects.using(store).filter(key=collection_key).delete()
        HelperJob.objects.using(HELPER).filter(collection_key=collection_key).delete()
        PendingReport.objects.filter(collection_key=collection_key).delete()


@dataclass(frozen=True)
class BatchAggregates:
    """One batch's aggregate share from each aggregator, or its refusal to release the batch."""

    collection_key: str
    batch_key: str
    leader: AggregateShare | BatchRefused
    helper: AggregateShare | BatchRefused

    def __str__(self) -> str:
        return f"{self.collection_key} [{self.batch_key or 'all'}]"  # as the batch's Collection row says it


def collection_aggregate(*, collection_key: str) -> list[BatchAggregates]:
    """Close a collection and aggregate every batch with both aggregators (each deletes its shares).

    The collector's transaction: call this inside one transaction on each store
    (analyses.services.collector.collection_release opens them), which also holds the collector's
    estimates and the caller's stored release, so that a failure releases nothing and loses nothing
    and a retried aggregation is a no-op. (The helper's commits first: should the leader's commit
    then fail, the helper lacks the pairs the leader names, and a retry refuses those batches —
    fail closed.) The uploads still pending are verified first (aggregation.ingest): a collection
    is closed before its release, so they are all the reports it received.
    """
    with transaction.atomic(using=DEFAULT, savepoint=False), transaction.atomic(using=HELPER, savepoint=False):
        # From here on late reports are rejected: their shares would never be aggregated. (A device
        # round's collection is closed already: no row lock then, so late uploads are answered at once.)
        for aggregator in (LEADER, HELPER_AGGREGATOR):
            CollectionRules.objects.using(aggregator.store).filter(key=collection_key, closed=False).update(closed=True)
        reports_ingest(collection_key=collection_key, wait=True)
        leaders = LEADER.aggregate(collection_key)
        # The leader's aggregate request: per batch, the pair ids it summed (no report content).
        helpers = HELPER_AGGREGATOR.aggregate(
            collection_key, pairs={batch_key: result.pairs for batch_key, result in leaders.items()}
        )
        HelperJob.objects.using(HELPER).filter(collection_key=collection_key).delete()
        collections = list(Collection.objects.filter(key=collection_key).order_by("batch_key"))
        return [
            BatchAggregates(
                collection_key=collection_key,
                batch_key=collection.batch_key,
                leader=leaders[collection.batch_key],
                helper=helpers[collection.batch_key],
            )
            for collection in collections
        ]
