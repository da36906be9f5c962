"""The helper's own service (pfs_web.settings_helper): its HPKE configuration for devices, and DAP's
aggregation endpoints for the leader (aggregation.dap, aggregation.helper_api).

/healthz, /readyz and /metrics answer in pfs_base.probes' middleware, before these routes. Every
other path is a 404 in the API's error format: no page, no admin, no sign-in.
"""

from django.http import HttpRequest, JsonResponse
from django.urls import path

from aggregation import helper_api
from aggregation.config_api import helper_hpke_config
from pfs_base.api_errors import error_body, server_error_body


def not_found(request: HttpRequest, exception: Exception | None = None) -> JsonResponse:
    return JsonResponse(error_body("No such endpoint on the helper aggregator.", "not_found"), status=404)


def server_error(request: HttpRequest) -> JsonResponse:
    return JsonResponse(server_error_body(), status=500)


urlpatterns = [
    path("hpke_config", helper_hpke_config, name="hpke-config"),
    path("tasks/<str:task_id>", helper_api.task, name="helper-task"),
    path("tasks/<str:task_id>/aggregation_jobs/<str:job_id>", helper_api.aggregation_job, name="helper-job"),
    path("tasks/<str:task_id>/simulated_shares", helper_api.simulated_shares, name="helper-simulated-shares"),
    path("tasks/<str:task_id>/aggregate_shares", helper_api.aggregate_shares, name="helper-aggregate-shares"),
    path("tasks/<str:task_id>/poplar1_reports", helper_api.poplar1_reports, name="helper-poplar1-reports"),
    path("tasks/<str:task_id>/poplar1_jobs/<str:job_id>", helper_api.poplar1_job, name="helper-poplar1-job"),
    path("tasks/<str:task_id>/poplar1_uploads/<str:job_id>", helper_api.poplar1_uploads, name="helper-poplar1-uploads"),
    path(
        "tasks/<str:task_id>/poplar1_aggregate_shares",
        helper_api.poplar1_aggregate_shares,
        name="helper-poplar1-aggregate-shares",
    ),
]

handler404 = not_found
handler500 = server_error
