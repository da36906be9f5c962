"""`manage.py rotate_keys` as an operator runs it, in a process of its own: a bad key from the environment or a
missing --role exits non-zero with a message, before anything is rotated.

The command's logic, called in process, is in tests/adversarial/test_separated_stores.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT_DIR = Path(__file__).resolve().parents[2]  # the checkout (manage.py)


def test_rotate_keys_on_the_command_line_exits_2_on_bad_input(tmp_path) -> None:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "pfs_web.settings_test", "PFS_LEADER_KEY": "not base64!"}
    finished = subprocess.run(
        [sys.executable, "manage.py", "rotate_keys", "--role", "leader"],
        cwd=ROOT_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert finished.returncode != 0 and "PFS_LEADER_KEY: a key must be base64" in finished.stderr
    missing = subprocess.run(
        [sys.executable, "manage.py", "rotate_keys"], cwd=ROOT_DIR, env={**os.environ}, capture_output=True, timeout=60
    )
    assert missing.returncode == 2 and b"--role" in missing.stderr
