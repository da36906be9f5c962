"""The relay (pfs_relay) against a stand-in leader: what it forwards, what it strips, what it refuses.

The relay is a WSGI application; each test calls it as gunicorn would, with a client's environ
(its address, its headers), and the stand-in leader records every request that reaches it.
"""

from __future__ import annotations

import io
import json
import logging
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from pfs_relay import __main__ as relay_cli
from pfs_relay.relay import MAX_REQUEST_BYTES, Relay

CAPSULE = bytes(range(256)) * 3
CLIENT = "203.0.113.9"  # TEST-NET-3: the client's address, which nothing may pass on
CLIENT_HEADERS = {
    "HTTP_X_FORWARDED_FOR": CLIENT,
    "HTTP_FORWARDED": f"for={CLIENT}",
    "HTTP_X_REAL_IP": CLIENT,
    "HTTP_USER_AGENT": "phone-model-7 build 123",
    "HTTP_COOKIE": "session=abc",
    "HTTP_AUTHORIZATION": "Device d-1:secret",
    "HTTP_VIA": "1.1 carrier",
}


class Leader:
    """A stand-in leader: answers from ``answers`` by path, records what reached it."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, dict[str, str], bytes]] = []
        self.answers: dict[str, tuple[int, dict[str, str], bytes]] = {
            "/api/ohttp/": (200, {"Content-Type": "message/ohttp-res", "Set-Cookie": "tag=device-1"}, b"sealed"),
            "/api/ohttp/keys": (
                200,
                {"Content-Type": "application/ohttp-keys", "Cache-Control": "max-age=3600"},
                b"k1",
            ),
            "/hpke_config": (200, {"Content-Type": "application/ppm-dap;message=hpke-config-list"}, b"h1"),
        }
        self.delay = 0.0
        leader = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def _any(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                leader.seen.append((self.command, self.path, dict(self.headers.items()), body))
                time.sleep(leader.delay)
                status, headers, content = leader.answers.get(self.path, (404, {}, b""))
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(content)))
                self.end_headers()
                self.wfile.write(content)

            do_GET = do_POST = _any

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def leader():
    stand_in = Leader()
    yield stand_in
    stand_in.server.shutdown()
    stand_in.server.server_close()


def call(relay: Relay, method: str, path: str, body: bytes = b"", **environ) -> tuple[str, dict[str, str], bytes]:
    """The relay's answer to one client request, as gunicorn would hand it over."""
    base = {
        "REQUEST_METHOD": method,
        "PATH_INFO": path,
        "REMOTE_ADDR": CLIENT,
        "CONTENT_LENGTH": str(len(body)),
        "wsgi.input": io.BytesIO(body),
    }
    answered: dict = {}

    def start_response(status: str, headers: list[tuple[str, str]]) -> None:
        answered.update(status=status, headers=dict(headers))

    content = b"".join(relay({**base, **environ}, start_response))
    return answered["status"], answered["headers"], content


def post(relay: Relay, body: bytes = CAPSULE, **environ):
    return call(relay, "POST", "/", body, **{"CONTENT_TYPE": "message/ohttp-req", **CLIENT_HEADERS, **environ})


def test_a_capsule_reaches_the_gateway_byte_for_byte_with_nothing_of_the_client(leader) -> None:
    status, headers, content = post(Relay(leader.url))
    assert (status, content) == ("200 OK", b"sealed")
    assert headers["Content-Type"] == "message/ohttp-res" and headers["Cache-Control"] == "no-store"
    assert "Set-Cookie" not in headers  # nothing the leader could tag the client with comes back either
    ((method, path, sent, body),) = leader.seen
    assert (method, path, body) == ("POST", "/api/ohttp/", CAPSULE)
    assert {name.lower() for name in sent} == {
        "host",
        "user-agent",
        "content-type",
        "content-length",
        "accept-encoding",
    }
    assert sent["User-Agent"] == "pfs-relay/1" and sent["Content-Type"] == "message/ohttp-req"
    assert CLIENT not in json.dumps(sent) and "phone-model" not in json.dumps(sent)


def test_the_gateways_refusal_and_its_retry_after_pass_through(leader) -> None:
    leader.answers["/api/ohttp/"] = (429, {"Content-Type": "application/json", "Retry-After": "7"}, b'{"code": "x"}')
    status, headers, content = post(Relay(leader.url))
    assert status.startswith("429") and headers["Retry-After"] == "7" and content == b'{"code": "x"}'


