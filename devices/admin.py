from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html

from devices.audit import DeviceNotFound, device_audit
from devices.models import CollectionWindow, DeviceCredential, Fleet, PolicySnapshot, ShardRun


class ReadOnly(admin.ModelAdmin):
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


@admin.register(Fleet)
class FleetAdmin(ReadOnly):
    list_display = ["name", "kind", "size", "seed", "created_at", "audit_link"]
    list_filter = ["kind"]
    exclude = ["vocabularies"]

    @admin.display(description="Device audit log")
    def audit_link(self, fleet: Fleet) -> str:
        if fleet.is_real:
            return "—"  # real devices keep their own log: the server has no per-device record
        return format_html('<a href="{}">look up a device</a>', reverse("admin:devices_fleet_audit", args=[fleet.pk]))

    def get_urls(self):
        audit = self.admin_site.admin_view(self.audit_view)
        return [path("<int:pk>/audit/", audit, name="devices_fleet_audit"), *super().get_urls()]

    def audit_view(self, request: HttpRequest, pk: int) -> HttpResponse:
        """One simulated device's log: each task it received, its decision and the epsilon it spent."""
        if not self.has_view_permission(request):
            return HttpResponse(status=403)
        fleet = get_object_or_404(Fleet, pk=pk)
        device_id = request.GET.get("device", "").strip()
        entries, error = [], ""
        if device_id:
            try:
                entries = device_audit(fleet=fleet, device_id=device_id)
            except DeviceNotFound as missing:
                error = str(missing)
        context = {
            **self.admin_site.each_context(request),
            "title": f"Device audit log · fleet {fleet.name}",
            "fleet": fleet,
            "device_id": device_id,
            "entries": entries,
            "error": error,
            "opts": self.model._meta,
        }
        return TemplateResponse(request, "admin/devices/fleet/audit.html", context)


@admin.register(PolicySnapshot)
class PolicySnapshotAdmin(ReadOnly):
    list_display = ["digest", "created_at"]


@admin.register(ShardRun)
class ShardRunAdmin(ReadOnly):
    list_display = ["task_key", "shard", "answered", "outcomes", "epsilon_spent", "created_at"]
    list_filter = ["task_key"]
    exclude = ["decisions"]


@admin.register(DeviceCredential)
class DeviceCredentialAdmin(ReadOnly):
    """Registered real devices: who they are and when they were last seen. The server holds no data of theirs."""

    list_display = ["device_id", "fleet", "created_at", "last_seen_at"]
    list_filter = ["fleet"]
    search_fields = ["device_id"]
    exclude = ["secret_hash"]


@admin.register(CollectionWindow)
class CollectionWindowAdmin(ReadOnly):
    list_display = ["task_key", "fleet", "opened_at", "closes_at", "closed_at"]
    list_filter = ["fleet"]
