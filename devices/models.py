"""Simulated fleets stored as shards of columnar arrays, never as one row per device.

A shard (tens of thousands of devices) is the unit of work (one task), of locking and of
atomicity. Per-device state — data, budget ledger — lives in numpy columns inside the shard's rows.
"""

from __future__ import annotations

from django.db import models

from pfs_device.columns import Columns, PackedColumns, unpack


class Fleet(models.Model):
    class Kind(models.TextChoices):
        SIMULATED = "simulated", "Simulated (shards of columns on the server)"
        DEVICES = "devices", "Real devices (they keep their data; the device SDK reports over HTTP)"

    name = models.SlugField(max_length=64, unique=True)
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.SIMULATED)
    size = models.PositiveIntegerField(help_text="Devices: simulated ones, or real ones registered.")
    seed = models.BigIntegerField(null=True, blank=True, help_text="Seed of the synthetic generator, if any.")
    # A simulated fleet hands over its devices' shares pre-summed per shard; with this option each
    # simulated device sends its own Prio3 report, which both aggregators verify (slower: about
    # 10 ms of sharding per device at 1,024 buckets), so the verified path runs in the simulator too.
    prio3_reports = models.BooleanField(
        default=False, help_text="Simulated devices send per-device Prio3 reports instead of pre-summed shares."
    )
    # Vocabularies that the integer columns index: {"locale": [...], "tokens": [...]}.
    vocabularies = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return f"{self.name} ({self.size:,} devices)"

    @property
    def is_real(self) -> bool:
        return self.kind == self.Kind.DEVICES


class FleetShard(models.Model):
    fleet = models.ForeignKey(Fleet, on_delete=models.CASCADE, related_name="shards")
    index = models.PositiveIntegerField()
    size = models.PositiveIntegerField()
    columns = models.BinaryField(help_text="npz of the devices' columns (see devices.synthetic).")

    class Meta:
        ordering = ["fleet", "index"]
        constraints = [models.UniqueConstraint(fields=["fleet", "index"], name="unique_shard_index")]

    def __str__(self) -> str:
        return f"{self.fleet.name}#{self.index}"

    def load_columns(self) -> PackedColumns:
        """The shard's columns, each read when first used (a round reads few of them)."""
        return PackedColumns(self.columns)


class PolicySnapshot(models.Model):
    """The immutable policy an analysis was approved with, named by the hash of its content.

    Devices enforce the snapshot, never the live analysis row: a later edit on the server
    cannot change what a device allows.
    """

    digest = models.CharField(max_length=64, unique=True)
    content = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"{self.content.get('analysis', '?')} @ {self.digest[:12]}"


class Enrollment(models.Model):
    """The snapshot the devices of a fleet hold for an analysis: replaced on each approval."""

    fleet = models.ForeignKey(Fleet, on_delete=models.CASCADE, related_name="enrollments")
    analysis_identifier = models.CharField(max_length=200)
    snapshot = models.ForeignKey(PolicySnapshot, on_delete=models.PROTECT, related_name="+")
    enrolled_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["fleet", "analysis_identifier"], name="unique_enrollment")]

    def __str__(self) -> str:
        return f"{self.fleet.name} enrolled in {self.analysis_identifier} @ {self.snapshot.digest[:12]}"


class ShardLedger(models.Model):
    """Per-device budget used by one analysis on one shard: check 1 and 2 state as columns.

    Epsilon is kept in integer nano-epsilon units so that sums are exact and comparisons with
    the allowance never suffer float round-off.
    """

    shard = models.ForeignKey(FleetShard, on_delete=models.CASCADE, related_name="ledgers")
    analysis_identifier = models.CharField(max_length=200)
    state = models.BinaryField()
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["shard", "analysis_identifier"], name="unique_shard_ledger")]

    def __str__(self) -> str:
        return f"ledger of {self.analysis_identifier} on shard {self.shard_id}"

    def load_state(self) -> Columns:
        return unpack(self.state)


class ShardRun(models.Model):
    """One shard's answer to one task: the idempotency key and the shard's audit record.

    Created in the same transaction that spends budget and uploads shares, so a retried task
    finds it and changes nothing twice.
    """

    task_key = models.CharField(max_length=200, db_index=True)
    shard = models.ForeignKey(FleetShard, on_delete=models.CASCADE, related_name="runs")
    answered = models.PositiveIntegerField()
    # Devices that did not answer, by reason: {"not_sampled": n, "analysis_budget": n, ...}.
    outcomes = models.JSONField(default=dict)
    epsilon_spent = models.FloatField(help_text="Aggregate epsilon charged to each answering device.")
    # The devices' audit log: the task as the devices received it, and each device's decision
    # (pfs_device.budget.Decision, one int8 per device in shard order).
    task = models.JSONField(default=dict)
    decisions = models.BinaryField(default=b"")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["task_key", "shard"], name="unique_shard_run")]

    def __str__(self) -> str:
        return f"{self.task_key} on shard {self.shard_id}: {self.answered} answered"


class DeviceCredential(models.Model):
    """How a real device of a ``devices`` fleet signs in: a public id and a hashed secret.

    The server keeps nothing else about the device: no data, no ledger, no report. The secret is
    32 random bytes, so one SHA-256 suffices (as for API tokens); a slow password hash would add
    nothing but time to every request.
    """

    fleet = models.ForeignKey(Fleet, on_delete=models.CASCADE, related_name="credentials")
    device_id = models.CharField(max_length=64, unique=True, help_text="Public id, sent with every request.")
    secret_hash = models.CharField(max_length=64, help_text="SHA-256 of the secret, hex.")
    created_at = models.DateTimeField(auto_now_add=True)
    last_seen_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["fleet", "device_id"]

    def __str__(self) -> str:
        return f"{self.device_id} of {self.fleet.name}"


class CollectionWindow(models.Model):
    """A round offered to a fleet of real devices: the task they fetch, while the window is open.

    Opened when the round starts, closed by the analyst or at ``closes_at``. The aggregators
    accept reports while their CollectionRules of ``task_key`` are not closed.
    """

    fleet = models.ForeignKey(Fleet, on_delete=models.CASCADE, related_name="windows")
    # The analyst side's round (analyses.Round); a plain id, since devices/ does not import analyses.
    round_pk = models.BigIntegerField(unique=True)
    task_key = models.CharField(max_length=200, unique=True)
    task = models.JSONField(help_text="The task as devices receive it (DeviceTask.audit_json: no seed).")
    snapshot = models.ForeignKey(PolicySnapshot, on_delete=models.PROTECT, related_name="+")
    opened_at = models.DateTimeField(auto_now_add=True)
    closes_at = models.DateTimeField(null=True, blank=True, help_text="Deadline: the reaper closes it then.")
    closed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-opened_at"]
        indexes = [models.Index(fields=["fleet", "closed_at"], name="window_fleet_open")]

    def __str__(self) -> str:
        return f"window {self.task_key} ({'closed' if self.closed_at else 'open'})"
