"""pfs_client in a process of its own: importable without Django, and ``python -m pfs_client`` is its command line.

The client's logic against a scripted server, in process, is tests/unit/test_python_client_unit.py; against a live
server, tests/integration/test_python_client.py.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def test_the_client_is_importable_without_django() -> None:
    code = "import sys, pfs_client, pfs_client.cli; assert not [m for m in sys.modules if m.startswith('django')]"
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, timeout=60)


def test_python_dash_m_runs_the_cli() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pfs_client", "--help"], cwd=ROOT, capture_output=True, text=True, check=True, timeout=60
    )
    assert "run a recipe, wait for its release" in done.stdout
