"""The leader and helper aggregators: each sums only its own shares and enforces batch rules alone.

Neither trusts the other: each refuses on its own to release the aggregate share of a batch
smaller than the largest minimum cohort its uploads were routed with.
"""

from __future__ import annotations

from dataclasses import dataclass

from aggregation.models import Collection, HelperShare, LeaderShare, StoredShare
from privacy.field import FieldVector, add, field_sum


@dataclass(frozen=True)
class AggregateShare:
    vector: FieldVector
    reports: int
    min_cohort: int


@dataclass(frozen=True)
class BatchRefused:
    reports: int
    min_cohort: int
    reason: str


class Aggregator:
    def __init__(self, role: str, model: type[StoredShare]) -> None:
        self.role = role
        self.model = model

    def aggregate(self, collection: Collection) -> AggregateShare | BatchRefused:
        """Sum this aggregator's shares of one batch, then delete them (released or not)."""
        shares = list(self.model.objects.filter(collection=collection).order_by("pk"))
        reports = sum(share.reports for share in shares)
        min_cohort = max((share.min_cohort for share in shares), default=0)
        self.model.objects.filter(collection=collection).delete()
        if not shares or reports < min_cohort:
            return BatchRefused(
                reports=reports,
                min_cohort=min_cohort,
                reason=f"{self.role}: {reports:,} reports is below the minimum cohort of {min_cohort:,}",
            )
        vector = field_sum([share.load_vector() for share in shares], collection.length)
        return AggregateShare(vector=vector, reports=reports, min_cohort=min_cohort)


LEADER = Aggregator("leader", LeaderShare)
HELPER = Aggregator("helper", HelperShare)


def combine_aggregates(leader: AggregateShare, helper: AggregateShare) -> FieldVector:
    """The collector's step: the sum of the two aggregate shares is the sum of the reports."""
    return add(leader.vector, helper.vector)
