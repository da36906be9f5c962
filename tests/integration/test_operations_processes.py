"""The processes an operator starts beside the web: a worker or beat refuses to start without a broker, and
serve_metrics exposes what the host's other processes counted.

Each starts a real process (celery, manage.py serve_metrics), so these live here; the probes, request ids, log lines
and metrics in process are tests/unit/test_operations.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from tests import services

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("program", ["worker", "beat"])
def test_a_worker_or_beat_without_a_broker_stops_at_start_up(program) -> None:
    """Without REDIS_URL tasks run in the web process: a worker would wait on an empty in-memory queue."""
    env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/root"), "PFS_ENV_FILE": os.devnull}
    result = subprocess.run(
        [sys.executable, "-m", "celery", "-A", "pfs_web", program],
        cwd=ROOT,
        env={**env, "SECRET_KEY": "x", "DJANGO_SETTINGS_MODULE": "pfs_web.settings"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert "needs a broker: set REDIS_URL" in result.stdout + result.stderr


def test_serve_metrics_serves_what_other_processes_of_the_host_counted(tmp_path) -> None:
    """A worker-only host: its workers count into the folder; serve_metrics exposes the sum."""
    metrics_dir = tmp_path / "metrics"
    metrics_dir.mkdir()
    env = {
        "PATH": os.environ["PATH"],
        "HOME": os.environ.get("HOME", "/root"),
        "PFS_ENV_FILE": os.devnull,
        "SECRET_KEY": "x",
        "DJANGO_SETTINGS_MODULE": "pfs_web.settings",
        "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir),
    }
    count = "import django; django.setup(); from pfs_base import metrics; metrics.ROUNDS.labels('released').inc(3)"
    for _ in range(2):  # two worker processes, each with its own file
        subprocess.run([sys.executable, "-c", count], cwd=ROOT, env=env, check=True, timeout=60)
    port = services.free_port()
    server = services.Background(
        f"exec {sys.executable} manage.py serve_metrics --port {port}", cwd=ROOT, env=env, log_path=tmp_path / "log"
    )
    try:
        server.wait_for(lambda: services.http_status(f"http://127.0.0.1:{port}/") == 200, timeout=60, what="metrics")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10) as answer:  # noqa: S310
            text = answer.read().decode()
    finally:
        server.stop()
    assert 'pfs_rounds_total{event="released"} 6.0' in text
