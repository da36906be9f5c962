"""The collector: the analyst's side of a release, which combines the aggregators' shares and estimates.

The aggregators (aggregation.services.collection_aggregate) close the collection and hand over each
batch's two aggregate shares, or their refusals; the collector alone adds the two shares (the sum of
the reports, which neither aggregator sees), debiases it with the recipe's estimator and keeps the
standard errors. Intervals are derived when a release is shown (privacy.intervals), not here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from django.db import transaction

from aggregation.aggregators import AggregateShare
from aggregation.models import FIELD64
from aggregation.services import collection_aggregate
from pfs_base.db_router import DEFAULT
from privacy import field as prime_field
from privacy.aggregator_noise import aggregator_noise
from privacy.field import FieldVector, add, to_counts, to_signed
from privacy.mechanisms import mechanism_get
from privacy.vdaf.field import Field128


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
    """Each aggregator added discrete Gaussian or Laplace noise: the noisy sum is the (unbiased) estimate."""

    # Beyond 40 standard deviations the noise has probability below 1e-300 (the discrete Gaussian)
    # or 1e-15 (the discrete Laplace, at any scale a recipe may have): a value there means
    # mixed-up shares, not noise.
    TAIL = 40

    def __init__(self, *, epsilon: float, delta: float, domain_size: int) -> None:
        self.noise = aggregator_noise(epsilon, delta)
        self.domain_size = domain_size

    def estimate(self, total: FieldVector, reports: int) -> tuple[np.ndarray, np.ndarray]:
        error = self.noise.standard_error()
        slack = math.ceil(self.TAIL * error)
        estimates = to_signed(total, low=-slack, high=reports + slack).astype(np.float64)
        return estimates, np.full(estimates.size, error)


Estimator = ClientNoiseEstimator | AggregatorNoiseEstimator


def collection_release(*, collection_key: str, estimator: Estimator) -> list[BatchEstimate]:
    """Aggregate, combine and estimate each batch of a collection; batches below the cohort are suppressed.

    Runs in one transaction on the leader's store with the deletion of its shares, so that a failure
    releases nothing and loses nothing, and a caller that stores the release in the same transaction
    makes a retried aggregation a no-op (aggregation.services.collection_aggregate says why a retry
    gets the helper's same shares, and why the pending uploads are verified first).
    """
    results: list[BatchEstimate] = []
    with transaction.atomic(using=DEFAULT):
        for batch in collection_aggregate(collection_key=collection_key):
            leader, helper = batch.leader, batch.helper
            if not isinstance(leader, AggregateShare) or not isinstance(helper, AggregateShare):
                refusal = leader if not isinstance(leader, AggregateShare) else helper
                results.append(
                    BatchEstimate(
                        batch_key=batch.batch_key,
                        reports=None,
                        min_cohort=refusal.min_cohort,
                        suppressed=True,
                        reason=refusal.reason,
                        answered=not refusal.empty,
                    )
                )
                continue
            if leader.reports != helper.reports:
                raise RuntimeError(f"aggregators disagree on the report count of {batch}")
            estimates, errors = estimator.estimate(combine_aggregates(leader, helper), leader.reports)
            if not (np.isfinite(estimates).all() and np.isfinite(errors).all()):
                raise ValueError(f"an estimate of {batch} is not finite")
            results.append(
                BatchEstimate(
                    batch_key=batch.batch_key,
                    reports=leader.reports,
                    min_cohort=leader.min_cohort,
                    suppressed=False,
                    estimates=estimates,
                    standard_errors=errors,
                )
            )
    return results


def combine_aggregates(leader: AggregateShare, helper: AggregateShare) -> FieldVector:
    """The collector's step: the sum of the two aggregate shares is the sum of the reports.

    Returned as Field64 residues, what the estimators read: a Field128 sum is lifted to the integers
    (centred: a residue above p/2 is negative noise) and taken modulo the Field64 prime, exact for
    every sum the estimators accept (they refuse one outside [-slack, reports + slack]).
    """
    if leader.field != helper.field:
        raise ValueError("the aggregate shares are of different fields")
    if leader.field == FIELD64:
        return add(leader.vector, helper.vector)
    p = Field128.MODULUS
    sums = [(a + b) % p for a, b in zip(leader.vector, helper.vector, strict=True)]
    return np.array([(v if v <= p // 2 else v - p) % prime_field.MODULUS for v in sums], dtype=np.uint64)
