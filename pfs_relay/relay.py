"""The relay as a WSGI application (pfs_relay.__main__ serves it with gunicorn).

    POST /              message/ohttp-req -> the gateway's answer: 200 message/ohttp-res, or its
                        refusal of a capsule that did not open (RFC 9458 Section 5.2), as it came
    GET  /leader/api/ohttp/keys  the leader's /api/ohttp/keys, as this relay last fetched it
    GET  /leader/hpke_config     the leader's /hpke_config, likewise
    GET  /healthz       {"status": "ok"}

What reaches the gateway of a client's request is its capsule and the capsule's media type, and
nothing else: not the client's address (no X-Forwarded-For, no Forwarded, no Via), not one of its
headers (its User-Agent, cookies, Authorization are dropped; the relay sends its own User-Agent).
What reaches the client of the gateway's answer is its status, its media type and Retry-After: no
cookie or other header the leader could tag a client with. The relay holds no key and opens
nothing: a capsule it alters fails the gateway's AEAD, and an answer it alters fails the client's.

The key copies are how a device checks that the leader serves it the key it serves everyone
(pfs_device.sdk.keys, key consistency): the relay fetches each from the leader with nothing of a
client's, keeps the copy for at most ``key_ttl`` seconds (and no longer than the leader's
max-age), and gives every client the same bytes. A leader that served one device a key of its own,
to recognise that device's uploads, is caught by the device comparing its own copy with this one.

It logs nothing per request (gunicorn's access log is off, pfs_relay.__main__) and nothing of a
client when the gateway fails: a third operator's relay keeps no record that links an address to a
capsule. Limits on its own clients' rates are its front proxy's (docs/deployment.md, "The relay").
"""

from __future__ import annotations

import http.client
import json
import logging
import re
import threading
import time
from dataclasses import dataclass
from http import HTTPStatus
from urllib.parse import urlsplit

logger = logging.getLogger("pfs_relay")

REQUEST_MEDIA_TYPE = "message/ohttp-req"
GATEWAY_PATH = "/api/ohttp/"
KEY_PATHS = {"/leader/api/ohttp/keys": "/api/ohttp/keys", "/leader/hpke_config": "/hpke_config"}
# The leader's hard cap on an upload (aggregation.intake.HARD_LIMIT), with room for the capsule's
# header, Binary HTTP framing and AEAD tag; a larger body is refused before it is read.
MAX_REQUEST_BYTES = 1_048_576 + 4_096
MAX_ANSWER_BYTES = 1_048_576
USER_AGENT = "pfs-relay/1"
_MAX_AGE = re.compile(r"(?:^|[,\s])max-age=(\d+)")


class GatewayUnavailable(Exception):
    """The leader did not answer; ``status`` is what the client gets (502, or 504 on a timeout)."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes
    content_type: str
    headers: tuple[tuple[str, str], ...] = ()


def _json(status: int, detail: str, code: str, *headers: tuple[str, str]) -> Answer:
    body = json.dumps({"detail": detail, "code": code, "fields": {}}).encode()
    return Answer(status, body, "application/json", headers)


class Upstream:
    """The leader, over HTTP(S) connections kept alive, one per thread of the relay."""

    def __init__(self, base_url: str, *, timeout: float) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"the leader must be an http:// or https:// URL, not {base_url!r}")
        if parts.query or parts.fragment:
            raise ValueError(f"the leader's URL takes no query or fragment: {base_url!r}")
        self._https = parts.scheme == "https"
        self._host, self._port, self._authority = parts.hostname, parts.port, parts.netloc
        self._prefix = parts.path.rstrip("/")
        self._timeout = timeout
        self._local = threading.local()

    def _connection(self) -> tuple[http.client.HTTPConnection, bool]:
        connection = getattr(self._local, "connection", None)
        if connection is not None:
            return connection, True
        cls = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
        connection = cls(self._host, self._port, timeout=self._timeout)
        self._local.connection = connection
        return connection, False

    def _drop(self) -> None:
        connection = getattr(self._local, "connection", None)
        if connection is not None:
            connection.close()
        self._local.connection = None

    def call(self, method: str, path: str, *, body: bytes | None = None, content_type: str = "") -> Answer:
        headers = {"Host": self._authority, "User-Agent": USER_AGENT, "Accept-Encoding": "identity"}
        if body is not None:
            headers["Content-Type"] = content_type
        while True:
            connection, reused = self._connection()
            try:
                connection.request(method, self._prefix + path, body=body, headers=headers)
                response = connection.getresponse()
                content = response.read(MAX_ANSWER_BYTES + 1)
                if response.will_close:
                    self._drop()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as error:
                self._drop()
                # A kept-alive connection the leader had closed while it was idle: the request
                # never reached it, so it is sent once more, on a new connection.
                if reused:
                    continue
                raise GatewayUnavailable(f"the leader closed the connection: {error}", HTTPStatus.BAD_GATEWAY) from None
            except TimeoutError:
                self._drop()
                raise GatewayUnavailable("the leader did not answer in time", HTTPStatus.GATEWAY_TIMEOUT) from None
            except (OSError, http.client.HTTPException) as error:
                self._drop()
                raise GatewayUnavailable(f"cannot reach the leader: {error}", HTTPStatus.BAD_GATEWAY) from None
            if len(content) > MAX_ANSWER_BYTES:
                self._drop()
                raise GatewayUnavailable("the leader's answer is too large to relay", HTTPStatus.BAD_GATEWAY)
            passed = tuple(
                (name, response.headers[name]) for name in ("Retry-After", "Cache-Control") if response.headers[name]
            )
            return Answer(response.status, content, response.headers.get("Content-Type", ""), passed)


class KeyCopies:
    """The copies of the leader's key configurations every client of this relay gets."""

    def __init__(self, upstream: Upstream, *, ttl: float) -> None:
        self._upstream = upstream
        self._ttl = ttl
        self._copies: dict[str, tuple[float, Answer]] = {}
        self._lock = threading.Lock()

    def get(self, path: str) -> Answer:
        # One fetch at a time: clients that ask while it runs get the copy it brings.
        with self._lock:
            now = time.monotonic()
            kept = self._copies.get(path)
            if kept is not None and kept[0] > now:
                return kept[1]
            fetched = self._upstream.call("GET", path)
            if fetched.status != HTTPStatus.OK:
                return Answer(fetched.status, fetched.body, fetched.content_type)
            life = self._ttl
            max_age = _MAX_AGE.search(dict(fetched.headers).get("Cache-Control", ""))
            if max_age:
                life = min(life, float(max_age.group(1)))
            copy = Answer(fetched.status, fetched.body, fetched.content_type, (("Cache-Control", "no-cache"),))
            self._copies[path] = (now + life, copy)
            return copy


