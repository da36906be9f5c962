"""The API side of idempotency keys: read the header, run the view's work once, answer or replay."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.utils.encoders import JSONEncoder

from analyses.rules.idempotency import HEADER, Answer, KeyReused, idempotent_answer
from pfs_base.api_errors import IdempotencyConflict

REPLAYED_HEADER = "Idempotent-Replayed"


def idempotent_response(
    request: Request, *, endpoint: str, respond: Callable[[], tuple[int, Any, dict[str, str]]]
) -> Response:
    """``respond()`` → (status, body, headers), run at most once per Idempotency-Key of the user."""
    try:
        answer = idempotent_answer(
            user=request.user,
            key=request.headers.get(HEADER),
            endpoint=endpoint,
            payload=_payload(request),
            respond=lambda: _as_json(*respond()),
        )
    except KeyReused as reused:
        raise IdempotencyConflict(str(reused)) from reused
    headers = dict(answer.headers)
    if answer.replayed:
        headers[REPLAYED_HEADER] = "true"
    return Response(answer.body, status=answer.status, headers=headers)


def _as_json(status: int, body: Any, headers: dict[str, str]) -> Answer:
    """The answer with its body as the JSON it is sent as (datetimes as DRF writes them), so that it
    can be stored for replay, and a replay answers byte for byte what the first answer did."""
    return Answer(status, json.loads(json.dumps(body, cls=JSONEncoder)), headers)


def _payload(request: Request) -> Any:
    data = request.data
    # A form body is a QueryDict: every value as the list it may be, so that repeats hash alike.
    return {key: data.getlist(key) for key in data} if hasattr(data, "getlist") else data
