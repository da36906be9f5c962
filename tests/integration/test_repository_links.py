"""The repository holds no symbolic links: the distributions package its own folders (docs/packaging.md), and a
link (mode 120000 in git's index) would package a folder twice or break on a platform without links.

Asks git for the index, so it starts a process; the distributions' lists are read in process in
tests/unit/test_packaging_lists.py.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def test_the_repository_holds_no_links() -> None:
    """The distributions package the repository's own folders: nothing is linked in (mode 120000)."""
    files = subprocess.run(["git", "ls-files", "-s"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert [line.split("\t")[1] for line in files.splitlines() if line.startswith("120000")] == []
