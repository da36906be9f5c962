"""The device SDK's build backend: setuptools, on the repository's own pfs_device/ and privacy/.

The SDK runs the very code the simulator runs, so this folder holds no copy and no link of it: a
build stages ``pfs_device/`` from the repository, with the pure DP core ``privacy/`` inside it as
``pfs_device.privacy`` and every ``privacy`` import rewritten to that name (as pip vendors its own
dependencies), and hands the staged tree to setuptools. Installed, the SDK is one top-level package,
``pfs_device``: it brings no ``privacy`` of its own to clash with a user's (docs/packaging.md).

An sdist holds the staged tree, so a wheel built from it stages nothing.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from setuptools import build_meta as _setuptools

HERE = Path(__file__).resolve().parent
REPOSITORY = HERE.parent.parent
PROJECT_FILES = ("pyproject.toml", "README.md", "build_backend.py")
# `from privacy…` / `import privacy…` at the start of a statement, and nothing else.
PRIVACY_IMPORT = re.compile(r"^(\s*)(from|import)\s+privacy\b", re.MULTILINE)


def privacy_imports_rewritten(source: str) -> str:
    return PRIVACY_IMPORT.sub(r"\1\2 pfs_device.privacy", source)


def stage(into: Path) -> None:
    """The SDK's project as an sdist holds it: this folder's files, the licence, and the package."""
    for name in PROJECT_FILES:
        shutil.copy(HERE / name, into / name)
    shutil.copy(REPOSITORY / "LICENSE", into / "LICENSE")
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(REPOSITORY / "pfs_device", into / "pfs_device", ignore=ignore)
    shutil.copytree(REPOSITORY / "privacy", into / "pfs_device" / "privacy", ignore=ignore)
    for module in (into / "pfs_device").rglob("*.py"):
        module.write_text(privacy_imports_rewritten(module.read_text()))


@contextlib.contextmanager
def _staged() -> Iterator[None]:
    """Runs setuptools in the staged tree (here already, when building from an sdist)."""
    if (HERE / "pfs_device").is_dir():
        yield
        return
    previous = os.getcwd()
    with tempfile.TemporaryDirectory(prefix="pfs-device-build-") as folder:
        stage(Path(folder))
        os.chdir(folder)
        try:
            yield
        finally:
            os.chdir(previous)


def get_requires_for_build_wheel(config_settings=None):
    return _setuptools.get_requires_for_build_wheel(config_settings)


def get_requires_for_build_sdist(config_settings=None):
    return _setuptools.get_requires_for_build_sdist(config_settings)


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    wheel_directory = os.path.abspath(wheel_directory)
    with _staged():
        return _setuptools.build_wheel(wheel_directory, config_settings)


def build_sdist(sdist_directory, config_settings=None):
    sdist_directory = os.path.abspath(sdist_directory)
    with _staged():
        return _setuptools.build_sdist(sdist_directory, config_settings)
