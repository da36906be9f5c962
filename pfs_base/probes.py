"""/healthz, /readyz and /metrics, answered before the rest of the middleware.

A load balancer, an orchestrator or Prometheus reaches a web process by its address, over plain
HTTP, without a session: the host check (ALLOWED_HOSTS), the HTTPS redirect, sessions and CSRF have
nothing to say to them. So the probes answer here, second in MIDDLEWARE after the request context
(which gives them an id and times them). Only GET and HEAD; anything else goes on to a 404.

- /healthz: the process is alive and answering. Touches nothing else (a database outage must not
  get every web process restarted).
- /readyz: the process can do its work (pfs_base.health): 200, or 503 with what failed, as JSON.
- /metrics: Prometheus's text format (pfs_base.metrics), the task queue's depth included. Keep it
  off the public internet (deploy/nginx/pfs.conf allows only the host itself).
"""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse

from pfs_base import health, metrics


def healthz(request: HttpRequest) -> HttpResponse:
    return JsonResponse({"status": "ok"})


def readyz(request: HttpRequest) -> HttpResponse:
    ready, checks = health.readiness()
    response = JsonResponse(
        {"status": "ready" if ready else "not ready", "checks": checks}, status=200 if ready else 503
    )
    # Not an error line per probe while a dependency is down: the answer says what failed, and the
    # balancer acts on it. (Django logs every 5xx on django.request unless told it was logged.)
    response._has_been_logged = True
    return response


def metrics_text(request: HttpRequest) -> HttpResponse:
    body, content_type = metrics.exposition(
        metrics.queue_depth_collector(health.queue_depth, settings.CELERY_TASK_DEFAULT_QUEUE)
    )
    return HttpResponse(body, content_type=content_type)


PROBES: dict[str, Callable[[HttpRequest], HttpResponse]] = {
    "/healthz": healthz,
    "/readyz": readyz,
    "/metrics": metrics_text,
}


class ProbeMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        probe = PROBES.get(request.path_info)
        if probe is None or request.method not in ("GET", "HEAD"):
            return self.get_response(request)
        request.pfs_route = request.path_info.lstrip("/")  # the metrics' route label
        response = probe(request)
        response["Cache-Control"] = "no-store"
        return response
