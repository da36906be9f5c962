"""What each distribution lists is what the code needs (docs/packaging.md).

pyproject.toml lists the server's packages by name, and clients/device links the device SDK's
modules one by one: a new package, or a new import in the SDK, must be added there too. These
tests say which. tests/integration/test_packaging.py builds and installs the three wheels.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[2]
SERVER_ROOTS = ("privacy", "pfs_base", "devices", "aggregation", "analyses", "pfs_web", "pfs_client")
DEVICE = ROOT / "clients" / "device"


def test_the_server_distribution_lists_every_package_of_the_repository() -> None:
    listed = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    found = sorted(
        ".".join(init.parent.relative_to(ROOT).parts)
        for root in SERVER_ROOTS
        for init in (ROOT / root).rglob("__init__.py")
        if "__pycache__" not in init.parts
    )
    assert sorted(listed) == found


def test_the_server_distribution_reads_its_dependencies_from_requirements_in() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "dependencies" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["dependencies"] == {"file": ["requirements.in"]}
    lines = [line.strip() for line in (ROOT / "requirements.in").read_text().splitlines()]
    # setuptools reads the file as bare requirements: no pip options, no comment after a requirement.
    assert not [line for line in lines if line.startswith("-") or (" #" in line and not line.startswith("#"))]


def sdk_closure() -> set[str]:
    """The repository's modules the device SDK imports, directly or not."""
    graph = grimp.build_graph("devices", "aggregation", "privacy", include_external_packages=False, cache_dir=None)
    seen: set[str] = set()
    todo = [m for m in graph.modules if m == "devices.sdk" or m.startswith("devices.sdk.")]
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo.extend(graph.find_modules_directly_imported_by(module))
    return seen


def linked_modules() -> set[str]:
    """The modules clients/device packages: each .py under its package folders, links followed."""
    modules = set()
    for package in ("devices", "aggregation", "privacy"):
        for folder, _, files in os.walk(DEVICE / package, followlinks=True):
            for name in files:
                if name.endswith(".py") and "__pycache__" not in folder:
                    parts = (Path(folder) / name).relative_to(DEVICE).with_suffix("").parts
                    modules.add(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return modules


def test_the_device_sdk_links_exactly_the_modules_it_imports() -> None:
    needed = {m for m in sdk_closure() if not m.startswith("privacy")}  # privacy/ is linked whole
    linked = {m for m in linked_modules() if not m.startswith("privacy")}
    missing, unneeded = sorted(needed - linked), sorted(linked - needed - {"devices", "aggregation"})
    assert not missing, f"the SDK imports these: link them into clients/device ({missing})"
    assert not unneeded, f"the SDK no longer imports these: unlink them from clients/device ({unneeded})"


def test_the_device_sdk_links_the_pure_dp_core_whole_and_the_client_its_package() -> None:
    assert (DEVICE / "privacy").resolve() == ROOT / "privacy"
    assert (DEVICE / "devices" / "sdk").resolve() == ROOT / "devices" / "sdk"
    assert (ROOT / "clients" / "python" / "pfs_client").resolve() == ROOT / "pfs_client"
    for path in (DEVICE / "devices").iterdir():
        assert path.is_symlink() and path.resolve() == ROOT / "devices" / path.name, path
    for path in (DEVICE / "aggregation").iterdir():
        assert path.is_symlink() and path.resolve() == ROOT / "aggregation" / path.name, path
