"""One version number: the server's, the device SDK's, the Python client's and the changelog's newest entry.

The three distributions are released together (CHANGELOG.md), so a number bumped in one place and not the others
would ship a release whose parts disagree on what they are. The commands that print the number (``manage.py
version``, ``python -m pfs_client --version``, ``python -m pfs_device.sdk --version``) run as processes in
tests/integration/test_version_commands.py.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pfs_client
import pfs_device

ROOT = Path(__file__).resolve().parents[2]
# Keep a Changelog's release heading, as CHANGELOG.md writes it: "## 0.2.0 — 2026-11-26".
RELEASE_HEADING = re.compile(r"^## (\d+\.\d+\.\d+) — (\d{4}-\d{2}-\d{2})$", re.MULTILINE)


def newest_changelog_version() -> str:
    """The version of CHANGELOG.md's first release heading (the newest release: the file lists them newest first)."""
    headings = RELEASE_HEADING.findall((ROOT / "CHANGELOG.md").read_text())
    assert headings, 'CHANGELOG.md has no release heading "## X.Y.Z — YYYY-MM-DD"'
    return headings[0][0]


def test_the_device_sdk_the_client_and_the_changelog_have_one_version() -> None:
    assert re.fullmatch(r"\d+\.\d+\.\d+", pfs_device.__version__), pfs_device.__version__
    assert pfs_client.__version__ == pfs_device.__version__
    assert newest_changelog_version() == pfs_device.__version__


def test_the_changelog_lists_its_releases_newest_first() -> None:
    versions = [
        tuple(map(int, version.split(".")))
        for version, _ in RELEASE_HEADING.findall((ROOT / "CHANGELOG.md").read_text())
    ]
    assert versions == sorted(versions, reverse=True)


def test_each_distribution_takes_its_version_from_the_package_not_a_copy() -> None:
    """No literal number in a pyproject.toml: each reads the package's __version__, so there is one place to bump."""
    expected = {
        "pyproject.toml": "pfs_device.__version__",  # the server: the same number as the SDK it serves
        "clients/device/pyproject.toml": "pfs_device.__version__",
        "clients/python/pyproject.toml": "pfs_client.__version__",
    }
    for path, attribute in expected.items():
        project = tomllib.loads((ROOT / path).read_text())
        assert "version" not in project["project"] and "version" in project["project"]["dynamic"], path
        assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": attribute}, path
