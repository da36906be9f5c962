"""Storage of the two aggregators. The leader and the helper each keep their own table of shares,
each in its own store (pfs_base.db_router: the helper's tables in the ``helper`` database).

A share alone is a uniformly random vector modulo p: neither table holds anything that reveals a
report. Shares are deleted as soon as their batch is aggregated (seed 000, Section 4.4.1).

No transaction spans the two stores: the helper writes its share first and commits, then the
leader writes its own with the same ``pair`` id; only the pairs the leader names are aggregated
(aggregation.aggregators), so a leader transaction that fails leaves at most a helper share no one
counts.
"""

from __future__ import annotations

import secrets

import numpy as np
from django.db import models

from aggregation.batch_rules import arrival_coarse
from privacy.field import FieldVector

FIELD64, FIELD128 = "field64", "field128"


def verify_key_new() -> bytes:
    """A fresh Prio3 verification key (32 bytes): shared by the two aggregators, never by a device."""
    return secrets.token_bytes(32)


class Collection(models.Model):
    """One batch of one collection: the reports of a round that share a cohort value."""

    key = models.CharField(max_length=200, db_index=True, help_text="The round's collection id.")
    batch_key = models.CharField(max_length=200, blank=True, help_text="Cohort value, e.g. locale=en_US.")
    length = models.PositiveIntegerField(help_text="Length of every report vector in the batch.")
    # Created with the batch's first report: as coarse as any arrival (batch_rules.ARRIVAL_GRAIN).
    created_at = models.DateTimeField(default=arrival_coarse)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["key", "batch_key"], name="unique_collection_batch")]

    def __str__(self) -> str:
        return f"{self.key} [{self.batch_key or 'all'}]"


class StoredShare(models.Model):
    # No cascade: a Collection is in both stores, a share table in one only, and Django's cascade
    # would look for the other table in the same store. Shares are deleted before their collection.
    collection = models.ForeignKey(Collection, on_delete=models.DO_NOTHING, related_name="+")
    # Who uploaded: a simulated shard uploads its devices' shares pre-summed as one pair.
    source = models.CharField(max_length=200)
    # The same random hex id on the leader's share and the helper's share of one upload (a shard's
    # pair, an aggregation job's output): the leader names the pairs to aggregate, the helper sums
    # exactly those. "" only on rows older than the pair ids whose hand-over gave them none.
    pair = models.CharField(max_length=100, default="", blank=True)
    vector = models.BinaryField(
        help_text="Residues of ``field``, little-endian: 8 bytes each (Field64), 16 (Field128)."
    )
    # A simulated shard's shares are Field64 vectors (privacy.field); verified reports' output shares
    # are in their Prio3's field (privacy.report_vdaf): Field128 for histograms and multi-hot vectors.
    field = models.CharField(max_length=16, default=FIELD64, choices=[(FIELD64, "Field64"), (FIELD128, "Field128")])
    reports = models.PositiveIntegerField()
    min_cohort = models.PositiveIntegerField(help_text="The minimum cohort the devices routed with it.")
    # Reports verified in bulk (aggregation.ingest) are stored summed, one share per chunk and batch:
    # their arrival times (float64 seconds since the epoch, for rate validation) travel with it.
    # Empty for a share of one report (its created_at is its arrival) or of a simulated shard.
    # Every arrival time is floored to batch_rules.ARRIVAL_GRAIN: no finer than rate validation needs.
    arrivals = models.BinaryField(default=b"", blank=True)
    created_at = models.DateTimeField(default=arrival_coarse)

    class Meta:
        abstract = True
        constraints = [models.UniqueConstraint(fields=["collection", "source"], name="unique_%(class)s_source")]

    def load_vector(self) -> FieldVector:
        """A Field64 share as uint64 residues (a Field128 share: load_ints)."""
        if self.field != FIELD64:
            raise ValueError(f"a {self.field} share is not a vector of uint64 residues")
        return np.frombuffer(bytes(self.vector), dtype=np.uint64)

    def load_ints(self) -> list[int]:
        """The share's residues as Python integers, whatever its field."""
        width = 16 if self.field == FIELD128 else 8
        data = bytes(self.vector)
        return [int.from_bytes(data[i : i + width], "little") for i in range(0, len(data), width)]

    def load_arrivals(self) -> list[float]:
        """When the reports summed here arrived (seconds since the epoch)."""
        stored = bytes(self.arrivals)
        return np.frombuffer(stored, dtype="<f8").tolist() if stored else [self.created_at.timestamp()]


