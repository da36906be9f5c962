"""One error format for every API answer that is not a success (docs/api.md, "Errors").

    {"detail": "<one sentence for a person>", "code": "<for a program>", "fields": {"<key>": ["message", ...]}}

``fields`` is always there: the offending fields or recipe keys (dotted JSON paths) with their
messages, or ``{}``. DRF calls ``api_exception_handler`` for every exception a view raises; the
middleware and the 404/500 handlers in pfs_web.urls give the same shape to what never reaches a
view (an unknown /api/ path, a body over the limit, a crash outside DRF).
"""

from __future__ import annotations

import logging
import math
from typing import Any

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import SuspiciousOperation
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from rest_framework import exceptions, status
from rest_framework.response import Response

from pfs_base.errors import Conflict, NotAllowed, Unavailable, ValidationFailed

logger = logging.getLogger("pfs_web.api")

NON_FIELD_ERRORS = "non_field_errors"


class ConflictError(exceptions.APIException):
    """The action does not fit the object's current state (cancelling a finished round)."""

    status_code = status.HTTP_409_CONFLICT
    default_detail = "The action conflicts with the object's current state."
    default_code = "conflict"


class IdempotencyConflict(exceptions.APIException):
    """An Idempotency-Key sent again with another request than the one it was first used for."""

    status_code = status.HTTP_422_UNPROCESSABLE_ENTITY
    default_detail = "This Idempotency-Key was already used with another request."
    default_code = "idempotency_conflict"


def error_body(detail: str, code: str, fields: dict[str, list[str]] | None = None) -> dict[str, Any]:
    return {"detail": detail, "code": code, "fields": fields or {}}


def api_exception_handler(exc: Exception, context: dict[str, Any]) -> Response:
    """REST_FRAMEWORK["EXCEPTION_HANDLER"]: every exception a view raises, in the one format."""
    # Not at the top: rest_framework.views imports pfs_base.api_limits, which imports this module.
    from rest_framework.views import set_rollback

    exc = _as_api_exception(exc)
    if exc is None:
        request = context.get("request")
        path = getattr(request, "path", "?")
        method = getattr(request, "method", "?")
        logger.error("Unhandled exception in the API: %s %s", method, path, exc_info=True)
        set_rollback()
        return Response(server_error_body(), status=status.HTTP_500_INTERNAL_SERVER_ERROR)

    headers = {}
    if isinstance(exc, exceptions.Throttled) and exc.wait is not None:
        headers["Retry-After"] = str(max(1, math.ceil(exc.wait)))  # never too early
    authenticate_header = getattr(exc, "auth_header", None)
    if authenticate_header:
        headers["WWW-Authenticate"] = authenticate_header
    set_rollback()
    return Response(_body(exc), status=exc.status_code, headers=headers)


def server_error_body() -> dict[str, Any]:
    return error_body("The server failed to answer this request; the error has been logged.", "server_error")


def _as_api_exception(exc: Exception) -> exceptions.APIException | None:
    """The DRF exception that stands for ``exc``; None for an unexpected error (a 500)."""
    if isinstance(exc, exceptions.APIException):
        return exc
    if isinstance(exc, Http404):
        return exceptions.NotFound()
    if isinstance(exc, DjangoPermissionDenied):
        return exceptions.PermissionDenied()
    if isinstance(exc, SuspiciousOperation):
        # A request Django refuses to read (too many parameters, say): the client's fault, not ours.
        return exceptions.ParseError(str(exc))
    # The services' own errors, for a view that lets them through.
    if isinstance(exc, ValidationFailed):
        return exceptions.ValidationError(exc.errors)
    if isinstance(exc, Conflict):
        return ConflictError(str(exc))
    if isinstance(exc, NotAllowed):
        return exceptions.PermissionDenied(str(exc))
    if isinstance(exc, Unavailable):
        unavailable = exceptions.APIException(str(exc), "unavailable")
        unavailable.status_code = 503
        return unavailable
    return None


def _body(exc: exceptions.APIException) -> dict[str, Any]:
    if isinstance(exc, exceptions.ValidationError):
        fields = _flatten(exc.detail)
        return error_body(_invalid_detail(fields), "invalid", fields)
    code = exc.get_codes()
    detail = exc.detail
    if isinstance(detail, (list, dict)):
        # Another exception raised with a list or a dict of messages: keep them as fields.
        fields = _flatten(detail)
        return error_body(_invalid_detail(fields), exc.default_code, fields)
    return error_body(str(detail), code if isinstance(code, str) else exc.default_code)


def _invalid_detail(fields: dict[str, list[str]]) -> str:
    named = [key for key in fields if key != NON_FIELD_ERRORS]
    if named:
        return f"Invalid input: {', '.join(named)}."
    messages = fields.get(NON_FIELD_ERRORS) or ["The request is invalid."]
    return " ".join(messages)


def _flatten(detail: Any, prefix: str = "") -> dict[str, list[str]]:
    """Messages by field: nested dicts join their keys with dots, as recipe keys are written."""
    if isinstance(detail, dict):
        fields: dict[str, list[str]] = {}
        for key, value in detail.items():
            name = f"{prefix}.{key}" if prefix else str(key)
            for inner, messages in _flatten(value, name).items():
                fields.setdefault(inner, []).extend(messages)
        return fields
    if isinstance(detail, list):
        if any(isinstance(item, (dict, list)) for item in detail):
            fields = {}
            for index, item in enumerate(detail):
                if not item:
                    continue  # a list serializer's valid item
                name = f"{prefix}.{index}" if prefix else str(index)
                for inner, messages in _flatten(item, name).items():
                    fields.setdefault(inner, []).extend(messages)
            return fields
        return {prefix or NON_FIELD_ERRORS: [str(item) for item in detail]}
    return {prefix or NON_FIELD_ERRORS: [str(detail)]}


def is_api_path(request: HttpRequest) -> bool:
    return request.path.startswith("/api/")


def json_not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """handler404: the error format for an unknown /api/ path, Django's page elsewhere."""
    if is_api_path(request):
        return JsonResponse(error_body("No such API endpoint.", "not_found"), status=404)
    from django.views.defaults import page_not_found

    return page_not_found(request, exception)


def json_server_error(request: HttpRequest) -> HttpResponse:
    """handler500: the error format for a crash outside DRF under /api/, Django's page elsewhere."""
    if is_api_path(request):
        return JsonResponse(server_error_body(), status=500)
    from django.views.defaults import server_error

    return server_error(request)
