"""Operators read the aggregators' batch rules and rejection counters; nothing here is editable.

The leader's rules and counters are in the default store; the helper's counters are read from its
own store (pfs_base.db_router) under "helper report rejections"."""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest

from aggregation.models import CollectionRules, HelperReportRejection, ReportRejection
from pfs_base.db_router import HELPER


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


@admin.register(CollectionRules)
class CollectionRulesAdmin(ReadOnlyAdmin):
    list_display = ["key", "length", "min_cohort", "weight_bound", "noise_epsilon", "expected_rate", "closed"]
    list_filter = ["closed"]
    search_fields = ["key"]


@admin.register(ReportRejection)
class ReportRejectionAdmin(ReadOnlyAdmin):
    list_display = ["collection_key", "role", "reason", "count"]
    list_filter = ["role", "reason"]
    search_fields = ["collection_key"]


@admin.register(HelperReportRejection)
class HelperReportRejectionAdmin(ReportRejectionAdmin):
    def get_queryset(self, request: HttpRequest):
        return super().get_queryset(request).using(HELPER)
