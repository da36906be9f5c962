"""Operators read the leader's batch rules and rejection counters; nothing here is editable.

The counters include the helper's rejections as the helper answered them in its aggregation jobs;
the helper's own records are in its own store, which the leader's process cannot open.
"""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest

from aggregation.models import CollectionRules, ReportRejection


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


@admin.register(CollectionRules)
class CollectionRulesAdmin(ReadOnlyAdmin):
    list_display = ["key", "length", "min_cohort", "weight_bound", "noise_epsilon", "closed"]
    list_filter = ["closed"]
    search_fields = ["key"]


@admin.register(ReportRejection)
class ReportRejectionAdmin(ReadOnlyAdmin):
    list_display = ["collection_key", "role", "reason", "count"]
    list_filter = ["role", "reason"]
    search_fields = ["collection_key"]
