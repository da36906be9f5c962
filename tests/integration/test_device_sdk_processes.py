"""The device SDK in a process of its own: a device has no Django, so ``pfs_device.sdk`` must import without it.

A fresh interpreter is the only place to check this: the test process has Django loaded already. The SDK's logic is
tested in process in tests/unit/test_device_sdk.py.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def test_the_sdk_runs_without_django() -> None:
    blocker = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'django' or name.startswith(('django.', 'rest_framework')):\n"
        "            raise ImportError(name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "import pfs_device.sdk.__main__\n"
    )
    result = subprocess.run([sys.executable, "-c", blocker], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
