"""The commands that print PFS Studio's version, each run as a process as a person types it: ``manage.py version``,
``python -m pfs_client --version`` (``pfs --version`` installed) and ``python -m pfs_device.sdk --version``
(``pfs-device --version``). They print the one number tests/unit/test_version.py checks the packages and
CHANGELOG.md agree on; the installed commands are run in tests/integration/test_packaging.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import pfs_device
from tests.unit.test_version import newest_changelog_version

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
# A plain shell's environment: no settings module, no .env, so `manage.py version` must answer without Django.
PLAIN = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/root"), "PFS_ENV_FILE": os.devnull}


@pytest.mark.parametrize(
    ("command", "name"),
    [
        (["manage.py", "version"], "pfs-studio"),
        (["-m", "pfs_client", "--version"], "pfs-client"),
        (["-m", "pfs_device.sdk", "--version"], "pfs-device"),
    ],
    ids=["manage.py", "pfs_client", "pfs_device.sdk"],
)
def test_each_command_prints_the_one_version(command: list[str], name: str) -> None:
    result = subprocess.run(
        [sys.executable, *command], cwd=ROOT, env=PLAIN, capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == f"{name} {pfs_device.__version__}"
    assert pfs_device.__version__ == newest_changelog_version()