class LeaderShare(StoredShare):
    def __str__(self) -> str:
        return f"leader share of {self.collection} from {self.source}"


class HelperShare(StoredShare):
    # Insert-only, before the leader's transaction: a retried shard writes a second row of its
    # source under a new pair (the first one is an orphan the leader never names).
    class Meta:
        constraints = [models.UniqueConstraint(fields=["collection", "pair"], name="unique_helpershare_pair")]

    def __str__(self) -> str:
        return f"helper share of {self.collection} from {self.source}"


class CollectionRules(models.Model):
    """The batch rules of one collection, as each aggregator is configured with them.

    Set from the public recipe when the round starts (a transparency log would publish them);
    the leader and the helper each enforce them on their own shares.
    """

    key = models.CharField(max_length=200, unique=True)
    length = models.PositiveIntegerField(help_text="Length of every report vector.")
    min_cohort = models.PositiveIntegerField(help_text="No batch with fewer reports is released.")
    weight_bound = models.PositiveIntegerField(help_text="Most ones an honest report carries (seed 001 6.1.1).")
    # Which Prio3 every uploaded report is verified with (privacy.report_vdaf: count, histogram, multihot).
    vdaf = models.CharField(max_length=16, default="multihot")
    # The Prio3 verification key both aggregators derive their query randomness from; a device never
    # sees it (with it, a device could craft an invalid report whose proof passes).
    verify_key = models.BinaryField(default=verify_key_new, editable=False)
    noise_epsilon = models.FloatField(
        null=True, blank=True, help_text="Aggregator noise: (epsilon, delta) per release."
    )
    # 0: pure epsilon-DP, the discrete Laplace; above 0: the discrete Gaussian (privacy.aggregator_noise).
    noise_delta = models.FloatField(null=True, blank=True)
    # The issuer's public key of the collection ({"n", "e"}: decimal strings), as the helper was
    # provisioned with it (aggregation.dap.TaskConfig); None: a simulated fleet's collection, which
    # takes simulated shares only and never a device's report.
    token_key = models.JSONField(null=True, blank=True)
    # Poplar1 only (vdaf "poplar1"): how many levels of the prefix tree the aggregators release in
    # all; each one's noise is calibrated so that they compose within (noise_epsilon, noise_delta).
    levels = models.PositiveSmallIntegerField(null=True, blank=True)
    # Poplar1 only: the sigma of this aggregator's noise a level, computed by the aggregator itself
    # from (noise_epsilon, noise_delta, levels) when it takes the collection (seconds of PLD work).
    noise_sigma = models.FloatField(null=True, blank=True)
    closed = models.BooleanField(default=False, help_text="Aggregated: later reports are rejected.")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name_plural = "collection rules"

    def __str__(self) -> str:
        return f"rules of {self.key}"


class PendingReport(models.Model):
    """An uploaded report as the leader received it, waiting for both aggregators' checks.

    The upload endpoint only appends here (aggregation.intake); aggregation.ingest verifies the
    rows in bulk, stores the accepted shares summed, and deletes the rows. The body is the sealed
    report: neither aggregator can read a share of it without its own private key.
    """

    collection_key = models.CharField(max_length=200)
    body = models.BinaryField()
    # Floored to batch_rules.ARRIVAL_GRAIN by whoever writes it (aggregation.intake).
    received_at = models.DateTimeField(default=arrival_coarse)
    # The aggregation job the row was taken into (aggregation.ingest): a durable id, so a run that
    # failed after the helper stored the job is resumed with the same rows, not new ones.
    job = models.CharField(max_length=100, null=True, blank=True)  # noqa: DJ001 (None: no job; "" is no id)

    class Meta:
        indexes = [models.Index(fields=["collection_key", "id"], name="pending_report_collection")]

    def __str__(self) -> str:
        return f"pending report {self.pk} for {self.collection_key}"


