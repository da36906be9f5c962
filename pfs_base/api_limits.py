"""Limits on the REST API: a largest request body (413), request rates (429), and no NUL characters (400).

Rates are counted in fixed windows in Django's cache (Redis when REDIS_URL is set, so every
process shares the counts; process memory otherwise). A window costs one atomic increment per
request, whatever the rate: the upload scope allows thousands a second. With Redis that is one
round trip (a script that counts and sets the expiry): through the cache's own add and incr it
was three, and the largest cost of a read.

- ``UserRateThrottle``: every request of a signed-in user counts against the ``user`` rate, every
  anonymous request (the token endpoint) against ``anon``, per client address. Views with a
  ``throttle_scope`` of their own are counted there instead.
- ``ScopeRateThrottle``: a view's ``throttle_scope`` (``round_start``, ``uploads``), per user or,
  for anonymous requests, per client address.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl

import redis
from django.conf import settings
from django.core.cache import caches
from django.core.cache.backends.redis import RedisCache
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest, HttpResponse, JsonResponse
from rest_framework.settings import api_settings
from rest_framework.throttling import BaseThrottle

from pfs_base.api_errors import error_body, is_api_path
from pfs_base.rates import rate_parse

if TYPE_CHECKING:  # rest_framework.views imports this module for its throttle classes
    from rest_framework.request import Request
    from rest_framework.views import APIView

logger = logging.getLogger("pfs_web.api")


class WindowRateThrottle(BaseThrottle):
    """At most N requests per window for one (scope, user or address)."""

    def __init__(self) -> None:
        self.retry_after: float | None = None

    def scope_for(self, request: Request, view: APIView) -> str | None:
        raise NotImplementedError

    def allow_request(self, request: Request, view: APIView) -> bool:
        scope = self.scope_for(request, view)
        if scope is None:
            return True
        # Read at each request, so that a settings override (tests) takes effect.
        rates = api_settings.DEFAULT_THROTTLE_RATES
        if scope not in rates:
            raise ImproperlyConfigured(f"No rate for the throttle scope {scope!r} in DEFAULT_THROTTLE_RATES")
        user = request.user
        who = f"user-{user.pk}" if user and user.is_authenticated else f"addr-{self.get_ident(request)}"
        self.retry_after = window_wait(scope=scope, who=who, rate=rate_parse(rates[scope]))
        return self.retry_after is None

    def wait(self) -> float | None:
        return self.retry_after


def window_wait(*, scope: str, who: str, rate: tuple[int, int]) -> float | None:
    """The fixed-window decision: None while ``who`` is within ``rate`` (limit, period) for
    ``scope``, else the seconds until the next window."""
    limit, period = rate
    now = time.time()
    window = int(now // period)
    key = f"throttle:{scope}:{who}:{period}:{window}"
    try:
        counted = request_count(key, timeout=period + 1)
    except (redis.RedisError, OSError):
        # A limit is not a privacy rule: without the cache, serve rather than fail every request.
        logger.warning("Rate limit not applied: the cache does not answer", exc_info=True)
        return None
    return None if counted <= limit else (window + 1) * period - now


# INCR, and the window's expiry on its first count: one command, so one round trip.
_INCR_EXPIRE = (
    "local n = redis.call('INCR', KEYS[1]) if n == 1 then redis.call('EXPIRE', KEYS[1], ARGV[1]) end return n"
)


def request_count(key: str, *, timeout: int) -> int:
    """Increment the count under ``key`` (expiring ``timeout`` s after its first count); the new count."""
    cache = caches["default"]
    if not isinstance(cache, RedisCache):
        cache.add(key, 0, timeout=timeout)
        try:
            return cache.incr(key)
        except ValueError:  # the window's key expired between add and incr
            cache.set(key, 1, timeout=timeout)
            return 1
    full_key = cache.make_and_validate_key(key)
    return int(cache._cache.get_client(full_key, write=True).eval(_INCR_EXPIRE, 1, full_key, timeout))


class UserRateThrottle(WindowRateThrottle):
    def scope_for(self, request: Request, view: APIView) -> str | None:
        if getattr(view, "throttle_scope", None):
            return None
        return "user" if request.user and request.user.is_authenticated else "anon"


class ScopeRateThrottle(WindowRateThrottle):
    def scope_for(self, request: Request, view: APIView) -> str | None:
        return getattr(view, "throttle_scope", None)


class ApiBodyLimitMiddleware:
    """A request body over PFS_API_MAX_BODY_BYTES to /api/ is refused with 413, before anything reads it.

    A body sent without Content-Length reads as empty under WSGI, so the header is the whole story.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if is_api_path(request):
            limit = settings.PFS_API_MAX_BODY_BYTES
            try:
                length = int(request.META.get("CONTENT_LENGTH") or 0)
            except ValueError:
                length = 0  # Django reads an unparsable length as no body
            if length > limit:
                detail = f"The request body is {length:,} bytes; the API accepts at most {limit:,}."
                return JsonResponse(error_body(detail, "payload_too_large"), status=413)
        return self.get_response(request)


NUL_MESSAGE = "Must not contain NUL characters."


class ApiNullCharacterMiddleware:
    """A NUL character in an /api/ request's path, query or body is a 400, whatever the endpoint.

    No text this API takes may hold one, and PostgreSQL cannot store or even compare one (a query
    filtering on it fails: a 500). JSON bodies are checked for the escape (a raw NUL is not valid
    JSON); form bodies for their percent-encoding; multipart bodies for the byte itself.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if is_api_path(request):
            fields = _nul_fields(request)
            if fields:
                detail = f"Invalid input: {', '.join(fields)}."
                return JsonResponse(error_body(detail, "invalid", fields), status=400)
        return self.get_response(request)


def _nul_fields(request: HttpRequest) -> dict[str, list[str]]:
    fields: dict[str, list[str]] = {}
    if "\x00" in request.path:
        fields["path"] = [NUL_MESSAGE]
    query = request.META.get("QUERY_STRING", "")
    if "%00" in query or "\x00" in query:
        for name, value in parse_qsl(query, keep_blank_values=True):
            if "\x00" in name or "\x00" in value:
                fields[name.replace("\x00", "") or "query"] = [NUL_MESSAGE]
    if request.method in ("POST", "PUT", "PATCH") and _body_has_nul(request):
        fields["body"] = [NUL_MESSAGE]
    return fields


def _body_has_nul(request: HttpRequest) -> bool:
    content_type = request.META.get("CONTENT_TYPE", "").split(";")[0].strip().lower()
    if content_type == "application/json" or content_type.endswith("+json"):
        marks = (b"\\u0000", b"\x00")
    elif content_type == "application/x-www-form-urlencoded":
        marks = (b"%00", b"\x00")
    elif content_type == "multipart/form-data":
        marks = (b"\x00",)  # no API endpoint takes a file, binary or not
    else:
        return False
    body = request.body  # at most PFS_API_MAX_BODY_BYTES: the size was checked first
    return any(mark in body for mark in marks)
