"""What the API answers, as serializers: they shape the output and describe it in the OpenAPI schema."""

from __future__ import annotations

from typing import Any

from django.urls import reverse
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from analyses.models import AdaptiveRun, Analysis, Recipe, Round
from analyses.services.accuracy import recipe_expected_error
from analyses.services.policy import analysis_spent
from analyses.services.rounds import round_progress
from devices.models import Fleet
from pfs_device.streams import RETENTION_DAYS, STREAMS
from privacy.intervals import INTERVALS, VIEWS
from privacy.parameters import PRIVACY_KEYS


class FieldPolicySerializer(serializers.Serializer):
    localEpsilon = serializers.FloatField()  # noqa: N815 - the policy's JSON key
    epsilon = serializers.FloatField()
    reports = serializers.IntegerField()


class SpentFieldSerializer(serializers.Serializer):
    epsilon = serializers.FloatField()
    reports = serializers.IntegerField()


class SpentSerializer(serializers.Serializer):
    epsilon = serializers.FloatField()
    reports = serializers.IntegerField()
    fields = serializers.DictField(child=SpentFieldSerializer(), help_text="Spent per data field.")


class AnalysisSerializer(serializers.ModelSerializer):
    fleet = serializers.CharField(source="fleet.name")
    owner = serializers.CharField(source="owner.username")
    query_class = serializers.SerializerMethodField()
    epsilon_allowed = serializers.SerializerMethodField()
    reports_allowed = serializers.SerializerMethodField()
    delta = serializers.SerializerMethodField()
    field_policies = serializers.SerializerMethodField()
    pending_changes = serializers.ListField(
        child=serializers.CharField(),
        read_only=True,
        help_text="An officer's edit not approved yet, one line per value; the figures above are the approved ones.",
    )
    spent = serializers.SerializerMethodField()

    class Meta:
        model = Analysis
        fields = [
            "identifier",
            "title",
            "fleet",
            "owner",
            "status",
            "query_class",
            "epsilon_allowed",
            "reports_allowed",
            "delta",
            "field_policies",
            "pending_changes",
            "spent",
            "approved_at",
        ]

    # The policy devices enforce (the approved snapshot), never an unapproved edit.
    @extend_schema_field(serializers.DictField())
    def get_query_class(self, analysis: Analysis) -> dict:
        return analysis.enforced.query_class

    @extend_schema_field(serializers.FloatField())
    def get_epsilon_allowed(self, analysis: Analysis) -> float:
        return analysis.enforced.epsilon_allowed

    @extend_schema_field(serializers.IntegerField())
    def get_reports_allowed(self, analysis: Analysis) -> int:
        return analysis.enforced.reports_allowed

    @extend_schema_field(serializers.FloatField())
    def get_delta(self, analysis: Analysis) -> float:
        return analysis.enforced.delta

    @extend_schema_field(serializers.DictField(child=FieldPolicySerializer()))
    def get_field_policies(self, analysis: Analysis) -> dict:
        return {
            p.field: {"localEpsilon": p.local_epsilon, "epsilon": p.epsilon, "reports": p.reports}
            for p in analysis.enforced.field_budgets
        }

    @extend_schema_field(SpentSerializer)
    def get_spent(self, analysis: Analysis) -> dict:
        # A list view computes every analysis's spending in one query and passes it in the context.
        known = self.context.get("spent", {})
        return known[analysis.pk] if analysis.pk in known else analysis_spent(analysis)


class ExpectedErrorSerializer(serializers.Serializer):
    reports = serializers.FloatField(help_text="The reports expected: the fleet's devices times the sampling rate.")
    buckets = serializers.IntegerField()
    per_bucket = serializers.FloatField(help_text="reports / buckets: a bucket's count if they spread evenly.")
    standard_error = serializers.FloatField(help_text="Of one bucket's released count, in devices.")
    half_width = serializers.FloatField(help_text="The count is within ± this of the truth with probability 0.95.")
    level = serializers.FloatField()
    relative_error = serializers.FloatField(allow_null=True, help_text="half_width / per_bucket.")
    too_noisy = serializers.BooleanField(help_text="half_width >= per_bucket (docs/accuracy.md).")


