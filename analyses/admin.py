"""The privacy officer's console: data-field policies, analysis budgets, approval."""

from __future__ import annotations

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from analyses.models import Analysis, FieldPolicy, Recipe, Release, Round
from analyses.services.policy import analysis_approve


class FieldPolicyInline(admin.TabularInline):
    model = FieldPolicy
    extra = 0


@admin.register(Analysis)
class AnalysisAdmin(admin.ModelAdmin):
    list_display = [
        "identifier",
        "fleet",
        "owner",
        "status",
        "epsilon_allowed",
        "reports_allowed",
        "delta",
        "approved_by",
    ]
    list_filter = ["status", "fleet"]
    search_fields = ["identifier", "title"]
    inlines = [FieldPolicyInline]
    readonly_fields = ["status", "approved_by", "approved_at", "snapshot", "created_at"]
    actions = ["approve"]
    # Devices enforce the snapshot taken at approval: edits take effect when approved again.
    fieldsets = [
        (None, {"fields": ["identifier", "title", "fleet", "owner", "query_class"]}),
        ("Check 1: analysis budget", {"fields": ["epsilon_allowed", "reports_allowed", "delta", "accountant"]}),
        ("Limits", {"fields": ["min_cohort_floor", "max_buckets"]}),
        (
            "Approval",
            {
                "fields": ["status", "approved_by", "approved_at", "snapshot", "created_at"],
                "description": "Devices enforce the policy snapshot taken at approval. After editing "
                "budgets or field policies, approve again to send devices a new snapshot.",
            },
        ),
    ]

    def get_readonly_fields(self, request: HttpRequest, obj: Analysis | None = None) -> list[str]:
        # Devices key their budgets by the identifier: once approved, it cannot change.
        fields = list(super().get_readonly_fields(request, obj))
        return [*fields, "identifier"] if obj is not None and obj.snapshot_id is not None else fields

    @admin.action(description="Approve (devices receive a snapshot of the current policy)")
    def approve(self, request: HttpRequest, queryset: QuerySet[Analysis]) -> None:
        for analysis in queryset:
            analysis_approve(analysis=analysis, officer=request.user)
        self.message_user(request, f"Approved {queryset.count()} analyses.", messages.SUCCESS)


@admin.register(Recipe)
class RecipeAdmin(admin.ModelAdmin):
    list_display = [
        "identifier",
        "analysis",
        "encoded_field",
        "noise",
        "mechanism",
        "epsilon0",
        "epsilon",
        "delta",
        "min_cohort",
        "created_by",
    ]
    list_filter = ["analysis"]
    readonly_fields = [f.name for f in Recipe._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # recipes are validated by the service, from the dashboard, API or CLI


@admin.register(Round)
class RoundAdmin(admin.ModelAdmin):
    list_display = ["pk", "recipe", "status", "shards_total", "created_by", "created_at", "finished_at"]
    list_filter = ["status"]
    # Never the seed: with one aggregator's shares it (and the server's coin secret) fixes the masks.
    exclude = ["seed"]
    readonly_fields = [f.name for f in Round._meta.fields if f.name != "seed"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False


@admin.register(Release)
class ReleaseAdmin(admin.ModelAdmin):
    list_display = ["round", "created_at"]
    readonly_fields = ["round", "content", "created_at"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False
