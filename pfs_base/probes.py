"""/healthz, /readyz and /metrics, answered before the rest of the middleware.

A load balancer, an orchestrator or Prometheus reaches a web process by its address, over plain
HTTP, without a session: the host check (ALLOWED_HOSTS), the HTTPS redirect, sessions and CSRF have
nothing to say to them. So the probes answer here, second in MIDDLEWARE after the request context
(which gives them an id and times them). Only GET and HEAD; anything else goes on to a 404.

- /healthz: the process is alive and answering. Touches nothing else (a database outage must not
  get every web process restarted).
- /readyz: the process can do its work (pfs_base.health): 200, or 503. A trusted caller (below)
  reads what each check found, as JSON; anyone else only {"status": "ready"} or {"status": "not
  ready"}: no database host, port or driver error for a stranger.
- /metrics: Prometheus's text format (pfs_base.metrics), the task queue's depth included: for a
  trusted caller only; anyone else gets a 403 in the API's error format.

A trusted caller is one whose address (REMOTE_ADDR, or the one X-Forwarded-For names behind
PFS_NUM_PROXIES proxies: the address the API's rate limits count, DRF's get_ident) is in
PFS_PROBE_NETWORKS (loopback by default), or one that sends ``Authorization: Bearer
<PFS_PROBE_TOKEN>`` when that is set. Enforced here, whatever the proxy in front does
(deploy/nginx/pfs.conf also lets only the host itself reach /metrics).
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Callable
from functools import lru_cache

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from rest_framework.throttling import BaseThrottle

from pfs_base import health, metrics
from pfs_base.api_errors import error_body

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@lru_cache(maxsize=8)
def _networks(value: tuple[str, ...]) -> tuple[Network, ...]:
    """PFS_PROBE_NETWORKS's CIDRs ("10.0.0.0/8", "::1"), checked at start-up by pfs_web.settings."""
    return tuple(ipaddress.ip_network(item, strict=False) for item in value)


def client_address(request: HttpRequest) -> str:
    """The client's address as the API's rate limits see it: REMOTE_ADDR, or with PFS_NUM_PROXIES
    proxies in front the entry they appended to X-Forwarded-For (one a client cannot write)."""
    return BaseThrottle().get_ident(request) or ""


def trusted(request: HttpRequest) -> bool:
    """May this request read /metrics and /readyz's checks: the probe token, or an address in
    PFS_PROBE_NETWORKS."""
    token = settings.PFS_PROBE_TOKEN
    offered = request.headers.get("Authorization", "")
    if token and offered.startswith("Bearer "):
        if hmac.compare_digest(offered.removeprefix("Bearer ").strip().encode(), token.encode()):
            return True
    try:
        address = ipaddress.ip_address(client_address(request).strip())
    except ValueError:  # no address, or a forwarded value that is none: not trusted
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped  # ::ffff:127.0.0.1 from a dual-stack socket
    return any(address in network for network in _networks(tuple(settings.PFS_PROBE_NETWORKS)))


def healthz(request: HttpRequest) -> HttpResponse:
    return JsonResponse({"status": "ok"})


def readyz(request: HttpRequest) -> HttpResponse:
    ready, checks = health.readiness()
    body = {"status": "ready" if ready else "not ready"}
    if trusted(request):
        body["checks"] = checks
    response = JsonResponse(body, status=200 if ready else 503)
    # Not an error line per probe while a dependency is down: the answer says what failed (to a
    # trusted caller), and the
    # balancer acts on it. (Django logs every 5xx on django.request unless told it was logged.)
    response._has_been_logged = True
    return response


def metrics_text(request: HttpRequest) -> HttpResponse:
    if not trusted(request):
        return JsonResponse(
            error_body(
                "The metrics are for the operator's hosts (PFS_PROBE_NETWORKS) or PFS_PROBE_TOKEN only.",
                "permission_denied",
            ),
            status=403,
        )
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
