"""The leader's Oblivious Gateway over HTTP (RFC 9458; aggregation.gateway does the work).

    GET  /api/ohttp/keys    application/ohttp-keys: the gateway's current key configuration
    POST /api/ohttp/        message/ohttp-req -> 200 message/ohttp-res (the upload's answer, sealed)

Anonymous, as the upload it carries. A capsule that does not open is answered in the clear
(RFC 9458 Section 5.2): 400 ``application/problem+json`` of type ``ohttp-key`` for a key id or
suite the gateway does not hold, 400 ``ohttp_invalid`` for one that is truncated or altered, 415
for another content type. Everything after the capsule opens, refusals included, is sealed in a
200.
"""

from __future__ import annotations

import json

from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from aggregation.gateway import Refusal, gateway_answer, gateway_key_configs
from pfs_base.api_errors import error_body
from pfs_device import ohttp

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


@csrf_exempt  # anonymous and cookieless: no session for a forged request to ride on
@require_POST
def ohttp_gateway(request: HttpRequest) -> HttpResponse:
    if request.content_type != ohttp.REQUEST_MEDIA_TYPE:
        detail = f"The body must be {ohttp.REQUEST_MEDIA_TYPE}, not {request.content_type or 'untyped'}."
        return _refusal(Refusal(415, error_body(detail, "unsupported_media_type")))
    answer = gateway_answer(request.META, request.body)
    if isinstance(answer, Refusal):
        return _refusal(answer)
    # RFC 9458 Section 5: only what carries the capsule, and never cached
    return HttpResponse(answer, content_type=ohttp.RESPONSE_MEDIA_TYPE, headers={"Cache-Control": "private, no-store"})


def _refusal(refusal: Refusal) -> HttpResponse:
    return HttpResponse(json.dumps(refusal.body), status=refusal.status, content_type=refusal.content_type)