class RecipeSerializer(serializers.ModelSerializer):
    analysis = serializers.CharField(source="analysis.identifier")
    # The privacy parameters: one value on the model (Recipe.privacy), flat keys here as ever.
    noise = serializers.ChoiceField(choices=Recipe.Noise.choices, source="privacy.noise", read_only=True)
    mechanism = serializers.CharField(
        source="privacy.mechanism", read_only=True, help_text="The local randomizer; blank with aggregator noise."
    )
    epsilon0 = serializers.FloatField(
        source="privacy.epsilon0",
        read_only=True,
        allow_null=True,
        help_text="Local epsilon; none with aggregator noise.",
    )
    epsilon = serializers.FloatField(source="privacy.epsilon", read_only=True)
    delta = serializers.FloatField(source="privacy.delta", read_only=True)
    sampling_rate = serializers.FloatField(source="privacy.sampling_rate", read_only=True)
    min_cohort = serializers.IntegerField(
        source="privacy.min_cohort",
        read_only=True,
        help_text="Client noise: computed from epsilon0, epsilon and delta (or the recipe's larger one). "
        "Aggregator noise: the recipe's, a hardening the guarantee does not depend on.",
    )

    expected_error = serializers.SerializerMethodField(
        help_text="Next to its cost: one bucket's expected error for the fleet's devices times the sampling rate "
        "(docs/accuracy.md)."
    )

    class Meta:
        model = Recipe
        fields = [
            "id",
            "analysis",
            "identifier",
            "content",
            "encoded_field",
            *PRIVACY_KEYS,
            "expected_error",
            "created_at",
        ]

    @extend_schema_field(ExpectedErrorSerializer)
    def get_expected_error(self, recipe: Recipe) -> dict:
        return recipe_expected_error(recipe.analysis, recipe.privacy, recipe.encoding.size).as_json()


class ProgressSerializer(serializers.Serializer):
    shards_total = serializers.IntegerField()
    shards_done = serializers.IntegerField()
    devices_answered = serializers.IntegerField(
        help_text="Reports in batches that reached their minimum cohort (while running), or released: "
        "never a count that includes a batch below its minimum cohort."
    )
    devices_not_answering = serializers.DictField(
        child=serializers.IntegerField(allow_null=True),
        help_text="Devices by reason; the counts are null unless the round released every batch.",
    )
    elapsed_seconds = serializers.FloatField(allow_null=True, help_text="Since the round started, or until it ended.")
    eta_seconds = serializers.FloatField(allow_null=True, help_text="Left at the shards' pace; null when unknown.")
    # A round on real devices (no shards) says what the aggregators hold instead.
    reports_accepted = serializers.IntegerField(
        required=False, help_text="Accepted reports in batches that reached their minimum cohort, or released."
    )
    reports_rejected = serializers.DictField(
        child=serializers.DictField(child=serializers.IntegerField()), required=False, help_text="By aggregator."
    )
    collection = serializers.DictField(required=False, help_text="The collection window: open, opened_at, ...")


class RoundSerializer(serializers.ModelSerializer):
    recipe = serializers.IntegerField(source="recipe.pk")
    analysis = serializers.CharField(source="recipe.analysis.identifier")
    progress = serializers.SerializerMethodField()
    release_url = serializers.SerializerMethodField()

    class Meta:
        model = Round
        fields = [
            "id",
            "recipe",
            "analysis",
            "status",
            "progress",
            "error",
            "created_at",
            "started_at",
            "finished_at",
            "release_url",
        ]

    @extend_schema_field(ProgressSerializer)
    def get_progress(self, round_: Round) -> dict:
        # A list view passes every row's progress, computed in one query (rounds_progress).
        known = self.context.get("progress", {})
        progress = known[round_.pk] if round_.pk in known else round_progress(round_)
        return {k: v for k, v in progress.items() if k not in ("status", "error")}

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_release_url(self, round_: Round) -> str | None:
        if round_.status != Round.Status.RELEASED:
            return None
        return reverse("api-release", kwargs={"pk": round_.pk})


class StreamFieldSerializer(serializers.Serializer):
    name = serializers.CharField()
    kind = serializers.ChoiceField(choices=["number", "category", "text"])


