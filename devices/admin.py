from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html

from devices.audit import AuditEntry, DeviceNotFound, device_audit
from devices.models import CollectionWindow, DeviceCredential, Fleet, PolicySnapshot, ShardRun


def _first_device_id(fleet: Fleet) -> str:
    """The fleet's first device id, to show the format: d0 for a generated fleet, its own scheme
    for a fleet loaded from records (docs/fleets.md)."""
    shard = fleet.shards.order_by("index").first()
    ids = shard.load_columns().get("device_id") if shard is not None else None
    return str(ids[0]) if ids is not None and len(ids) else "d0"


def fleet_device_audit(*, fleet: Fleet, typed: str) -> tuple[str, list[AuditEntry]]:
    """The log of the device ``typed`` names, and its id: an officer who types a number (42) means
    the generated fleet's device d42 when no device is named 42 itself."""
    try:
        return typed, device_audit(fleet=fleet, device_id=typed)
    except DeviceNotFound:
        if not typed.isdigit():
            raise
    return f"d{typed}", device_audit(fleet=fleet, device_id=f"d{typed}")


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
        typed = request.GET.get("device", "").strip()
        example = _first_device_id(fleet)
        device_id, entries, error = "", [], ""
        if typed:
            try:
                device_id, entries = fleet_device_audit(fleet=fleet, typed=typed)
            except DeviceNotFound:
                error = f"No device {typed!r} in fleet {fleet.name}. Its ids look like {example} (the first of them)."
        context = {
            **self.admin_site.each_context(request),
            "title": f"Device audit log · fleet {fleet.name}",
            "fleet": fleet,
            "typed": typed,
            "device_id": device_id,
            "example": example,
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
