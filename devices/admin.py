from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest

from devices.models import Fleet, PolicySnapshot, ShardRun


class ReadOnly(admin.ModelAdmin):
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


@admin.register(Fleet)
class FleetAdmin(ReadOnly):
    list_display = ["name", "size", "seed", "created_at"]
    exclude = ["vocabularies"]


@admin.register(PolicySnapshot)
class PolicySnapshotAdmin(ReadOnly):
    list_display = ["digest", "created_at"]


@admin.register(ShardRun)
class ShardRunAdmin(ReadOnly):
    list_display = ["task_key", "shard", "answered", "outcomes", "epsilon_spent", "created_at"]
    list_filter = ["task_key"]
