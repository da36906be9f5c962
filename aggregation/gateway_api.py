"""The leader's Oblivious Gateway over HTTP (RFC 9458; aggregation.gateway does the work).

    GET  /api/ohttp/keys    application/ohttp-keys: the gateway's current key configuration
    POST /api/ohttp/        message/ohttp-req -> 200 message/ohttp-res (the upload's answer, sealed)

Anonymous, as the upload it carries. A capsule that does not open is answered in the clear
(RFC 9458 Section 5.2): 400 ``application/problem+json`` of type ``ohttp-key`` for a key id or
suite the gateway does not hold, 400 ``ohttp_invalid`` for one that is truncated or altered, 415
for another content type, 413 for one over the upload's hard cap and framing. Everything after the
capsule opens, refusals included, is sealed in a 200. pfs_web.wsgi serves the POST before Django's
middleware (gateway_application), as it does the direct upload.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from django.db import close_old_connections
from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from aggregation.gateway import Refusal, gateway_answer, gateway_key_configs
from aggregation.intake import HARD_LIMIT
from pfs_base.api_errors import error_body, server_error_body
from pfs_device import ohttp

logger = logging.getLogger("pfs_web.api")

GATEWAY_PATH = "/api/ohttp/"
# The upload's hard cap, and room for the capsule's header, Binary HTTP framing and AEAD tag.
MAX_CAPSULE_BYTES = HARD_LIMIT + 4_096

# A client may keep the configuration this long; a retired leader key keeps opening capsules
# sealed to its gateway key for as long as the leader keeps it.
CACHE_SECONDS = 3600


@require_GET
def ohttp_keys(request: HttpRequest) -> HttpResponse:
    return HttpResponse(
        gateway_key_configs(),
        content_type=ohttp.KEYS_MEDIA_TYPE,
        headers={"Cache-Control": f"max-age={CACHE_SECONDS}"},
    )


@dataclass(frozen=True)
class Answer:
    status: int
    content_type: str
    body: bytes
    headers: tuple[tuple[str, str], ...] = ()


def gateway_exchange(meta: Mapping[str, Any], read: Callable[[int], bytes]) -> Answer:
    """The answer to one POST to the gateway, whoever serves it: ``meta`` the request's WSGI
    environ (or Django's META), ``read(size)`` its body, read only once its type and size allow it."""
    content_type = (meta.get("CONTENT_TYPE") or "").split(";")[0].strip().lower()
    if content_type != ohttp.REQUEST_MEDIA_TYPE:
        detail = f"The body must be {ohttp.REQUEST_MEDIA_TYPE}, not {content_type or 'untyped'}."
        return _refusal(Refusal(415, error_body(detail, "unsupported_media_type")))
    declared = str(meta.get("CONTENT_LENGTH") or "0")
    if not declared.isdigit() or int(declared) > MAX_CAPSULE_BYTES:
        return _refusal(
            Refusal(413, error_body(f"A capsule is at most {MAX_CAPSULE_BYTES} bytes.", "payload_too_large"))
        )
    answer = gateway_answer(meta, read(int(declared)))
    if isinstance(answer, Refusal):
        return _refusal(answer)
    # RFC 9458 Section 5: only what carries the capsule, and never cached
    return Answer(200, ohttp.RESPONSE_MEDIA_TYPE, answer, (("Cache-Control", "private, no-store"),))


@csrf_exempt  # anonymous and cookieless: no session for a forged request to ride on
@require_POST
def ohttp_gateway(request: HttpRequest) -> HttpResponse:
    """Where Django serves the gateway itself (the test client, the live server); pfs_web.wsgi sends
    POST /api/ohttp/ to gateway_application instead, before Django's middleware."""
    answer = gateway_exchange(request.META, lambda _size: request.body)
    return HttpResponse(
        answer.body, status=answer.status, content_type=answer.content_type, headers=dict(answer.headers)
    )


def gateway_application(environ: dict[str, Any], start_response: Callable) -> Iterable[bytes]:
    """A WSGI application for POST /api/ohttp/ alone, as aggregation.intake's for the direct upload:
    anonymous, cookieless and without CSRF, so Django's middleware has nothing to do for it."""
    close_old_connections()
    try:
        answer = gateway_exchange(environ, environ["wsgi.input"].read)
    except Exception:
        logger.exception("Unhandled exception in the gateway")
        answer = _refusal(Refusal(500, server_error_body()))
    finally:
        close_old_connections()
    headers = [
        ("Content-Type", answer.content_type),
        ("Content-Length", str(len(answer.body))),
        ("X-Content-Type-Options", "nosniff"),
        *answer.headers,
    ]
    status = HTTPStatus(answer.status)
    start_response(f"{status.value} {status.phrase}", headers)
    return [answer.body]


def _refusal(refusal: Refusal) -> Answer:
    return Answer(refusal.status, refusal.content_type, json.dumps(refusal.body).encode())
