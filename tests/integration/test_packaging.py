"""The three distributions build, and the two meant for other machines install on their own
(docs/packaging.md): the client with nothing but Python, the device SDK with numpy, scipy,
cryptography and pycryptodome only — no Django, no server.

Wheels are built without downloading a build backend (setuptools is in the development lock), from a
copy of each project with its links followed, as an sdist would hold it. Each install goes into a
fresh virtualenv: the client's from its wheel alone, the device SDK's with its dependencies from the
package index at the versions of requirements.txt.
"""

from __future__ import annotations

import email
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SERVER_FILES = ("pyproject.toml", "README.md", "requirements.in")


def run(*argv: str | Path, cwd: Path | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    result = subprocess.run([str(a) for a in argv], cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"{argv}:\n{result.stdout}\n{result.stderr}"
    return result


def wheel_of(project: Path, out: Path) -> Path:
    run(sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "-w", out, project)
    [wheel] = out.glob("*.whl")
    return wheel


def metadata(wheel: Path) -> email.message.Message:
    with zipfile.ZipFile(wheel) as archive:
        [name] = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        return email.message_from_bytes(archive.read(name))


def modules(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as archive:
        return {n for n in archive.namelist() if n.endswith(".py")}


def fresh_venv(folder: Path) -> Path:
    """A virtualenv with nothing installed but pip (Python's own, bundled: no download)."""
    run(shutil.which("python3.11") or "python3", "-m", "venv", folder)
    return folder / "bin"


def test_the_server_builds_a_wheel_of_its_packages_with_its_direct_dependencies(tmp_path: Path) -> None:
    project = tmp_path / "server"
    project.mkdir()
    for name in SERVER_FILES:
        shutil.copy(ROOT / name, project / name)
    for package in ("privacy", "pfs_base", "devices", "aggregation", "analyses", "pfs_web", "pfs_client"):
        shutil.copytree(ROOT / package, project / package, ignore=shutil.ignore_patterns("__pycache__"))
    wheel = wheel_of(project, tmp_path / "dist")
    expected = {
        str(path.relative_to(ROOT))
        for package in ("privacy", "pfs_base", "devices", "aggregation", "analyses", "pfs_web", "pfs_client")
        for path in (ROOT / package).rglob("*.py")
        if "__pycache__" not in path.parts
    }
    assert modules(wheel) == expected
    requirements = [
        line.strip()
        for line in (ROOT / "requirements.in").read_text().splitlines()
        if line and not line.startswith("#")
    ]
    assert len(metadata(wheel).get_all("Requires-Dist")) == len(requirements)
    assert "Django<5.3,>=5.2" in metadata(wheel).get_all("Requires-Dist")


def test_the_client_installs_alone_and_declares_its_pandas_extra(tmp_path: Path) -> None:
    project = tmp_path / "client"
    shutil.copytree(
        ROOT / "clients" / "python", project, ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info")
    )
    wheel = wheel_of(project, tmp_path / "dist")
    assert modules(wheel) == {f"pfs_client/{p.name}" for p in (ROOT / "pfs_client").glob("*.py")}
    meta = metadata(wheel)
    assert meta.get_all("Requires-Dist") == ['pandas>=2; extra == "pandas"']
    assert meta.get_all("Provides-Extra") == ["pandas"]

    bin_ = fresh_venv(tmp_path / "venv")
    run(bin_ / "pip", "install", "--quiet", "--no-index", wheel)  # nothing but the wheel: no index, no dependency
    probe = (
        "import importlib.util, pfs_client; "
        "assert importlib.util.find_spec('django') is None and importlib.util.find_spec('numpy') is None; "
        "from pfs_client import Client, Release; "
        "print(Release(round_id=1, data={'batches': []}).to_csv().strip())"
    )
    assert run(bin_ / "python", "-c", probe).stdout.strip() == "cohort,bucket,estimate,standard_error,ci_low,ci_high"
    assert "login" in run(bin_ / "pfs", "--help").stdout


def test_the_device_sdk_installs_with_its_dependencies_and_no_server_code(tmp_path: Path) -> None:
    project = tmp_path / "device"
    shutil.copytree(
        ROOT / "clients" / "device", project, ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info")
    )
    wheel = wheel_of(project, tmp_path / "dist")
    assert {"devices/sdk/device.py", "devices/decision.py", "aggregation/wire.py", "privacy/mechanisms.py"} <= modules(
        wheel
    )
    assert not {"devices/models.py", "devices/services.py", "aggregation/models.py"} & modules(wheel)
    requires = metadata(wheel).get_all("Requires-Dist")
    assert sorted(r.split(">=")[0] for r in requires) == ["cryptography", "numpy", "pycryptodome", "scipy"]

    # The dependencies at the server's locked versions (what the suite tests), from the index.
    locked = [line.split(" ")[0] for line in (ROOT / "requirements.txt").read_text().splitlines() if "==" in line]
    constraints = tmp_path / "constraints.txt"
    constraints.write_text("\n".join(locked) + "\n")
    bin_ = fresh_venv(tmp_path / "venv")
    run(bin_ / "pip", "install", "--quiet", "-c", constraints, wheel)
    installed = run(bin_ / "pip", "list", "--format=freeze").stdout.lower()
    assert "django" not in installed and "celery" not in installed
    sdk_modules = sorted(
        m.removesuffix(".py").replace("/", ".")
        for m in modules(wheel)
        if m.startswith("devices/sdk/") and "__" not in m
    )
    probe = "import importlib, sys; [importlib.import_module(m) for m in sys.argv[1:]]; print('ok')"
    assert run(bin_ / "python", "-c", probe, *sdk_modules, cwd=tmp_path).stdout.strip() == "ok"
    assert "--credential" in run(bin_ / "pfs-device", "--help", cwd=tmp_path).stdout
    # Imported from the virtualenv, not from a checkout on the path.
    where = run(bin_ / "python", "-c", "import devices; print(devices.__file__)", cwd=tmp_path).stdout
    assert where.startswith(str(tmp_path / "venv")), where
