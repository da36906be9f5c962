"""The analyst side: analyses with their budget policy, recipes, rounds and releases.

Models hold invariants; workflows (validate, approve, start, aggregate) live in analyses.services.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models

from analyses.privacy_field import PrivacyParametersField
from analyses.recipe_content import recipe_content_parsed
from analyses.rules.enforced_policy import EnforcedPolicy, pending_changes
from devices.models import Fleet, PolicySnapshot
from pfs_device.encode import ParsedContent
from privacy.aggregator_noise import LAPLACE
from privacy.encoding import CombinationType, Encoding


class Analysis(models.Model):
    class Status(models.TextChoices):
        DRAFT = "draft", "Draft (awaiting approval)"
        APPROVED = "approved", "Approved"

    identifier = models.CharField(max_length=200, unique=True, help_text="e.g. demo.keyboard")
    title = models.CharField(max_length=200, blank=True)
    fleet = models.ForeignKey(Fleet, on_delete=models.PROTECT, related_name="analyses")
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="analyses")
    # The approved query class: {"stream": ..., "fields": [...], "cohortFields": [...]}.
    query_class = models.JSONField()
    # Check 1 (Table 1a of seed 000): cohort-aggregate budget shared by all queries of the analysis.
    epsilon_allowed = models.FloatField()
    reports_allowed = models.PositiveIntegerField()
    delta = models.FloatField(help_text="Largest delta at which a query of this analysis may claim epsilon.")
    accountant = models.CharField(
        max_length=16,
        choices=[
            ("basic", "Basic composition"),
            ("advanced", "Advanced composition (or basic, if smaller)"),
            ("renyi", "Rényi DP composition (or basic, if smaller)"),
            ("tightest", "Tightest of basic, advanced, Rényi DP and PLD composition"),
        ],
        default="tightest",
        help_text="How devices compose the aggregate epsilons of this analysis's queries.",
    )
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.DRAFT)
    approved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    approved_at = models.DateTimeField(null=True, blank=True)
    min_cohort_floor = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Smallest minimum cohort any recipe of this analysis may have; a recipe can raise it, never "
        "lower it, and devices refuse a task below it. Empty: what devices compute (client noise) or 1,000 "
        "(aggregator noise).",
    )
    max_buckets = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Most buckets a recipe of this analysis may ask for, below the global limit of 131,072.",
    )
    delta_total = models.FloatField(
        null=True,
        blank=True,
        help_text="Largest total δ a device's guarantee for this analysis may reach: the sum of its queries' δ, "
        "plus δ where the accountant is not basic. Devices refuse a query that would pass it. Empty: no cap "
        "beyond δ per query times the reports allowed.",
    )
    snapshot = models.ForeignKey(
        PolicySnapshot,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
        help_text="The policy devices enforce; taken at approval, unchanged by later edits.",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["identifier"]
        verbose_name_plural = "analyses"
        constraints = [
            models.CheckConstraint(condition=models.Q(epsilon_allowed__gt=0), name="analysis_epsilon_positive"),
            models.CheckConstraint(condition=models.Q(delta__gt=0, delta__lt=1), name="analysis_delta_in_0_1"),
        ]

    def __str__(self) -> str:
        return self.identifier

    def save(self, *args: Any, **kwargs: Any) -> None:
        # Devices key their ledgers and snapshots by the identifier: renaming an approved analysis
        # would hand every device a fresh budget. Once approved, it never changes.
        if self.pk is not None:
            stored = Analysis.objects.filter(pk=self.pk).values("identifier", "snapshot_id").first()
            if stored and stored["snapshot_id"] is not None and stored["identifier"] != self.identifier:
                raise ValidationError(
                    {"identifier": "An approved analysis keeps its identifier: devices key their budgets by it."}
                )
        super().save(*args, **kwargs)

    @property
    def is_approved(self) -> bool:
        return self.status == self.Status.APPROVED

    def edited_policy(self) -> dict:
        """The policy as the columns hold it now, in the snapshot's format (docs/formats.md): what
        approval would send devices. Until approved, an edit here changes nothing they enforce."""
        budget = {
            "epsilon": self.epsilon_allowed,
            "reports": self.reports_allowed,
            "delta": self.delta,
            "accountant": self.accountant,
        }
        # Only when set, so that the snapshots of analyses without them keep their digests.
        if self.min_cohort_floor is not None:
            budget["minCohort"] = self.min_cohort_floor
        if self.max_buckets is not None:
            budget["maxBuckets"] = self.max_buckets
        if self.delta_total is not None:
            budget["deltaTotal"] = self.delta_total
        return {
            "analysis": self.identifier,
            "fleet": self.fleet.name,
            "queryClass": self.query_class,
            "budget": budget,
            "fields": {
                p.field: {
                    "localEpsilon": p.local_epsilon,
                    "epsilon": p.epsilon,
                    "reports": p.reports,
                    "aggregatorNoise": p.aggregator_noise,
                    # Only when set, so that the snapshots of analyses without it keep their digests.
                    **({"deltaTotal": p.delta_total} if p.delta_total is not None else {}),
                }
                for p in self.field_policies.all()
            },
        }

    @property
    def enforced_content(self) -> dict:
        """The policy devices enforce: the approved snapshot, never an unapproved edit. An analysis
        never approved has no snapshot: its draft stands in (no round can start on it)."""
        return self.snapshot.content if self.snapshot_id is not None else self.edited_policy()

    @property
    def enforced(self) -> EnforcedPolicy:
        return EnforcedPolicy.from_content(self.enforced_content)

    @property
    def pending_changes(self) -> list[str]:
        """An officer's edit not approved yet, one line per value ([] when there is none)."""
        if self.snapshot_id is None:
            return []
        return pending_changes(self.snapshot.content, self.edited_policy())


