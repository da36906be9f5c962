"""HTTP with retries over urllib: which failures are retried depends on whether a retry is safe.

A GET, or a POST carrying an Idempotency-Key, is retried after a connection error, a timeout, a
502/503/504 or a 429: the server answers a repeated key with the first answer, so a retry never
does the work twice. Any other POST is retried only when it certainly did nothing: a 429 (throttled
before it ran) or a refused connection (never sent).
"""

from __future__ import annotations

import email.utils
import http.client
import json
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from email.message import Message
from enum import Enum
from typing import Any

from pfs_client.errors import ApiError, TransportError

TRANSIENT_STATUSES = frozenset({502, 503, 504})
USER_AGENT = "pfs-client/0.1"


class Retry(Enum):
    SAFE = "safe"  # repeating the request cannot do its work twice
    UNSENT = "unsent"  # retry only what certainly did not reach the application


@dataclass(frozen=True)
class Response:
    status: int
    headers: Message
    body: bytes

    @property
    def content_type(self) -> str:
        return self.headers.get_content_type() if self.headers else ""

    def json(self) -> Any:
        return json.loads(self.body.decode("utf-8")) if self.body else None

    def text(self) -> str:
        return self.body.decode(self.headers.get_content_charset() or "utf-8")


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
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.max_retry_after = max_retry_after
        self.headers: dict[str, str] = {}

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
    ) -> Response:
        """Send, retrying as ``retry`` allows; a 2xx is returned, anything else raises."""
        url = self.url(path, params)
        data = json.dumps(body).encode("utf-8") if body is not None else None
        all_headers = {"Accept": "application/json", "User-Agent": USER_AGENT, **self.headers, **(headers or {})}
        if data is not None:
            all_headers["Content-Type"] = "application/json"
        attempt = 0
        while True:
            # The scheme was checked to be http(s) in __init__, and links keep it.
            request = urllib.request.Request(url, data=data, method=method, headers=all_headers)  # noqa: S310
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as answer:  # noqa: S310
                    return Response(answer.status, answer.headers, answer.read())
            except urllib.error.HTTPError as error:
                response = Response(error.code, error.headers, _read(error))
                delay = self._delay_after_status(response, retry, attempt)
                if delay is None:
                    raise ApiError.from_response(response.status, response.body, error.reason) from None
            except (urllib.error.URLError, http.client.HTTPException, OSError) as error:
                delay = self._delay_after_failure(error, retry, attempt)
                if delay is None:
                    raise TransportError(f"{method} {url}: {_reason(error)}") from error
            attempt += 1
            self._pause(delay)

    def _pause(self, seconds: float) -> None:
        time.sleep(seconds)

    def _delay_after_status(self, response: Response, retry: Retry, attempt: int) -> float | None:
        if attempt >= self.retries:
            return None
        throttled = response.status == 429
        if not throttled and not (retry is Retry.SAFE and response.status in TRANSIENT_STATUSES):
            return None
        retry_after = _retry_after(response.headers)
        if retry_after is None:
            return self.backoff * 2**attempt
        if retry_after > self.max_retry_after:
            return None  # the server asks for longer than we were told to wait: say so now
        return retry_after

    def _delay_after_failure(self, error: BaseException, retry: Retry, attempt: int) -> float | None:
        if attempt >= self.retries:
            return None
        reason = error.reason if isinstance(error, urllib.error.URLError) else error
        if isinstance(reason, socket.gaierror):
            return None  # an unknown host stays unknown
        never_sent = isinstance(reason, ConnectionRefusedError)
        if retry is Retry.SAFE or never_sent:
            return self.backoff * 2**attempt
        return None


def _read(error: urllib.error.HTTPError) -> bytes:
    try:
        return error.read()
    except (OSError, http.client.HTTPException):
        return b""


def _retry_after(headers: Message | None) -> float | None:
    """Retry-After as seconds: a number, or an HTTP date."""
    value = headers.get("Retry-After") if headers else None
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


def _reason(error: BaseException) -> str:
    reason = error.reason if isinstance(error, urllib.error.URLError) else error
    if isinstance(reason, OSError) and reason.strerror:
        return reason.strerror
    return str(reason) or type(reason).__name__
