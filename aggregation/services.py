"""The collector: aggregate every batch of a collection with both aggregators, then debias."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from django.db import transaction

from aggregation.aggregators import HELPER, LEADER, AggregateShare, combine_aggregates
from aggregation.models import Collection
from privacy.field import to_counts
from privacy.mechanisms import mechanism_get


@dataclass(frozen=True)
class BatchEstimate:
    batch_key: str
    reports: int
    min_cohort: int
    suppressed: bool
    reason: str = ""
    estimates: list[float] | None = None
    standard_errors: list[float] | None = None

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
        result.update(estimates=self.estimates, standard_errors=self.standard_errors)
        return result


def collection_release(
    *, collection_key: str, mechanism: str, epsilon0: float, domain_size: int
) -> list[BatchEstimate]:
    """Aggregate, combine and debias each batch of a collection; batches below the cohort are suppressed.

    Runs in one transaction with the deletion of the shares, so that a failure releases nothing
    and loses nothing, and a caller that stores the release in the same transaction makes a
    retried aggregation a no-op.
    """
    oracle = mechanism_get(mechanism, epsilon0)
    results: list[BatchEstimate] = []
    with transaction.atomic():
        collections = Collection.objects.select_for_update().filter(key=collection_key).order_by("batch_key")
        for collection in collections:
            leader, helper = LEADER.aggregate(collection), HELPER.aggregate(collection)
            if not isinstance(leader, AggregateShare) or not isinstance(helper, AggregateShare):
                refusal = leader if not isinstance(leader, AggregateShare) else helper
                results.append(
                    BatchEstimate(
                        batch_key=collection.batch_key,
                        reports=refusal.reports,
                        min_cohort=refusal.min_cohort,
                        suppressed=True,
                        reason=refusal.reason,
                    )
                )
                continue
            if leader.reports != helper.reports:
                raise RuntimeError(f"aggregators disagree on the report count of {collection}")
            counts = to_counts(combine_aggregates(leader, helper), bound=leader.reports)
            estimates = oracle.debias(counts, leader.reports, domain_size)
            errors = np.sqrt(oracle.variance(estimates, leader.reports, domain_size))
            if not (np.isfinite(estimates).all() and np.isfinite(errors).all()):
                raise ValueError(f"an estimate of {collection} is not finite")
            results.append(
                BatchEstimate(
                    batch_key=collection.batch_key,
                    reports=leader.reports,
                    min_cohort=leader.min_cohort,
                    suppressed=False,
                    estimates=estimates.tolist(),
                    standard_errors=errors.tolist(),
                )
            )
    return results