class AggregatorKey(models.Model):
    """An aggregator's HPKE key pair (X25519) in its database: reports are sealed to its public key.

    The embedded default only: a deployment gives each aggregator its private key from the
    environment or a file (aggregation.keys). ``manage.py rotate_keys`` retires the current key;
    a retired key still opens the shares of the collections opened before it was retired, and is
    deleted once they are all closed.
    """

    role = models.CharField(max_length=16)
    public_key = models.BinaryField()
    private_key = models.BinaryField()
    created_at = models.DateTimeField(auto_now_add=True)
    retired_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["role"], condition=models.Q(retired_at__isnull=True), name="one_current_aggregator_key"
            )
        ]

    def __str__(self) -> str:
        return f"{self.role} HPKE key" + (" (retired)" if self.retired_at else "")


class SpentToken(models.Model):
    """Tokens an aggregator has accepted in a collection: each is good for one report."""

    role = models.CharField(max_length=16)
    collection_key = models.CharField(max_length=200)
    token_digest = models.CharField(max_length=64)
    # The aggregation job that spent it (None: a simulated or older record): a replayed job's own
    # tokens do not count as spent, so it gets the verdicts it got the first time.
    job = models.CharField(max_length=100, null=True, blank=True)  # noqa: DJ001 (None: no job; "" is no id)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["role", "collection_key", "token_digest"], name="unique_spent_token")
        ]

    def __str__(self) -> str:
        return f"token {self.token_digest[:12]} spent at the {self.role} in {self.collection_key}"


class ReportRejection(models.Model):
    """How many uploaded reports an aggregator rejected in a collection, by reason."""

    role = models.CharField(max_length=16)
    collection_key = models.CharField(max_length=200)
    reason = models.CharField(max_length=40)
    count = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["role", "collection_key", "reason"], name="unique_report_rejection")
        ]

    def __str__(self) -> str:
        return f"{self.role} rejected {self.count} in {self.collection_key}: {self.reason}"


class HelperJob(models.Model):
    """An aggregation job the helper has run (in its own store only): a replay of the same request
    gets the same answer and stores nothing again; another request under the job's id is refused."""

    collection_key = models.CharField(max_length=200)
    job = models.CharField(max_length=100)
    request_digest = models.CharField(max_length=64, default="", blank=True, help_text="SHA-256 of the request.")
    response = models.BinaryField(default=b"", blank=True, help_text="The AggregationJobResp it answered.")
    created_at = models.DateTimeField(default=arrival_coarse)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["collection_key", "job"], name="unique_helper_job")]

    def __str__(self) -> str:
        return f"helper job {self.job} of {self.collection_key}"


class HelperRelease(models.Model):
    """The helper's answer to a collection's aggregate share request (its own store only), kept so
    that it releases once: a retry of the request gets these bytes, any other request is refused."""

    collection_key = models.CharField(max_length=200, unique=True)
    request_digest = models.CharField(max_length=64)
    response = models.BinaryField()
    created_at = models.DateTimeField(default=arrival_coarse)

    def __str__(self) -> str:
        return f"helper release of {self.collection_key}"


class TokenIssuerKey(models.Model):
    """The token issuer's RSA key of one collection (RFC 9474 blind signatures), created on first use.

    In the issuer's own store (pfs_base.db_router). With a key-wrapping key configured
    (aggregation.keys) the primes are kept only sealed under it (``wrapped``); once the collection
    is closed ``manage.py rotate_keys --role issuer`` erases them and only the public key stays.
    """

    collection_key = models.CharField(max_length=200, unique=True)
    # Decimal integers: the modulus n = p q, the public exponent, and the two primes ("" when
    # wrapped or erased).
    modulus = models.TextField()
    public_exponent = models.TextField()
    prime_p = models.TextField()
    prime_q = models.TextField()
    # AES-256-GCM nonce || ciphertext of "p:q" under the wrapping key named by wrapping_key.
    wrapped = models.BinaryField(default=b"", blank=True)
    wrapping_key = models.CharField(max_length=16, blank=True, help_text="Which wrapping key sealed it.")
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"token issuer key of {int(self.modulus).bit_length()} bits"


