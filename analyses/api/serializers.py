from __future__ import annotations

from rest_framework import serializers

from analyses.models import Analysis, Recipe, Round
from analyses.services import analysis_spent, round_progress


class AnalysisSerializer(serializers.ModelSerializer):
    fleet = serializers.CharField(source="fleet.name")
    owner = serializers.CharField(source="owner.username")
    field_policies = serializers.SerializerMethodField()
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
            "spent",
            "approved_at",
        ]

    def get_field_policies(self, analysis: Analysis) -> dict:
        return {
            p.field: {"localEpsilon": p.local_epsilon, "epsilon": p.epsilon, "reports": p.reports}
            for p in analysis.field_policies.all()
        }

    def get_spent(self, analysis: Analysis) -> dict:
        return analysis_spent(analysis)


class RecipeSerializer(serializers.ModelSerializer):
    analysis = serializers.CharField(source="analysis.identifier")

    class Meta:
        model = Recipe
        fields = [
            "id",
            "analysis",
            "identifier",
            "content",
            "encoded_field",
            "mechanism",
            "epsilon0",
            "epsilon",
            "delta",
            "sampling_rate",
            "min_cohort",
            "created_at",
        ]


class RoundSerializer(serializers.ModelSerializer):
    recipe = serializers.IntegerField(source="recipe.pk")
    progress = serializers.SerializerMethodField()
    release_url = serializers.SerializerMethodField()

    class Meta:
        model = Round
        fields = [
            "id",
            "recipe",
            "status",
            "progress",
            "error",
            "created_at",
            "started_at",
            "finished_at",
            "release_url",
        ]

    def get_progress(self, round_: Round) -> dict:
        progress = round_progress(round_)
        return {k: v for k, v in progress.items() if k not in ("status", "error")}

    def get_release_url(self, round_: Round) -> str | None:
        if round_.status != Round.Status.RELEASED:
            return None
        return f"/api/rounds/{round_.pk}/release/"
