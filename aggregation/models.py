"""Storage of the two aggregators. The leader and the helper each keep their own table of shares.

A share alone is a uniformly random vector modulo p: neither table holds anything that reveals a
report. Shares are deleted as soon as their batch is aggregated (seed 000, Section 4.4.1).
"""

from __future__ import annotations

import numpy as np
from django.db import models

from privacy.field import FieldVector


class Collection(models.Model):
    """One batch of one collection: the reports of a round that share a cohort value."""

    key = models.CharField(max_length=200, db_index=True, help_text="The round's collection id.")
    batch_key = models.CharField(max_length=200, blank=True, help_text="Cohort value, e.g. locale=en_US.")
    length = models.PositiveIntegerField(help_text="Length of every report vector in the batch.")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["key", "batch_key"], name="unique_collection_batch")]

    def __str__(self) -> str:
        return f"{self.key} [{self.batch_key or 'all'}]"


class StoredShare(models.Model):
    collection = models.ForeignKey(Collection, on_delete=models.CASCADE, related_name="+")
    # Who uploaded: a simulated shard uploads its devices' shares pre-summed as one pair.
    source = models.CharField(max_length=200)
    vector = models.BinaryField(help_text="uint64 residues modulo the Field64 prime.")
    reports = models.PositiveIntegerField()
    min_cohort = models.PositiveIntegerField(help_text="The minimum cohort the devices routed with it.")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        abstract = True
        constraints = [models.UniqueConstraint(fields=["collection", "source"], name="unique_%(class)s_source")]

    def load_vector(self) -> FieldVector:
        return np.frombuffer(bytes(self.vector), dtype=np.uint64)


class LeaderShare(StoredShare):
    def __str__(self) -> str:
        return f"leader share of {self.collection} from {self.source}"


class HelperShare(StoredShare):
    def __str__(self) -> str:
        return f"helper share of {self.collection} from {self.source}"
