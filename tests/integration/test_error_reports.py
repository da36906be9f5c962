"""Error reports go to Sentry only when SENTRY_DSN is set: an ERROR log line becomes an event there.

A process with the production settings is started with a DSN that names a small HTTP server of this
test's own, which stands in for Sentry and keeps what it receives.
"""

from __future__ import annotations

import gzip
import http.server
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]

PROGRAM = """
import logging, sys
import django
django.setup()
logging.getLogger("pfs.test").error("pfs-error-report-probe")
if "sentry_sdk" in sys.modules:
    import sentry_sdk
    sentry_sdk.flush(timeout=10)
print("sentry_sdk loaded" if "sentry_sdk" in sys.modules else "sentry_sdk not loaded")
"""


def run(extra_env: dict[str, str]) -> subprocess.CompletedProcess:
    env = {
        "PATH": os.environ["PATH"],
        "HOME": os.environ.get("HOME", "/root"),
        "DJANGO_SETTINGS_MODULE": "pfs_web.settings",
        "PFS_ENV_FILE": os.devnull,
        "SECRET_KEY": "error-reports-test",
        **extra_env,
    }
    return subprocess.run(
        [sys.executable, "-c", PROGRAM], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )


class Received(http.server.BaseHTTPRequestHandler):
    bodies: list[bytes] = []

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        Received.bodies.append(body)
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


def test_an_error_line_is_reported_to_the_dsn_when_one_is_set() -> None:
    Received.bodies = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Received)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        dsn = f"http://publickey@127.0.0.1:{server.server_port}/42"
        result = run({"SENTRY_DSN": dsn, "SENTRY_ENVIRONMENT": "ci"})
    finally:
        server.shutdown()
    assert result.returncode == 0, result.stderr
    assert "sentry_sdk loaded" in result.stdout
    received = b"".join(Received.bodies)
    assert b"pfs-error-report-probe" in received and b'"environment":"ci"' in received.replace(b" ", b"")


def test_without_a_dsn_nothing_of_sentry_is_loaded() -> None:
    result = run({})
    assert result.returncode == 0, result.stderr
    assert "sentry_sdk not loaded" in result.stdout
    assert "pfs-error-report-probe" in result.stderr  # the line still goes to the log