class StreamSerializer(serializers.Serializer):
    name = serializers.CharField()
    fields = StreamFieldSerializer(many=True)
    retention_days = serializers.IntegerField(allow_null=True, help_text="Days an event is kept; null: state.")


def streams_schema() -> list[dict[str, Any]]:
    """The streams every fleet's devices hold and the fields each exposes to queries (pfs_device.streams)."""
    return [
        {
            "name": stream,
            "fields": [{"name": name, "kind": kind} for name, kind in fields.items()],
            "retention_days": RETENTION_DAYS[stream],
        }
        for stream, fields in STREAMS.items()
    ]


class FleetSerializer(serializers.ModelSerializer):
    """A fleet as an analyst plans with it: size, shards, what it offers, and the user's analyses on it.

    Never a device's data, nor the synthetic generator's seed (which would regenerate every device).
    """

    shards = serializers.IntegerField(source="shard_count")
    synthetic = serializers.SerializerMethodField()
    streams = serializers.SerializerMethodField()
    analyses = serializers.SerializerMethodField()
    url = serializers.SerializerMethodField()

    class Meta:
        model = Fleet
        fields = ["name", "size", "shards", "synthetic", "created_at", "streams", "analyses", "url"]

    def get_synthetic(self, fleet: Fleet) -> bool:
        return fleet.seed is not None

    @extend_schema_field(StreamSerializer(many=True))
    def get_streams(self, fleet: Fleet) -> list[dict[str, Any]]:
        return streams_schema()

    @extend_schema_field(serializers.ListField(child=serializers.CharField()))
    def get_analyses(self, fleet: Fleet) -> list[str]:
        """Identifiers of the analyses on the fleet that the user may see (context["analyses"])."""
        return sorted(self.context["analyses"].get(fleet.pk, []))

    def get_url(self, fleet: Fleet) -> str:
        return reverse("api-fleet-detail", kwargs={"name": fleet.name})


class DryRunSerializer(serializers.Serializer):
    devices = serializers.IntegerField()
    would_answer = serializers.IntegerField()
    not_sampled = serializers.IntegerField()
    would_refuse = serializers.DictField(child=serializers.IntegerField(), help_text="Devices by reason.")
    min_cohort = serializers.IntegerField()
    meets_min_cohort = serializers.BooleanField(help_text="Every batch would be released (release is all).")
    release = serializers.ChoiceField(
        choices=["all", "some", "none"], help_text="How many batches would be released: the one verdict per batch."
    )
    cohorts = serializers.ListField(child=serializers.DictField(), help_text="{cohort, expected, below, source}.")
    batches_released = serializers.ListField(child=serializers.CharField())
    batches_below = serializers.ListField(child=serializers.CharField(), help_text="Suppressed, though they spend.")
    epsilon = serializers.FloatField(help_text="The round's cost, next to its expected error.")
    delta = serializers.FloatField()
    expected_error = ExpectedErrorSerializer()
    too_noisy = serializers.BooleanField(help_text="A start needs confirmSmallCohorts.")
    too_noisy_reason = serializers.CharField(allow_null=True)


class ProposalSerializer(serializers.Serializer):
    privacy = serializers.DictField(help_text="The recipe's privacy object for the parameters proposed.")
    min_cohort = serializers.IntegerField()
    buckets = serializers.IntegerField()
    expected_error = ExpectedErrorSerializer()


class ProposeAnswerSerializer(serializers.Serializer):
    met = serializers.BooleanField(help_text="Whether parameters within the policy meet the target.")
    target = serializers.DictField()
    assumption = serializers.CharField()
    level = serializers.FloatField()
    message = serializers.CharField()
    proposal = ProposalSerializer(allow_null=True, help_text="The cheapest (least ε) parameters that meet it.")
    recipe = serializers.DictField(required=False, help_text="The recipe with the proposal's privacy, when met.")
    best = ProposalSerializer(required=False, allow_null=True, help_text="When not met: the best within the policy.")
    fewer_buckets = ProposalSerializer(
        required=False, allow_null=True, help_text="When not met: the most buckets (halving) at which it is."
    )


