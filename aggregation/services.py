"""The collector: aggregate every batch of a collection with both aggregators, then estimate."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from django.db import transaction

from aggregation.aggregators import HELPER as HELPER_AGGREGATOR
from aggregation.aggregators import LEADER, AggregateShare, combine_aggregates
from aggregation.ingest import reports_ingest
from aggregation.models import Collection, CollectionRules, HelperJob, HelperShare, LeaderShare, PendingReport
from pfs_base.db_router import DEFAULT, HELPER
from privacy.aggregator_noise import AggregatorGaussian
from privacy.field import FieldVector, to_counts, to_signed
from privacy.mechanisms import mechanism_get
from privacy.report_vdaf import KINDS, MULTIHOT


@dataclass(frozen=True)
class BatchEstimate:
    batch_key: str
    reports: int | None  # None when suppressed: a suppressed batch's size is never released
    min_cohort: int
    suppressed: bool
    reason: str = ""
    answered: bool = True  # some device's report is in it (it spent budget); never more than that
    estimates: np.ndarray | None = None  # float64 per bucket
    standard_errors: np.ndarray | None = None

    def as_json(self) -> dict:
        result = {
            "cohort": self.batch_key,
            "reports": self.reports,
            "min_cohort": self.min_cohort,
            "suppressed": self.suppressed,
        }
        if self.suppressed:
            result["reason"] = self.reason
            return result
        # Intervals are derived when the release is shown (privacy.intervals), not stored.
        result.update(estimates=self.estimates.tolist(), standard_errors=self.standard_errors.tolist())
        return result


class ClientNoiseEstimator:
    """Reports were randomized on the devices: debias the sum with the mechanism's estimator."""

    def __init__(self, *, mechanism: str, epsilon0: float, domain_size: int) -> None:
        self.oracle = mechanism_get(mechanism, epsilon0)
        self.domain_size = domain_size

    def estimate(self, total: FieldVector, reports: int) -> tuple[np.ndarray, np.ndarray]:
        counts = to_counts(total, bound=reports)
        estimates = self.oracle.debias(counts, reports, self.domain_size)
        return estimates, np.sqrt(self.oracle.variance(estimates, reports, self.domain_size))


class AggregatorNoiseEstimator:
    """Each aggregator added discrete Gaussian noise: the noisy sum is the (unbiased) estimate."""

    # Beyond 40 standard deviations the noise has probability below 1e-300: a value there means
    # mixed-up shares, not noise.
    TAIL = 40

    def __init__(self, *, epsilon: float, delta: float, domain_size: int) -> None:
        self.noise = AggregatorGaussian(epsilon, delta)
        self.domain_size = domain_size

    def estimate(self, total: FieldVector, reports: int) -> tuple[np.ndarray, np.ndarray]:
        error = self.noise.standard_error()
        slack = math.ceil(self.TAIL * error)
        estimates = to_signed(total, low=-slack, high=reports + slack).astype(np.float64)
        return estimates, np.full(estimates.size, error)


Estimator = ClientNoiseEstimator | AggregatorNoiseEstimator


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


def collection_release(*, collection_key: str, estimator: Estimator) -> list[BatchEstimate]:
    """Aggregate, combine and estimate each batch of a collection; batches below the cohort are suppressed.

    Runs in one transaction on each store with the deletion of the shares, so that a failure
    releases nothing and loses nothing, and a caller that stores the release in the same transaction
    makes a retried aggregation a no-op. (The helper's commits first: should the leader's commit
    then fail, the helper lacks the pairs the leader names, and a retry refuses those batches —
    fail closed.) The uploads still pending are verified first (aggregation.ingest): a collection
    is closed before its release, so they are all the reports it received.
    """
    results: list[BatchEstimate] = []
    with transaction.atomic(using=DEFAULT), transaction.atomic(using=HELPER):
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
        for collection in collections:
            leader, helper = leaders[collection.batch_key], helpers[collection.batch_key]
            if not isinstance(leader, AggregateShare) or not isinstance(helper, AggregateShare):
                refusal = leader if not isinstance(leader, AggregateShare) else helper
                results.append(
                    BatchEstimate(
                        batch_key=collection.batch_key,
                        reports=None,
                        min_cohort=refusal.min_cohort,
                        suppressed=True,
                        reason=refusal.reason,
                        answered=not refusal.empty,
                    )
                )
                continue
            if leader.reports != helper.reports:
                raise RuntimeError(f"aggregators disagree on the report count of {collection}")
            estimates, errors = estimator.estimate(combine_aggregates(leader, helper), leader.reports)
            if not (np.isfinite(estimates).all() and np.isfinite(errors).all()):
                raise ValueError(f"an estimate of {collection} is not finite")
            results.append(
                BatchEstimate(
                    batch_key=collection.batch_key,
                    reports=leader.reports,
                    min_cohort=leader.min_cohort,
                    suppressed=False,
                    estimates=estimates,
                    standard_errors=errors,
                )
            )
    return results
