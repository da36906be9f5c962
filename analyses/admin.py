"""The privacy officer's console: data-field policies, analysis budgets, approval."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed
from django.shortcuts import get_object_or_404, redirect
from django.template.response import TemplateResponse
from django.urls import path

from analyses.forms.admin import AnalysisAdminForm, FieldPolicyAdminForm, FieldPolicyFormSet
from analyses.models import Analysis, FieldPolicy, Recipe, Release, Round
from analyses.rules.enforced_policy import pending_changes
from analyses.services.policy import analysis_approve
from pfs_base.errors import NotAllowed


class FieldPolicyInline(admin.TabularInline):
    model = FieldPolicy
    form = FieldPolicyAdminForm
    formset = FieldPolicyFormSet
    extra = 0


def approval_lines(analysis: Analysis) -> list[str]:
    """What approving ``analysis`` now would send devices, in words: the change from the snapshot
    they enforce, or, never approved, the whole policy (from nothing)."""
    edited = analysis.edited_policy()
    if analysis.snapshot_id is None:
        return pending_changes(_blank(edited), edited)
    return pending_changes(analysis.snapshot.content, edited)


def _blank(policy: Any) -> Any:
    """The policy's shape with no values: a first approval's diff, one line per value set."""
    return {key: _blank(value) for key, value in policy.items()} if isinstance(policy, dict) else None


@admin.register(Analysis)
class AnalysisAdmin(admin.ModelAdmin):
    form = AnalysisAdminForm
    change_form_template = "admin/analyses/analysis/change_form.html"
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
    readonly_fields = ["status", "approved_by", "approved_at", "snapshot_digest", "created_at"]
    actions = ["approve"]
    # Devices enforce the snapshot taken at approval: edits take effect when approved again.
    fieldsets = [
        (None, {"fields": ["identifier", "title", "fleet", "owner"]}),
        ("Query class: what queries may read", {"fields": ["stream", "query_fields", "cohort_fields"]}),
        (
            "Check 1: analysis budget",
            {"fields": ["epsilon_allowed", "reports_allowed", "delta", "delta_total", "accountant"]},
        ),
        ("Limits", {"fields": ["min_cohort_floor", "max_buckets"]}),
        (
            "Approval",
            {
                "fields": ["status", "approved_by", "approved_at", "snapshot_digest", "created_at"],
                "description": "Devices enforce the policy snapshot taken at approval. After editing "
                "budgets or field policies, approve again to send devices a new snapshot.",
            },
        ),
    ]

    class Media:  # css/admin.css is on every admin page (templates/admin/base_site.html)
        js = ["js/admin_query_class.js"]

    @admin.display(description="Snapshot devices enforce")
    def snapshot_digest(self, analysis: Analysis) -> str:
        if analysis.snapshot_id is None:
            return "None yet: devices enforce nothing of this analysis until it is approved."
        return f"{analysis.snapshot.digest[:16]}… (taken at approval)"

    def get_readonly_fields(self, request: HttpRequest, obj: Analysis | None = None) -> list[str]:
        # Devices key their budgets by the identifier: once approved, it cannot change.
        fields = list(super().get_readonly_fields(request, obj))
        return [*fields, "identifier"] if obj is not None and obj.snapshot_id is not None else fields

    def get_urls(self) -> list:
        approve = self.admin_site.admin_view(self.approve_view)
        return [path("<int:pk>/approve/", approve, name="analyses_analysis_approve"), *super().get_urls()]

    def change_view(self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: Any = None):
        analysis = self.get_object(request, object_id)
        extra = {**(extra_context or {})}
        if analysis is not None:
            extra["approval_lines"] = approval_lines(analysis)
        return super().change_view(request, object_id, form_url, extra)

    @staticmethod
    def _approved_message(analysis: Analysis) -> str:
        return f"Approved {analysis.identifier}: devices of fleet {analysis.fleet.name} now enforce its policy."

    @admin.action(description="Approve (devices receive a snapshot of the current policy)")
    def approve(self, request: HttpRequest, queryset: QuerySet[Analysis]) -> None:
        for analysis in queryset:
            analysis_approve(analysis=analysis, officer=request.user)
            self.message_user(request, self._approved_message(analysis), messages.SUCCESS)

    def approve_view(self, request: HttpRequest, pk: int) -> HttpResponse:
        """GET: the snapshot diff an approval would send devices, and the button that sends it.
        POST: approve (a change to approve only: an approval with nothing new sends nothing)."""
        if request.method not in ("GET", "POST"):
            return HttpResponseNotAllowed(["GET", "POST"])
        analysis = get_object_or_404(Analysis, pk=pk)
        if not self.has_change_permission(request, analysis):
            raise PermissionDenied("Only a privacy officer can approve an analysis.")
        lines = approval_lines(analysis)
        if request.method == "POST":
            if not lines:
                self.message_user(request, "Nothing to approve: devices already enforce this policy.", messages.INFO)
            else:
                try:
                    analysis_approve(analysis=analysis, officer=request.user)
                except NotAllowed as refusal:
                    raise PermissionDenied(str(refusal)) from refusal
                self.message_user(request, self._approved_message(analysis), messages.SUCCESS)
            return redirect("admin:analyses_analysis_change", analysis.pk)
        context = {
            **self.admin_site.each_context(request),
            "title": f"Approve {analysis.identifier}",
            "analysis": analysis,
            "lines": lines,
            "first_approval": analysis.snapshot_id is None,
            "opts": Analysis._meta,
            "original": analysis,
        }
        return TemplateResponse(request, "admin/analyses/analysis/approve.html", context)


def _privacy_column(name: str) -> Callable[[Recipe], Any]:
    """A column of the recipe list showing one of its privacy parameters (held in one value, Recipe.privacy)."""

    @admin.display(description=name.replace("_", " "))
    def column(recipe: Recipe) -> Any:
        return getattr(recipe.privacy, name)

    column.__name__ = name
    return column


@admin.register(Recipe)
class RecipeAdmin(admin.ModelAdmin):
    list_display = [
        "identifier",
        "analysis",
        "encoded_field",
        *(_privacy_column(name) for name in ("noise", "mechanism", "epsilon0", "epsilon", "delta", "min_cohort")),
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