class FieldPolicy(models.Model):
    """Check 2 (Table 1b of seed 000): the budget of one data field within an analysis."""

    analysis = models.ForeignKey(Analysis, on_delete=models.CASCADE, related_name="field_policies")
    field = models.CharField(max_length=100)
    local_epsilon = models.FloatField(help_text="Largest epsilon0 a query reading this field may use.")
    epsilon = models.FloatField(help_text="Cohort-aggregate epsilon allowed on this field.")
    reports = models.PositiveIntegerField(help_text="Reports allowed on this field.")
    aggregator_noise = models.BooleanField(
        default=False,
        help_text="Allow recipes with aggregator noise: devices then send this field with no local noise, "
        "protected by secret sharing and by the noise each aggregator adds (one honest aggregator suffices).",
    )
    delta_total = models.FloatField(
        null=True,
        blank=True,
        help_text="Largest total δ a device's guarantee on this field may reach (its queries' δ, plus the "
        "analysis δ where the accountant is not basic); devices refuse a query that would pass it. Empty: "
        "the analysis's cap, if any.",
    )

    class Meta:
        ordering = ["field"]
        verbose_name_plural = "field policies"
        constraints = [
            models.UniqueConstraint(fields=["analysis", "field"], name="unique_field_policy"),
            models.CheckConstraint(
                condition=models.Q(local_epsilon__gt=0, epsilon__gt=0), name="field_policy_positive"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.analysis}:{self.field}"


class Recipe(models.Model):
    """A validated recipe: Figure 4's JSON (seed 000) plus its privacy parameters."""

    analysis = models.ForeignKey(Analysis, on_delete=models.CASCADE, related_name="recipes")
    identifier = models.CharField(max_length=100)
    content = models.JSONField(help_text="The recipe as submitted, in Figure 4's format.")

    class Noise(models.TextChoices):
        CLIENT = "client", "Client (local randomizer)"
        AGGREGATOR = "aggregator", "Aggregator (discrete Gaussian)"

    encoded_field = models.CharField(max_length=100)
    privacy = PrivacyParametersField(
        help_text="The privacy parameters, one JSON object (privacy.parameters.PrivacyParameters): noise, "
        "mechanism (blank with aggregator noise), epsilon0 (none with aggregator noise), epsilon, delta, "
        "sampling_rate and min_cohort (client noise: computed from epsilon0, epsilon and delta, or the "
        "recipe's larger one; aggregator noise: the recipe's, a hardening the guarantee does not depend on)."
    )
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [models.UniqueConstraint(fields=["analysis", "identifier"], name="unique_recipe_identifier")]

    def __str__(self) -> str:
        return f"{self.analysis}/{self.identifier}"

    @cached_property
    def parsed_content(self) -> ParsedContent:
        """The fields and encoding of the recipe's dataTypeContent, parsed once per recipe
        (analyses.recipe_content); its errors for content that does not parse."""
        return recipe_content_parsed(self.pk, self.created_at, self.content["dataTypeContent"])

    @property
    def encoding(self) -> Encoding | CombinationType:
        return self.parsed_content[1]

    @property
    def noise_label(self) -> str:
        """How the recipe's noise reads in a page: the randomizer and its epsilon0, or aggregator noise."""
        if self.privacy.noise_distribution == LAPLACE:
            return "aggregator noise (discrete Laplace)"
        if self.privacy.aggregator_noise:
            return "aggregator noise (discrete Gaussian)"
        return f"{self.privacy.mechanism}, ε₀ = {self.privacy.epsilon0:g}"


class Round(models.Model):
    class Status(models.TextChoices):
        QUEUED = "queued", "Queued"
        RUNNING = "running", "Running on devices"
        RELEASED = "released", "Released"
        # Aggregated, but no batch reached its minimum cohort: nothing was learned, and it is not a release.
        WITHHELD = "withheld", "Nothing released (every batch below its minimum cohort)"
        FAILED = "failed", "Failed"
        CANCELLED = "cancelled", "Cancelled"

    TERMINAL = {Status.RELEASED, Status.WITHHELD, Status.FAILED, Status.CANCELLED}

    recipe = models.ForeignKey(Recipe, on_delete=models.CASCADE, related_name="rounds")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED)
    seed = models.BigIntegerField(help_text="Seeds every device's coins in this round (simulation).")
    shards_total = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"round {self.pk} of {self.recipe}"

    @property
    def task_key(self) -> str:
        """The collection id: the analysis identifier prefixes it (Appendix B of seed 000)."""
        return f"{self.recipe.analysis.identifier}/{self.recipe.identifier}/round-{self.pk}"

    @property
    def is_finished(self) -> bool:
        return self.status in self.TERMINAL


