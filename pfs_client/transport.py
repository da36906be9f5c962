"""HTTP with retries over one httpx session: which failures are retried depends on whether a retry is safe.

A GET, or a POST carrying an Idempotency-Key, is retried after a connection error, a timeout, a
502/503/504 or a 429: the server answers a repeated key with the first answer, so a retry never
does the work twice. Any other POST is retried only when it certainly did nothing: a 429 (throttled
before it ran) or a connection that was never made (refused, or timed out connecting).

Every request goes through one ``httpx.Client``: its connections are kept and reused (a wait polls
over one connection) until ``close()``.
"""

from __future__ import annotations

import email.utils
import json
import socket
import time
import urllib.parse
from enum import Enum
from typing import Any

import httpx

from pfs_client.errors import ApiError, TransportError

TRANSIENT_STATUSES = frozenset({502, 503, 504})
USER_AGENT = f"pfs-client python-httpx/{httpx.__version__}"


class Retry(Enum):
    SAFE = "safe"  # repeating the request cannot do its work twice
    UNSENT = "unsent"  # retry only what certainly did not reach the application


class Transport:
    def __init__(
        self,
        base_url: str,
        *,
        timeout: float,
        retries: int,
        backoff: float,
        max_retry_after: float,
    ) -> None:
        parts = urllib.parse.urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"the server URL must be http(s)://host[:port], not {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self.retries = retries
        self.backoff = backoff
        self.max_retry_after = max_retry_after
        self.session = httpx.Client(
            timeout=httpx.Timeout(timeout),
            headers={"Accept": "application/json", "User-Agent": USER_AGENT},
            follow_redirects=False,
        )

    @property
    def headers(self) -> httpx.Headers:
        """Sent with every request (the Authorization header once signed in)."""
        return self.session.headers

    def close(self) -> None:
        """Close the session's connections; a closed transport sends nothing more."""
        self.session.close()

    @property
    def closed(self) -> bool:
        return self.session.is_closed

    def url(self, path: str, params: dict[str, Any] | None = None) -> str:
        """The URL of an API path, or of a link the server returned (a page's ``next``).

        A link's host is replaced by ours: behind a proxy the server may name itself otherwise."""
        if path.startswith(("http://", "https://")):
            parts = urllib.parse.urlsplit(path)
            base = urllib.parse.urlsplit(self.base_url)
            url = urllib.parse.urlunsplit((base.scheme, base.netloc, parts.path, parts.query, ""))
        else:
            url = self.base_url + path
        query = {k: v for k, v in (params or {}).items() if v is not None}
        if query:
            url += ("&" if "?" in url else "?") + urllib.parse.urlencode(query)
        return url

    def request(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, Any] | None = None,
        body: Any = None,
        headers: dict[str, str] | None = None,
        retry: Retry = Retry.SAFE,
    ) -> httpx.Response:
        """Send, retrying as ``retry`` allows; a 2xx is returned, anything else raises."""
        if self.closed:
            raise TransportError("the client is closed: make a new Client")
        url = self.url(path, params)
        extra = dict(headers or {})
        content = None
        if body is not None:
            content = json.dumps(body).encode("utf-8")
            extra["Content-Type"] = "application/json"
        attempt = 0
        while True:
            try:
                response = self.session.request(method, url, content=content, headers=extra)
            except httpx.TransportError as error:
                delay = self._delay_after_failure(error, retry, attempt)
                if delay is None:
                    raise TransportError(f"{method} {url}: {_reason(error)}") from error
            else:
                if response.is_success:
                    return response
                delay = self._delay_after_status(response, retry, attempt)
                if delay is None:
                    raise ApiError.from_response(response.status_code, response.content, response.reason_phrase)
            attempt += 1
            self._pause(delay)

    def _pause(self, seconds: float) -> None:
        time.sleep(seconds)

    def _delay_after_status(self, response: httpx.Response, retry: Retry, attempt: int) -> float | None:
        if attempt >= self.retries:
            return None
        throttled = response.status_code == 429
        if not throttled and not (retry is Retry.SAFE and response.status_code in TRANSIENT_STATUSES):
            return None
        retry_after = _retry_after(response.headers.get("Retry-After"))
        if retry_after is None:
            return self.backoff * 2**attempt
        if retry_after > self.max_retry_after:
            return None  # the server asks for longer than we were told to wait: say so now
        return retry_after

    def _delay_after_failure(self, error: httpx.TransportError, retry: Retry, attempt: int) -> float | None:
        if attempt >= self.retries:
            return None
        if isinstance(_cause(error), socket.gaierror):
            return None  # an unknown host stays unknown
        # No connection was made: the request never left.
        never_sent = isinstance(error, httpx.ConnectError | httpx.ConnectTimeout | httpx.PoolTimeout)
        if retry is Retry.SAFE or never_sent:
            return self.backoff * 2**attempt
        return None


def _cause(error: BaseException) -> BaseException:
    """The OS error under httpx's and httpcore's wrappers, if any; else the error itself."""
    seen = error
    while seen.__cause__ is not None or seen.__context__ is not None:
        seen = seen.__cause__ or seen.__context__  # type: ignore[assignment]
        if isinstance(seen, OSError):
            return seen
    return error


def _retry_after(value: str | None) -> float | None:
    """Retry-After as seconds: a number, or an HTTP date."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _reason(error: httpx.TransportError) -> str:
    cause = _cause(error)
    if isinstance(cause, OSError) and cause.strerror:
        return cause.strerror
    return str(error) or type(error).__name__
