"""Every request: an id, one log line and its latency in the metrics.

The id is the client's (or the proxy's) X-Request-ID when it is a short token, else a new one. Each
log line written while the request runs carries it (pfs_base.logs), and the response returns it, so
a user's report, nginx's log and ours meet on one value. Device uploads take the WSGI fast path
(pfs_web.wsgi) and are timed there.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse

from pfs_base import metrics
from pfs_base.logs import request_id_var

HEADER = "X-Request-ID"
# A client's id lands in our logs: kept only when it is this tame, replaced otherwise.
_ACCEPTED_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")

logger = logging.getLogger("pfs.http")


class RequestContextMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        offered = request.META.get("HTTP_X_REQUEST_ID", "")
        request.id = offered if _ACCEPTED_ID.fullmatch(offered) else uuid.uuid4().hex
        token = request_id_var.set(request.id)
        try:
            started = time.perf_counter()
            response = self.get_response(request)  # Django turns exceptions into responses below us
            seconds = time.perf_counter() - started
            route = route_of(request)
            metrics.http_request_observed(
                route=route, method=request.method, status=response.status_code, seconds=seconds
            )
            response[HEADER] = request.id
            # Probes come every few seconds from every load balancer: counted, not logged.
            logger.log(
                logging.DEBUG if getattr(request, "pfs_route", None) else logging.INFO,
                "%s %s %s",
                request.method,
                request.path,
                response.status_code,
                extra={
                    "method": request.method,
                    "path": request.path,
                    "status": response.status_code,
                    "route": route,
                    "duration_ms": round(seconds * 1000, 1),
                },
            )
            return response
        finally:
            request_id_var.reset(token)


def route_of(request: HttpRequest) -> str:
    """The URL pattern that answered ("api/rounds/<int:pk>/"), not the path: one label per route."""
    probe = getattr(request, "pfs_route", None)
    if probe:
        return probe
    match = getattr(request, "resolver_match", None)
    if match is not None:
        return match.route or match.view_name
    if request.path.startswith("/" + settings.STATIC_URL.lstrip("/")):
        return "static"  # WhiteNoise answered before URL resolution
    return "unmatched"
