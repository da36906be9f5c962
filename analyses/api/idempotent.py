"""The API side of idempotency keys: read the header, run the view's work once, answer or replay."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rest_framework.request import Request
from rest_framework.response import Response

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
            respond=lambda: Answer(*respond()),
        )
    except KeyReused as reused:
        raise IdempotencyConflict(str(reused)) from reused
    headers = dict(answer.headers)
    if answer.replayed:
        headers[REPLAYED_HEADER] = "true"
    return Response(answer.body, status=answer.status, headers=headers)


def _payload(request: Request) -> Any:
    data = request.data
    # A form body is a QueryDict: every value as the list it may be, so that repeats hash alike.
    return {key: data.getlist(key) for key in data} if hasattr(data, "getlist") else data