@pytest.mark.parametrize(
    ("environ", "status", "code"),
    [
        ({"CONTENT_TYPE": "application/json"}, "415", "unsupported_media_type"),
        ({"CONTENT_LENGTH": ""}, "411", "length_required"),
        ({"CONTENT_LENGTH": str(MAX_REQUEST_BYTES + 1)}, "413", "payload_too_large"),
        ({"CONTENT_LENGTH": str(len(CAPSULE) + 5)}, "400", "invalid"),
    ],
)
def test_a_malformed_request_is_refused_and_nothing_reaches_the_leader(leader, environ, status, code) -> None:
    answered, _, content = post(Relay(leader.url), **environ)
    assert answered.startswith(status) and json.loads(content)["code"] == code
    assert leader.seen == []


def test_other_methods_and_paths_are_refused(leader) -> None:
    relay = Relay(leader.url)
    assert call(relay, "GET", "/")[0].startswith("405")
    assert call(relay, "POST", "/leader/hpke_config")[0].startswith("405")
    assert call(relay, "GET", "/api/device/tasks/")[0].startswith("404")  # not a proxy to the leader's API
    assert call(relay, "GET", "/leader/api/device/tasks/")[0].startswith("404")
    assert leader.seen == []


def test_a_leader_that_does_not_answer_is_a_502_and_one_too_slow_a_504(leader) -> None:
    status, _, content = post(Relay("http://127.0.0.1:9"))
    assert status.startswith("502") and json.loads(content)["code"] == "gateway_unavailable"
    leader.delay = 1.0
    assert post(Relay(leader.url, timeout=0.2))[0].startswith("504")


def test_every_client_gets_the_same_copy_of_the_leaders_keys_fetched_once(leader) -> None:
    relay = Relay(leader.url, key_ttl=60)
    answers = [call(relay, "GET", "/leader/api/ohttp/keys", **CLIENT_HEADERS) for _ in range(5)]
    assert {content for _, _, content in answers} == {b"k1"}
    assert answers[0][1]["Content-Type"] == "application/ohttp-keys"
    assert call(relay, "GET", "/leader/hpke_config")[2] == b"h1"
    fetched = [path for _, path, _, _ in leader.seen]
    assert fetched == ["/api/ohttp/keys", "/hpke_config"]  # once each, whoever asked
    assert all(CLIENT not in json.dumps(headers) for _, _, headers, _ in leader.seen)
    # a new key at the leader reaches the clients when the copy's life is over, not before
    leader.answers["/api/ohttp/keys"] = (200, {"Content-Type": "application/ohttp-keys"}, b"k2")
    assert call(relay, "GET", "/leader/api/ohttp/keys")[2] == b"k1"
    assert call(Relay(leader.url, key_ttl=0), "GET", "/leader/api/ohttp/keys")[2] == b"k2"


def test_the_copy_lives_no_longer_than_the_leaders_max_age(leader) -> None:
    leader.answers["/api/ohttp/keys"] = (
        200,
        {"Content-Type": "application/ohttp-keys", "Cache-Control": "max-age=0"},
        b"k1",
    )
    relay = Relay(leader.url, key_ttl=600)
    call(relay, "GET", "/leader/api/ohttp/keys")
    call(relay, "GET", "/leader/api/ohttp/keys")
    assert len(leader.seen) == 2


def test_a_refused_key_fetch_is_not_kept(leader) -> None:
    leader.answers["/hpke_config"] = (503, {"Content-Type": "application/json"}, b"{}")
    relay = Relay(leader.url)
    assert call(relay, "GET", "/leader/hpke_config")[0].startswith("503")
    leader.answers["/hpke_config"] = (200, {"Content-Type": "application/json"}, b"h2")
    assert call(relay, "GET", "/leader/hpke_config")[2] == b"h2"


def test_the_relay_logs_nothing_of_a_client_even_when_the_leader_fails(leader, caplog) -> None:
    caplog.set_level(logging.DEBUG)
    post(Relay(leader.url))
    post(Relay("http://127.0.0.1:9"))
    call(Relay("http://127.0.0.1:9"), "GET", "/leader/api/ohttp/keys", **CLIENT_HEADERS)
    assert caplog.records, "the failures are logged"
    assert CLIENT not in caplog.text and "phone-model" not in caplog.text and "session=abc" not in caplog.text


@pytest.mark.parametrize(
    "argv",
    [
        [],  # no leader
        ["--leader", "ftp://leader.example"],
        ["--leader", "http://leader.example?x=1"],
        ["--leader", "http://leader.example", "--threads", "0"],
        ["--leader", "http://leader.example", "--timeout", "soon"],
    ],
)
def test_the_cli_exits_2_on_bad_input_and_serves_nothing(argv, monkeypatch, capsys) -> None:
    monkeypatch.delenv("PFS_RELAY_LEADER", raising=False)
    monkeypatch.setattr(relay_cli._Server, "run", lambda self: pytest.fail("it must not serve"))
    with pytest.raises(SystemExit) as exited:
        relay_cli.main(argv)
    assert exited.value.code == 2
    assert "error:" in capsys.readouterr().err
