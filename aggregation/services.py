"""The aggregators' side of a collection: open its rules, aggregate its batches, or discard it.

The leader does its part in its own store and asks the helper's of the helper's service
(aggregation.helper_client): the task's configuration, the aggregate shares, the discard. Each
batch's aggregate shares (or refusals) go to the collector (analyses.services.collector), which
combines them and estimates: nothing here reads an estimate.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
from django.db import transaction

from aggregation import dap, helper_client
from aggregation.aggregators import LEADER, AggregateShare, BatchRefused
from aggregation.ingest import reports_ingest
from aggregation.issuer import issued_statement
from aggregation.keys import KeysUnavailable
from aggregation.models import FIELD64, Collection, CollectionRules, LeaderShare, PendingReport
from aggregation.statements import IssuedStatement
from pfs_base.db_router import DEFAULT
from pfs_device.tokens import IssuerPublicKey
from privacy.aggregator_noise import AggregatorNoise
from privacy.report_vdaf import KINDS, MULTIHOT

logger = logging.getLogger(__name__)


def collection_rules_open(
    *,
    key: str,
    length: int,
    min_cohort: int,
    weight_bound: int,
    noise: AggregatorNoise | None = None,
    vdaf: str = MULTIHOT,
    token_key: IssuerPublicKey | None = None,
    provision: bool = True,
) -> CollectionRules:
    """Configure both aggregators for a collection (idempotent: a second call returns the first rules).

    ``vdaf``: the Prio3 every uploaded report is verified with (privacy.report_vdaf.report_shape of
    the recipe); each collection gets its own fresh verification key. ``token_key``: the issuer's
    key of a real fleet's collection, whose devices' tokens both aggregators check; None for a
    simulated fleet's (whose shares the helper takes from the simulator, and no device's report).
    The leader keeps its rules in its store; the helper is provisioned with the same over HTTP
    (aggregation.dap.TaskConfig) and keeps its own copy, which nothing later can change.
    ``provision=False``: not now (a round's start, which must not wait for the helper): the round's
    dispatch and every ingestion run provision it first (helper_client.task_provision, idempotent).
    """
    if vdaf not in KINDS:
        raise ValueError(f"unknown report kind {vdaf!r}; known: {', '.join(KINDS)}")
    rules, _ = CollectionRules.objects.using(DEFAULT).get_or_create(
        key=key,
        defaults={
            "length": length,
            "min_cohort": min_cohort,
            "weight_bound": weight_bound,
            "noise_epsilon": noise.epsilon if noise else None,
            "noise_delta": noise.delta if noise else None,
            "vdaf": vdaf,
            "token_key": None if token_key is None else {"n": str(token_key.modulus), "e": str(token_key.exponent)},
        },
    )
    if provision:
        helper_client.task_provision(rules)
    return rules


def collection_provision(*, collection_key: str) -> None:
    """Provision the helper's task of a collection from the leader's rules (idempotent; none: nothing)."""
    rules = CollectionRules.objects.filter(key=collection_key).first()
    if rules is not None:
        helper_client.task_provision(rules)


def collection_discard(*, collection_key: str) -> None:
    """Close a collection that will never be released and drop every share stored for it, at both
    aggregators. The helper's part is asked once; a helper that does not answer keeps its shares of
    the collection (uniformly random vectors, never released: nothing will ask for them)."""
    with transaction.atomic(using=DEFAULT):
        CollectionRules.objects.filter(key=collection_key).update(closed=True)
        LeaderShare.objects.filter(collection__key=collection_key).delete()
        Collection.objects.filter(key=collection_key).delete()
        PendingReport.objects.filter(collection_key=collection_key).delete()
    try:
        helper_client.task_delete(collection_key)
    except (helper_client.HelperUnavailable, helper_client.HelperRefused) as error:
        logger.warning("the helper did not discard collection %s: %s", collection_key, error)


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

    The collector's transaction: call this inside one transaction on the leader's store
    (analyses.services.collector.collection_release opens it), which also holds the collector's
    estimates and the caller's stored release, so that a failure releases nothing and loses nothing
    and a retried aggregation is a no-op. The uploads still pending are verified first
    (aggregation.ingest): a collection is closed before its release, so they are all the reports it
    received. Then the leader sums its shares and asks the helper's (AggregateShareReq: per batch,
    the pair ids it summed, no report content). The helper answers once and keeps its answer: should
    the leader's transaction fail after it, the retry's identical request gets the identical shares.
    A helper that does not answer: HelperUnavailable, the transaction rolls back, nothing is released.
    """
    with transaction.atomic(using=DEFAULT, savepoint=False):
        # From here on late reports are rejected: their shares would never be aggregated. (A device
        # round's collection is closed already: no row lock then, so late uploads are answered at once.)
        CollectionRules.objects.filter(key=collection_key, closed=False).update(closed=True)
        reports_ingest(collection_key=collection_key, wait=True)
        # Real devices: the issuer's signed count of its tokens, the one both aggregators validate against.
        statement = _issued_statement(collection_key)
        leaders = LEADER.aggregate(collection_key, issued=None if statement is None else statement.issued)
        answer = helper_client.aggregate_shares(
            dap.AggregateShareReq(
                collection=collection_key,
                batches={batch: list(result.pairs) for batch, result in leaders.items()},
                issued_statement=None if statement is None else statement.as_json(),
            )
        )
        collections = list(Collection.objects.filter(key=collection_key).order_by("batch_key"))
        return [
            BatchAggregates(
                collection_key=collection_key,
                batch_key=collection.batch_key,
                leader=leaders[collection.batch_key],
                helper=_helper_result(answer.batches.get(collection.batch_key), leaders[collection.batch_key]),
            )
            for collection in collections
        ]


def _issued_statement(collection_key: str) -> IssuedStatement | None:
    """The issuer's statement for a collection of real devices; None for a simulated fleet's, or where
    the issuer holds no statement key (both aggregators then refuse the devices' batches: fail closed)."""
    rules = CollectionRules.objects.filter(key=collection_key).first()
    if rules is None or rules.token_key is None:
        return None
    try:
        return issued_statement(collection_key)
    except KeysUnavailable:
        logger.error("no issuer statement for %s: the issuer has no statement key", collection_key)
        return None


def _helper_result(
    share: dap.BatchShare | None, leader: AggregateShare | BatchRefused
) -> AggregateShare | BatchRefused:
    """The helper's answer for one batch, as the collector reads it."""
    if share is None:  # the helper answered for other batches than the leader named: fail closed
        return BatchRefused(min_cohort=leader.min_cohort, reason="helper: no aggregate share of the batch", empty=False)
    if share.refused is not None:
        return BatchRefused(
            min_cohort=share.min_cohort, reason=share.refused, empty=share.empty, pairs=tuple(share.pairs)
        )
    data = dap.unb64(share.share, "share")
    if share.field == FIELD64:
        vector: np.ndarray | list[int] = np.frombuffer(data, dtype="<u8").astype(np.uint64)
    else:
        vector = [int.from_bytes(data[i : i + 16], "little") for i in range(0, len(data), 16)]
    return AggregateShare(
        vector=vector,
        reports=share.reports or 0,
        min_cohort=share.min_cohort,
        field=share.field or FIELD64,
        pairs=tuple(share.pairs),
    )