class Release(models.Model):
    """What the analyst sees: debiased estimates with errors, per batch, and what it cost."""

    round = models.OneToOneField(Round, on_delete=models.CASCADE, related_name="release")
    content = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"release of {self.round}"


class AdaptiveRun(models.Model):
    """An interactive analysis: a chain of rounds, each built from the last one's release.

    ``levels`` holds what each finished round taught (its kept n-grams or refined buckets);
    ``baseline`` the static one-shot rounds run for comparison. The spec and its budget plan are
    fixed at start (docs/adaptive.md).
    """

    class Kind(models.TextChoices):
        NGRAM_DISCOVERY = "ngram_discovery", "N-gram discovery"
        BUCKET_REFINEMENT = "bucket_refinement", "Bucket refinement"
        HEAVY_HITTERS = "heavy_hitters", "Heavy hitters (Poplar1)"

    class Status(models.TextChoices):
        RUNNING = "running", "Running"
        PAUSED = "paused", "Paused (the next round waits)"
        FINISHED = "finished", "Finished"
        FAILED = "failed", "Failed"

    analysis = models.ForeignKey(Analysis, on_delete=models.CASCADE, related_name="adaptive_runs")
    kind = models.CharField(max_length=32, choices=Kind.choices)
    spec = models.JSONField(help_text="The analysis spec as submitted (docs/adaptive.md).")
    plan = models.JSONField(help_text="Per round: epsilon0, epsilon, delta, fixed at start.")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.RUNNING)
    stop_reason = models.TextField(blank=True)
    levels = models.JSONField(default=list)
    baseline = models.JSONField(default=list)
    comparison = models.JSONField(null=True, blank=True)
    current_round = models.ForeignKey(Round, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    next_recipe = models.JSONField(null=True, blank=True, help_text="The next round's recipe while paused.")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} {self.pk} of {self.analysis}"

    @property
    def is_finished(self) -> bool:
        return self.status in (self.Status.FINISHED, self.Status.FAILED)