class ReleaseBucketSerializer(serializers.Serializer):
    label = serializers.CharField()
    estimate = serializers.FloatField()
    standard_error = serializers.FloatField()
    ci95 = serializers.ListField(child=serializers.FloatField(), min_length=2, max_length=2)


class ReleaseBatchSerializer(serializers.Serializer):
    cohort = serializers.CharField()
    reports = serializers.IntegerField(allow_null=True, help_text="null when suppressed: never a suppressed size.")
    min_cohort = serializers.IntegerField()
    suppressed = serializers.BooleanField()
    reason = serializers.CharField(required=False, help_text="Why a suppressed batch was not released.")
    buckets = ReleaseBucketSerializer(many=True, required=False)


class ReleaseJointSerializer(serializers.Serializer):
    fields = serializers.ListField(child=serializers.CharField())
    labels = serializers.ListField(child=serializers.ListField(child=serializers.CharField()))


class ReleaseSerializer(serializers.Serializer):
    """analyses.presenters.releases.release_as_json; keys added since some releases were stored may be missing."""

    analysis = serializers.CharField()
    recipe = serializers.CharField()
    round = serializers.IntegerField()
    field = serializers.CharField()
    noise = serializers.ChoiceField(choices=Recipe.Noise.values, required=False)
    aggregator_sigma = serializers.FloatField(allow_null=True, required=False)
    aggregator_laplace_scale = serializers.FloatField(allow_null=True, required=False)
    mechanism = serializers.CharField(allow_blank=True)
    epsilon0 = serializers.FloatField(allow_null=True)
    epsilon = serializers.FloatField()
    delta = serializers.FloatField()
    sampling_rate = serializers.FloatField()
    min_cohort = serializers.IntegerField()
    reports = serializers.IntegerField()
    epsilon_spent = serializers.FloatField()
    refusals = serializers.DictField(
        child=serializers.IntegerField(allow_null=True),
        help_text="Devices not answering, by reason; null counts where a batch was suppressed: the fleet's "
        "size minus them would give the suppressed batches' total.",
    )
    rejected_reports = serializers.DictField(
        child=serializers.DictField(child=serializers.IntegerField()),
        required=False,
        help_text="Per aggregator, uploaded reports rejected by reason.",
    )
    joint = ReleaseJointSerializer(allow_null=True, required=False)
    intervals = serializers.ChoiceField(choices=INTERVALS)
    view = serializers.ChoiceField(choices=VIEWS)
    interval = serializers.CharField()
    rule = serializers.CharField()
    notes = serializers.ListField(child=serializers.CharField())
    buckets = ReleaseBucketSerializer(many=True, required=False, help_text="With no cohorts: the one batch's.")
    batches = ReleaseBatchSerializer(many=True)
    buckets_total = serializers.IntegerField(help_text="Buckets of the release; each page holds a slice of them.")
    bucket_offset = serializers.IntegerField(help_text="The first bucket of this page.")
    bucket_limit = serializers.IntegerField(help_text="Buckets per page (at most 10,000).")
    next_offset = serializers.IntegerField(
        allow_null=True, help_text="bucket_offset of the next page; null on the last."
    )


class AdaptiveRunSerializer(serializers.Serializer):
    """analyses.api.adaptive.adaptive_run_json (docs/adaptive.md)."""

    id = serializers.IntegerField()
    url = serializers.CharField()
    analysis = serializers.CharField()
    kind = serializers.ChoiceField(choices=AdaptiveRun.Kind.values)
    status = serializers.ChoiceField(choices=AdaptiveRun.Status.values)
    stop_reason = serializers.CharField(allow_blank=True)
    plan = serializers.ListField(child=serializers.DictField(), help_text="Per round: epsilon0, epsilon, delta.")
    epsilon_spent = serializers.FloatField()
    levels = serializers.ListField(child=serializers.DictField(), help_text="What each finished round found.")
    next_recipe = serializers.DictField(required=False, help_text="While paused: the waiting round's recipe.")
    comparison = serializers.DictField(required=False, help_text="With a baseline: interactive against static.")
    combined = serializers.DictField(
        required=False, help_text="Bucket refinement: every round pooled over the last round's buckets."
    )
    created_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField(allow_null=True)
    current_round = RoundSerializer(allow_null=True)
