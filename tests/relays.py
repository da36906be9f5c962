"""Relays for the tests: the real one in a process of its own (`python -m pfs_relay`), and a recording
forwarder to put before or after it (the devices' own network, a tap on the relay's way to the leader).
"""

from __future__ import annotations

import http.client
import sys
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from socketserver import ThreadingMixIn
from urllib.parse import urlsplit
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from pfs_relay.relay import Relay
from tests import services

# Headers a hop drops (RFC 9110 Section 7.6.1), and the framing the forwarder sets itself.
HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "te", "content-length"}


def relay_in_thread(leader: str, **options) -> tuple[str, object]:
    """The relay's own WSGI application (pfs_relay.relay.Relay) served in a thread: its URL, and
    the function that stops it."""
    server = make_server(
        "127.0.0.1", 0, Relay(leader, **options), server_class=_ThreadingWSGIServer, handler_class=_Quiet
    )
    threading.Thread(target=server.serve_forever, daemon=True).start()

    def stop() -> None:
        server.shutdown()
        server.server_close()

    return f"http://127.0.0.1:{server.server_address[1]}", stop


class _ThreadingWSGIServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _Quiet(WSGIRequestHandler):
    def log_message(self, *args) -> None:
        pass


def start_relay(leader: str, folder: Path, *, key_ttl: float = 300) -> tuple[services.Background, str]:
    """`python -m pfs_relay` forwarding to ``leader``, as `make relay` runs it; its URL."""
    port = services.free_port()
    relay = services.Background(
        f"exec {sys.executable} -m pfs_relay --leader {leader} --bind 127.0.0.1:{port} --workers 1 --key-ttl {key_ttl}",
        cwd=services.ROOT,
        env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},  # nothing of the test's settings: it needs none
        log_path=folder / f"relay-{port}.log",
    )
    url = f"http://127.0.0.1:{port}"
    relay.wait_for(lambda: services.http_status(f"{url}/healthz") == 200, timeout=60, what="/healthz")
    return relay, url


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Forwarder:
    """An HTTP hop in a thread that records every request and forwards it.

    ``target`` None: a forward proxy (the client's http_proxy; requests name their absolute URL),
    as the devices' own network. Else a reverse proxy to ``target``. ``add``: headers it adds, as a
    carrier's proxy adds X-Forwarded-For. ``alter``: a function of (path, body) -> list of bodies to
    send in its place (tamper, replay), the answer of the last one returned; ``alter_answer``: of
    (path, content) -> the content returned instead. ``replace``: path -> (status, media type, body)
    answered without forwarding (a key of its own).
    """

    target: str | None = None
    add: dict[str, str] = field(default_factory=dict)
    alter: object = None
    alter_answer: object = None
    replace: dict[str, tuple[int, str, bytes]] = field(default_factory=dict)
    seen: list[Seen] = field(default_factory=list)

    def __post_init__(self) -> None:
        forwarder = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:  # quiet
                pass

            def _any(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                headers = {name: value for name, value in self.headers.items()}
                forwarder.seen.append(Seen(self.command, self.path, headers, body))
                status, answer_headers, content = forwarder.forward(self.command, self.path, headers, body)
                self.send_response(status)
                for name, value in answer_headers:
                    if name.lower() not in HOP_BY_HOP:
                        self.send_header(name, value)
                self.send_header("Content-Length", str(len(content)))
                self.end_headers()
                self.wfile.write(content)

            do_GET = do_POST = do_PUT = do_HEAD = _any

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def forward(self, method: str, path: str, headers: dict[str, str], body: bytes):
        url = urlsplit(path if self.target is None else self.target + path)
        if url.path in self.replace:
            status, media_type, content = self.replace[url.path]
            return status, [("Content-Type", media_type)], content
        sent = {name: value for name, value in headers.items() if name.lower() not in HOP_BY_HOP | {"host"}}
        sent.update(self.add)
        bodies = self.alter(url.path, body) if self.alter and method == "POST" else [body]
        for each in bodies:
            connection = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
            try:
                target = url.path + (f"?{url.query}" if url.query else "")
                connection.request(method, target, body=each if method != "GET" else None, headers=sent)
                response = connection.getresponse()
                answer = response.status, response.getheaders(), response.read()
            finally:
                connection.close()
        if self.alter_answer is not None:
            answer = answer[0], answer[1], self.alter_answer(url.path, answer[2])
        return answer

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
