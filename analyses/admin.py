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
from django.utils.html import format_html

from analyses.forms.admin import AnalysisAdminForm, FieldPolicyAdminForm, FieldPolicyFormSet, PolicyRejectForm
from analyses.models import Analysis, FieldPolicy, Recipe, Release, Round
from analyses.services.approvals import (
    analysis_reject,
    approval_lines,
    approval_lines_digest,
    pending_editors,
    policy_edit_record,
    policy_history,
)
from analyses.services.budget import analysis_guarantees
from analyses.services.policy import analysis_approve, analysis_lock
from analyses.templatetags.figures import figure
from pfs_base.errors import Conflict, NotAllowed, ValidationFailed


class FieldPolicyInline(admin.TabularInline):
    model = FieldPolicy
    form = FieldPolicyAdminForm
    formset = FieldPolicyFormSet
    extra = 0


@admin.register(Analysis)
class AnalysisAdmin(admin.ModelAdmin):
    form = AnalysisAdminForm
    change_form_template = "admin/analyses/analysis/change_form.html"
    object_history_template = "admin/analyses/analysis/object_history.html"
    # Few, short columns so that the list fits 1,280 px beside its filters (budget and spent in one each).
    list_display = ["identifier", "fleet", "status", "budget", "spent", "approval"]
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
                "description": "Devices enforce the policy snapshot taken at approval. An edit of budgets or "
                "field policies is not in force until another privacy officer approves it.",
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

    @admin.display(description="Budget (enforced)")
    def budget(self, analysis: Analysis) -> str:
        policy = analysis.enforced
        return f"ε {figure(policy.epsilon_allowed)}, {policy.reports_allowed} reports, δ {figure(policy.delta)}"

    @admin.display(description="Spent (ε, δ)")
    def spent(self, analysis: Analysis) -> str:
        # The budget page's statement (a device that answered every round started, as its accountant composes).
        if not analysis.is_approved:
            return "—"
        spent = analysis_guarantees(analysis)[None]
        return f"ε {figure(spent.epsilon)}, δ {figure(spent.delta)}"

    @admin.display(description="Approved")
    def approval(self, analysis: Analysis) -> str:
        if analysis.approved_at is None:
            return "never"
        by = analysis.approved_by.get_username() if analysis.approved_by else "?"
        pending = " · edit pending" if analysis.pending_changes else ""
        return format_html("{} by {}<strong>{}</strong>", f"{analysis.approved_at:%Y-%m-%d}", by, pending)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Analysis]:
        return super().get_queryset(request).select_related("fleet", "approved_by", "snapshot")

    def get_readonly_fields(self, request: HttpRequest, obj: Analysis | None = None) -> list[str]:
        # Devices key their budgets by the identifier: once approved, it cannot change.
        fields = list(super().get_readonly_fields(request, obj))
        return [*fields, "identifier"] if obj is not None and obj.snapshot_id is not None else fields

    def get_urls(self) -> list:
        approve = self.admin_site.admin_view(self.approve_view)
        reject = self.admin_site.admin_view(self.reject_view)
        return [
            path("<int:pk>/approve/", approve, name="analyses_analysis_approve"),
            path("<int:pk>/reject/", reject, name="analyses_analysis_reject"),
            *super().get_urls(),
        ]

    def change_view(self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: Any = None):
        analysis = self.get_object(request, object_id)
        extra = {**(extra_context or {})}
        if analysis is not None:
            extra["approval_lines"] = approval_lines(analysis)
            extra["pending_edits"] = pending_editors(analysis)
        return super().change_view(request, object_id, form_url, extra)

    def history_view(self, request: HttpRequest, object_id: str, extra_context: Any = None):
        analysis = self.get_object(request, object_id)
        extra = {**(extra_context or {})}
        if analysis is not None:
            extra["policy_history"] = policy_history(analysis)
        return super().history_view(request, object_id, extra)

    # An edit is saved in two steps (the analysis, then its field policies): the policy as it was
    # is read before the first, the edit recorded after the second. The admin saves in one
    # transaction; the analysis's row stays locked to its end, so an approval (which takes the same
    # lock) sees the edit with its editor, or neither.
    def save_model(self, request: HttpRequest, obj: Analysis, form: Any, change: bool) -> None:
        form.policy_before = analysis_lock(obj).edited_policy() if change else None
        super().save_model(request, obj, form, change)

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        super().save_related(request, form, formsets, change)
        # Read by log_change and message_user, which Django calls next in this request.
        request.policy_edit = policy_edit_record(
            analysis=form.instance, officer=request.user, before=form.policy_before
        )
        request.policy_not_in_force = bool(approval_lines(form.instance))

    def log_change(self, request: HttpRequest, obj: Any, message: Any) -> Any:
        # The history's line for an edit says old → new, not only which fields changed.
        edit = getattr(request, "policy_edit", None)
        return super().log_change(request, obj, "; ".join(edit.changes) if edit else message)

    def log_addition(self, request: HttpRequest, obj: Any, message: Any) -> Any:
        edit = getattr(request, "policy_edit", None)
        return super().log_addition(request, obj, "; ".join(edit.changes) if edit else message)

    def message_user(self, request: HttpRequest, message: Any, level: int = messages.INFO, *args, **kwargs) -> None:
        # Django's "changed successfully" after a save must not read as "in force".
        if level == messages.SUCCESS and getattr(request, "policy_not_in_force", False):
            message = format_html(
                "{} Not in force until approved: devices keep the policy they enforce until another "
                "privacy officer approves this change.",
                message,
            )
        super().message_user(request, message, level, *args, **kwargs)

    @staticmethod
    def _approved_message(analysis: Analysis) -> str:
        return f"Approved {analysis.identifier}: devices of fleet {analysis.fleet.name} now enforce its policy."

    @admin.action(description="Approve (devices receive a snapshot of the current policy)")
    def approve(self, request: HttpRequest, queryset: QuerySet[Analysis]) -> None:
        for analysis in queryset:
            try:
                analysis_approve(analysis=analysis, officer=request.user)
            except NotAllowed as refusal:
                self.message_user(request, f"Not approved {analysis.identifier}: {refusal}", messages.ERROR)
                continue
            self.log_change(request, analysis, f"Approved: devices enforce snapshot {analysis.snapshot.digest[:16]}…")
            self.message_user(request, self._approved_message(analysis), messages.SUCCESS)

    def _approval_page(
        self,
        request: HttpRequest,
        analysis: Analysis,
        *,
        reject_form: PolicyRejectForm | None = None,
        refusal: str = "",
        status: int = 200,
    ) -> HttpResponse:
        edits = pending_editors(analysis)
        lines = approval_lines(analysis)
        context = {
            **self.admin_site.each_context(request),
            "title": f"Approve {analysis.identifier}",
            "analysis": analysis,
            "lines": lines,
            "reviewed": approval_lines_digest(lines),
            "first_approval": analysis.snapshot_id is None,
            "pending_edits": edits,
            "own_change": any(edit.edited_by_id == request.user.pk for edit in edits),
            "refusal": refusal,
            "reject_form": reject_form or PolicyRejectForm(),
            "opts": Analysis._meta,
            "original": analysis,
        }
        return TemplateResponse(request, "admin/analyses/analysis/approve.html", context, status=status)

    def _officer_analysis(self, request: HttpRequest, pk: int) -> Analysis:
        analysis = get_object_or_404(Analysis, pk=pk)
        if not self.has_change_permission(request, analysis):
            raise PermissionDenied("Only a privacy officer can approve or reject an analysis's policy.")
        return analysis

    def approve_view(self, request: HttpRequest, pk: int) -> HttpResponse:
        """GET: the snapshot diff an approval would send devices, who edited it, and the buttons to
        approve or reject it. POST: approve (a change to approve only: an approval with nothing new
        sends nothing); whoever edited the change is refused here, as in the service."""
        if request.method not in ("GET", "POST"):
            return HttpResponseNotAllowed(["GET", "POST"])
        analysis = self._officer_analysis(request, pk)
        if request.method == "GET":
            return self._approval_page(request, analysis)
        lines = approval_lines(analysis)
        if not lines:
            self.message_user(request, "Nothing to approve: devices already enforce this policy.", messages.INFO)
            return redirect("admin:analyses_analysis_change", analysis.pk)
        reviewed = request.POST.get("reviewed")  # the page's; a script posting none approves what is saved
        if reviewed is not None and reviewed != approval_lines_digest(lines):
            refusal = "The policy was edited since you opened this page: nothing was approved. Review the diff below."
            return self._approval_page(request, analysis, refusal=refusal, status=409)
        try:
            analysis_approve(analysis=analysis, officer=request.user)
        except NotAllowed as refusal:
            return self._approval_page(request, analysis, refusal=str(refusal), status=403)
        self.log_change(request, analysis, f"Approved: devices enforce snapshot {analysis.snapshot.digest[:16]}…")
        self.message_user(request, self._approved_message(analysis), messages.SUCCESS)
        return redirect("admin:analyses_analysis_change", analysis.pk)

    def reject_view(self, request: HttpRequest, pk: int) -> HttpResponse:
        """POST: reject the pending edits with a reason. They are discarded; devices' policy is unchanged."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        analysis = self._officer_analysis(request, pk)
        form = PolicyRejectForm(request.POST)
        if form.is_valid():
            try:
                rejection = analysis_reject(analysis=analysis, officer=request.user, reason=form.cleaned_data["reason"])
            except ValidationFailed as invalid:
                for message in invalid.errors.get("reason", []):
                    form.add_error("reason", message)
            except Conflict as refusal:
                return self._approval_page(request, analysis, reject_form=form, refusal=str(refusal), status=409)
            else:
                self.log_change(
                    request, analysis, f"Rejected: {'; '.join(rejection.changes)}. Reason: {rejection.reason}"
                )
                self.message_user(
                    request,
                    f"Rejected the pending edit of {analysis.identifier}: it is discarded; devices of fleet "
                    f"{analysis.fleet.name} keep the policy they enforce.",
                    messages.SUCCESS,
                )
                return redirect("admin:analyses_analysis_change", analysis.pk)
        return self._approval_page(request, analysis, reject_form=form, status=400)


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
