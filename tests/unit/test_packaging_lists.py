"""What each distribution lists is what the code needs (docs/packaging.md).

pyproject.toml lists the server's packages by name, and clients/device/pyproject.toml the device SDK's:
a new package must be added there too, and the device's code may import nothing beyond the pure DP
core, the standard library and the SDK's four dependencies. These tests say which.
tests/integration/test_packaging.py builds and installs the three wheels.
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[2]
SERVER_ROOTS = (
    "privacy",
    "pfs_base",
    "pfs_device",
    "devices",
    "aggregation",
    "analyses",
    "pfs_web",
    "pfs_client",
    "pfs_relay",
)
DEVICE = ROOT / "clients" / "device"
# What the device SDK's distribution depends on (clients/device/pyproject.toml), by import name.
DEVICE_DEPENDENCIES = {"numpy", "scipy", "cryptography", "Crypto", "pyhpke", "pybase64"}


def packages_under(root: Path, name: str) -> list[str]:
    return sorted(
        ".".join(init.parent.relative_to(root).parts)
        for init in (root / name).rglob("__init__.py")
        if "__pycache__" not in init.parts
    )


def test_the_server_distribution_lists_every_package_of_the_repository() -> None:
    listed = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    assert sorted(listed) == sorted(p for root in SERVER_ROOTS for p in packages_under(ROOT, root))


def test_the_server_distribution_reads_its_dependencies_from_requirements_in() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "dependencies" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["dependencies"] == {"file": ["requirements.in"]}
    lines = [line.strip() for line in (ROOT / "requirements.in").read_text().splitlines()]
    # setuptools reads the file as bare requirements: no pip options, no comment after a requirement.
    assert not [line for line in lines if line.startswith("-") or (" #" in line and not line.startswith("#"))]


def test_the_device_sdk_lists_its_package_with_the_dp_core_inside() -> None:
    listed = tomllib.loads((DEVICE / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    staged = packages_under(ROOT, "pfs_device") + [f"pfs_device.{p}" for p in packages_under(ROOT, "privacy")]
    assert sorted(listed) == sorted(staged)


def test_the_device_package_imports_only_the_dp_core_the_standard_library_and_its_dependencies() -> None:
    graph = grimp.build_graph("pfs_device", "privacy", include_external_packages=True, cache_dir=None)
    imported = {
        target.split(".")[0]
        for module in graph.modules
        if module.split(".")[0] in ("pfs_device", "privacy")
        for target in graph.find_modules_directly_imported_by(module)
    }
    allowed = {"pfs_device", "privacy"} | DEVICE_DEPENDENCIES | set(sys.stdlib_module_names)
    assert imported - allowed == set(), "pfs_device/ must run on a device without the server's packages"
