"""The helper's own service (pfs_web.settings_helper): its HPKE configuration, nothing else yet.

/healthz, /readyz and /metrics answer in pfs_base.probes' middleware, before these routes. Every
other path is a 404 in the API's error format: no page, no admin, no sign-in.
"""

from django.http import HttpRequest, JsonResponse
from django.urls import path

from aggregation.config_api import hpke_config
from pfs_base.api_errors import error_body, server_error_body


def not_found(request: HttpRequest, exception: Exception | None = None) -> JsonResponse:
    return JsonResponse(error_body("No such endpoint on the helper aggregator.", "not_found"), status=404)


def server_error(request: HttpRequest) -> JsonResponse:
    return JsonResponse(server_error_body(), status=500)


urlpatterns = [path("hpke_config", hpke_config, name="hpke-config")]

handler404 = not_found
handler500 = server_error