class IssuedToken(models.Model):
    """The issuer's rate limit: one token per device per collection. It never sees the token itself."""

    collection_key = models.CharField(max_length=200)
    device_digest = models.CharField(max_length=64)
    # The SHA-256 of the blinded message it signed, so that the same device asking again with the
    # same blinded message (a device stopped before it stored the answer) gets the same signature
    # again. The issuer sees the blinded message anyway; it says nothing of the token it becomes.
    blinded_digest = models.CharField(max_length=64, blank=True, default="")
    # The day only: a finer time could be joined with the aggregators' arrival times.
    issued_on = models.DateField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["collection_key", "device_digest"], name="unique_issued_token")]

    def __str__(self) -> str:
        return f"token issued in {self.collection_key}"


class Poplar1Report(models.Model):
    """One aggregator's part of one Poplar1 report (aggregation.heavy_hitters), in its own store.

    Unlike a Prio3 report, summed into the batch's share once verified, a Poplar1 report is verified
    again at each level of the prefix tree the collector walks, so each aggregator keeps its input
    share until the collection is discarded. ``last_level``: the deepest level it was verified at
    (-1: none); a level at or above it is refused, as Poplar1's is_valid says (its correlated
    randomness is used once per level). ``refused``: it failed a sketch once, and counts nowhere again.
    """

    collection_key = models.CharField(max_length=200)
    report_id = models.CharField(max_length=64)
    nonce = models.BinaryField()
    public_share = models.BinaryField()
    input_share = models.BinaryField(help_text="This aggregator's input share only.")
    last_level = models.SmallIntegerField(default=-1)
    refused = models.BooleanField(default=False)
    created_at = models.DateTimeField(default=arrival_coarse)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["collection_key", "report_id"], name="unique_poplar1_report")]

    def __str__(self) -> str:
        return f"poplar1 report {self.report_id} of {self.collection_key}"


class Poplar1Level(models.Model):
    """One level of a Poplar1 collection at one aggregator: the one aggregation parameter it was
    opened with, the sum of the output shares it accepted, and, once released, its noised share and
    the released counts (kept: the next level's prefixes must extend one released with at least the
    minimum cohort)."""

    collection_key = models.CharField(max_length=200)
    level = models.PositiveSmallIntegerField()
    agg_param = models.BinaryField(help_text="Poplar1's encoded aggregation parameter (level, prefixes).")
    agg_share = models.BinaryField(default=b"", blank=True, help_text="Sum of the accepted output shares.")
    reports = models.PositiveIntegerField(default=0)
    released = models.BooleanField(default=False)
    release_digest = models.CharField(max_length=64, default="", blank=True)
    release = models.BinaryField(default=b"", blank=True, help_text="The answer that released it.")
    counts = models.JSONField(null=True, blank=True, help_text="The released counts, by prefix.")
    created_at = models.DateTimeField(default=arrival_coarse)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["collection_key", "level"], name="unique_poplar1_level")]

    def __str__(self) -> str:
        return f"poplar1 level {self.level} of {self.collection_key}"


class Poplar1Job(models.Model):
    """A Poplar1 aggregation job the helper has run (its own store only): its two steps' requests and
    answers, kept so that a retry gets the same bytes, and between them the helper's state (its
    output shares and sketch check shares, by report)."""

    collection_key = models.CharField(max_length=200)
    job = models.CharField(max_length=100)
    level = models.PositiveSmallIntegerField()
    init_digest = models.CharField(max_length=64)
    init_response = models.BinaryField()
    state = models.BinaryField(default=b"", blank=True)
    continue_digest = models.CharField(max_length=64, default="", blank=True)
    continue_response = models.BinaryField(default=b"", blank=True)
    created_at = models.DateTimeField(default=arrival_coarse)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["collection_key", "job"], name="unique_poplar1_job")]

    def __str__(self) -> str:
        return f"poplar1 job {self.job} of {self.collection_key}"