class IdempotentRequest(models.Model):
    """The first answer to a request sent with an Idempotency-Key, replayed to its repeats (docs/api.md).

    Stored in the transaction that creates what the request creates (a round, an adaptive run),
    so a key is either used with its result or unused; the unique constraint makes a concurrent
    duplicate wait for the first and then read its answer.
    """

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    key = models.CharField(max_length=255)
    endpoint = models.CharField(max_length=200, help_text="The operation and its target, e.g. round-start:recipe=7.")
    request_digest = models.CharField(max_length=64, help_text="SHA-256 of the request body's canonical JSON.")
    response_status = models.PositiveSmallIntegerField()
    response_body = models.JSONField()
    response_headers = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["user", "key"], name="unique_idempotency_key_per_user")]

    def __str__(self) -> str:
        return f"{self.endpoint} with key {self.key!r}"


class PolicyApproval(models.Model):
    """One approval by a privacy officer: which policy devices were sent from when.

    Policy snapshots are content-addressed (one row per distinct policy), so they cannot say that a
    policy was approved twice; the burn-down's allowance, drawn as it was over time, reads these.
    """

    analysis = models.ForeignKey(Analysis, on_delete=models.CASCADE, related_name="approvals")
    snapshot = models.ForeignKey(PolicySnapshot, on_delete=models.PROTECT, related_name="+")
    approved_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+")
    approved_at = models.DateTimeField()

    class Meta:
        ordering = ["approved_at", "pk"]

    def __str__(self) -> str:
        return f"{self.analysis} approved at {self.approved_at:%Y-%m-%d %H:%M}"


class PolicyEdit(models.Model):
    """One save of an analysis's policy in the admin: who changed what (old → new), and what
    became of it. Devices enforce none of it until another privacy officer approves it: whoever
    edited a pending change may not approve it (analyses.services.policy.analysis_approve)."""

    class Outcome(models.TextChoices):
        PENDING = "pending", "Waiting for approval"
        APPROVED = "approved", "Approved"
        REJECTED = "rejected", "Rejected"
        UNDONE = "undone", "Undone by a later edit"

    analysis = models.ForeignKey(Analysis, on_delete=models.CASCADE, related_name="policy_edits")
    edited_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+")
    edited_at = models.DateTimeField()
    # One line per value, "budget.epsilon: 2.0 → 3.0" (analyses.rules.enforced_policy.pending_changes).
    changes = models.JSONField()
    outcome = models.CharField(max_length=16, choices=Outcome.choices, default=Outcome.PENDING)

    class Meta:
        ordering = ["edited_at", "pk"]

    def __str__(self) -> str:
        return f"{self.analysis} edited at {self.edited_at:%Y-%m-%d %H:%M}"


class PolicyRejection(models.Model):
    """A privacy officer's refusal of the pending edits: they were discarded (the analysis went
    back to the policy devices enforce, which never changed), for the reason recorded here."""

    analysis = models.ForeignKey(Analysis, on_delete=models.CASCADE, related_name="rejections")
    rejected_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+")
    rejected_at = models.DateTimeField()
    reason = models.TextField()
    changes = models.JSONField()  # what was discarded, one line per value

    class Meta:
        ordering = ["rejected_at", "pk"]

    def __str__(self) -> str:
        return f"{self.analysis} edit rejected at {self.rejected_at:%Y-%m-%d %H:%M}"
