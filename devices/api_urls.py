"""Routes of the device API, under /api/device/ (docs/devices-sdk.md)."""

from django.urls import path

from aggregation.api import ReportUpload
from devices.api import DeviceTasks, DeviceTokens

urlpatterns = [
    path("tasks/", DeviceTasks.as_view(), name="api-device-tasks"),
    path("tokens/", DeviceTokens.as_view(), name="api-device-tokens"),
    path("reports/", ReportUpload.as_view(), name="api-device-reports"),
]