class Relay:
    """The WSGI application: forwards capsules to the leader's gateway, serves the key copies."""

    def __init__(self, leader: str, *, timeout: float = 30.0, key_ttl: float = 300.0) -> None:
        if not timeout > 0 or not key_ttl >= 0:
            raise ValueError("the timeout must be positive and the key copies' life 0 or more")
        self.leader = leader.rstrip("/")
        self._upstream = Upstream(self.leader, timeout=timeout)
        self._keys = KeyCopies(self._upstream, ttl=key_ttl)

    def __call__(self, environ, start_response):
        answer = self.answer(environ)
        headers = [("Content-Type", answer.content_type), ("Content-Length", str(len(answer.body)))]
        headers += list(answer.headers)
        if not any(name == "Cache-Control" for name, _ in answer.headers):
            headers.append(("Cache-Control", "no-store"))
        start_response(f"{answer.status} {HTTPStatus(answer.status).phrase}", headers)
        return [answer.body]

    def answer(self, environ) -> Answer:
        method, path = environ.get("REQUEST_METHOD", ""), environ.get("PATH_INFO") or "/"
        if path == "/healthz":
            return Answer(HTTPStatus.OK, b'{"status": "ok"}', "application/json")
        if path == "/":
            if method != "POST":
                return _json(
                    HTTPStatus.METHOD_NOT_ALLOWED, "POST a capsule here.", "method_not_allowed", ("Allow", "POST")
                )
            return self._forward(environ)
        if path in KEY_PATHS:
            if method not in ("GET", "HEAD"):
                return _json(HTTPStatus.METHOD_NOT_ALLOWED, "GET only.", "method_not_allowed", ("Allow", "GET"))
            try:
                return self._keys.get(KEY_PATHS[path])
            except GatewayUnavailable as error:
                logger.warning("the leader's %s could not be fetched: %s", KEY_PATHS[path], error)
                return _json(error.status, str(error), "gateway_unavailable")
        return _json(HTTPStatus.NOT_FOUND, "No such endpoint on the relay.", "not_found")

    def _forward(self, environ) -> Answer:
        media_type = environ.get("CONTENT_TYPE", "").split(";")[0].strip().lower()
        if media_type != REQUEST_MEDIA_TYPE:
            detail = f"The body must be {REQUEST_MEDIA_TYPE}, not {media_type or 'untyped'}."
            return _json(HTTPStatus.UNSUPPORTED_MEDIA_TYPE, detail, "unsupported_media_type")
        declared = environ.get("CONTENT_LENGTH") or ""
        if not declared.isdigit():
            return _json(HTTPStatus.LENGTH_REQUIRED, "The capsule's Content-Length is required.", "length_required")
        if int(declared) > MAX_REQUEST_BYTES:
            detail = f"A capsule is at most {MAX_REQUEST_BYTES} bytes."
            return _json(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, detail, "payload_too_large")
        body = environ["wsgi.input"].read(int(declared))
        if len(body) != int(declared):
            return _json(HTTPStatus.BAD_REQUEST, "The capsule is shorter than its Content-Length.", "invalid")
        try:
            answer = self._upstream.call("POST", GATEWAY_PATH, body=body, content_type=REQUEST_MEDIA_TYPE)
        except GatewayUnavailable as error:
            logger.warning("a capsule could not be forwarded: %s", error)  # nothing of the client
            return _json(
                error.status, "The gateway did not answer; seal the request again and resend it.", "gateway_unavailable"
            )
        retry_after = tuple((name, value) for name, value in answer.headers if name == "Retry-After")
        return Answer(answer.status, answer.body, answer.content_type, retry_after)
