"""The three distributions build, and the two meant for other machines install on their own
(docs/packaging.md): the client with httpx and tqdm only, the device SDK with numpy, scipy,
cryptography, pycryptodome and pyhpke only — no Django, no server — each under its own one top-level
package, so both install into one environment beside packages named like the server's apps.

Wheels are built without downloading a build backend (setuptools is in the development lock), from a
copy of what each project reads of the repository, laid out as in the repository. Each install goes
into a fresh virtualenv, each with its dependencies from the package index at the versions of
requirements.txt.
"""

from __future__ import annotations

import email
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.unit.test_packaging_lists import SERVER_ROOTS

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SERVER_FILES = ("pyproject.toml", "README.md", "requirements.in", "LICENSE")
SERVER_PACKAGES = SERVER_ROOTS  # the server distribution's packages, as tests/unit/test_packaging_lists.py lists them


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
    for package in SERVER_PACKAGES:
        shutil.copytree(ROOT / package, project / package, ignore=shutil.ignore_patterns("__pycache__"))
    wheel = wheel_of(project, tmp_path / "dist")
    expected = {
        str(path.relative_to(ROOT))
        for package in SERVER_PACKAGES
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


def laid_out(tmp_path: Path, *paths: str) -> Path:
    """A copy of these files and folders of the repository, at the same places."""
    ignore = shutil.ignore_patterns("__pycache__", "build", "*.egg-info")
    for path in paths:
        source, target = ROOT / path, tmp_path / "repository" / path
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, target, ignore=ignore)
        else:
            shutil.copy(source, target)
    return tmp_path / "repository"


def top_level(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as archive:
        return {n.split("/")[0] for n in archive.namelist() if ".dist-info/" not in n}


def locked_constraints(tmp_path: Path) -> Path:
    """The runtime lock's versions, as pip constraints: what the suite tests."""
    locked = [line.split(" ")[0] for line in (ROOT / "requirements.txt").read_text().splitlines() if "==" in line]
    constraints = tmp_path / "constraints.txt"
    constraints.write_text("\n".join(locked) + "\n")
    return constraints


def test_the_client_installs_with_httpx_and_tqdm_only_and_declares_its_pandas_extra(tmp_path: Path) -> None:
    repository = laid_out(tmp_path, "clients/python", "pfs_client")
    wheel = wheel_of(repository / "clients" / "python", tmp_path / "dist")
    assert modules(wheel) == {f"pfs_client/{p.name}" for p in (ROOT / "pfs_client").glob("*.py")}
    with zipfile.ZipFile(wheel) as archive:
        assert "pfs_client/py.typed" in archive.namelist()  # PEP 561: its type hints are for its users too
    meta = metadata(wheel)
    assert sorted(meta.get_all("Requires-Dist")) == [
        "httpx<0.29,>=0.28.1",
        'pandas>=2; extra == "pandas"',
        "tqdm<5,>=4.66",
    ]
    assert meta.get_all("Provides-Extra") == ["pandas"]
    assert meta["License-Expression"] == "Apache-2.0"

    bin_ = fresh_venv(tmp_path / "venv")
    run(bin_ / "pip", "install", "--quiet", "-c", locked_constraints(tmp_path), wheel)
    installed = {line.split("==")[0].lower() for line in run(bin_ / "pip", "list", "--format=freeze").stdout.split()}
    assert {"httpx", "tqdm"} <= installed and not {"django", "numpy", "pandas"} & installed
    probe = (
        "import importlib.util, pfs_client; "
        "assert importlib.util.find_spec('django') is None and importlib.util.find_spec('numpy') is None; "
        "from pfs_client import Client, Release; "
        "print(Release(round_id=1, data={'batches': []}).to_csv().strip())"
    )
    assert run(bin_ / "python", "-c", probe).stdout.strip() == "cohort,bucket,estimate,standard_error,ci_low,ci_high"
    assert "login" in run(bin_ / "pfs", "--help").stdout


def test_the_device_sdk_and_the_client_install_together_beside_packages_named_like_the_servers(
    tmp_path: Path,
) -> None:
    repository = laid_out(
        tmp_path, "clients/device", "clients/python", "pfs_device", "privacy", "pfs_client", "LICENSE"
    )
    wheel = wheel_of(repository / "clients" / "device", tmp_path / "dist")
    client = wheel_of(repository / "clients" / "python", tmp_path / "dist-client")
    assert top_level(wheel) == {"pfs_device"}, "one top-level package: nothing named privacy, devices or sdk"
    assert {
        "pfs_device/sdk/device.py",
        "pfs_device/decision.py",
        "pfs_device/wire.py",
        "pfs_device/privacy/mechanisms.py",
        "pfs_device/privacy/vdaf/prio3.py",
    } <= modules(wheel)
    with zipfile.ZipFile(wheel) as archive:
        sources = [archive.read(n).decode() for n in archive.namelist() if n.endswith(".py")]
    assert not [s for s in sources if "\nfrom privacy" in s or "\nimport privacy" in s]
    meta = metadata(wheel)
    assert sorted(r.split(">=")[0] for r in meta.get_all("Requires-Dist")) == [
        "cryptography",
        "numpy",
        "pybase64",
        "pycryptodome",
        "pyhpke",
        "scipy",
    ]
    assert meta["License-Expression"] == "Apache-2.0"

    # The user's own packages, named like the server's apps and like the DP core: they must stay theirs.
    users = tmp_path / "users_code"
    for name in ("devices", "aggregation", "privacy", "sdk"):
        (users / name).mkdir(parents=True)
        (users / name / "__init__.py").write_text(f"WHOSE = {'the user’s ' + name!r}\n")

    # The dependencies at the server's locked versions (what the suite tests), from the index.
    bin_ = fresh_venv(tmp_path / "venv")
    run(bin_ / "pip", "install", "--quiet", "-c", locked_constraints(tmp_path), wheel, client)
    installed = run(bin_ / "pip", "list", "--format=freeze").stdout.lower()
    assert "django" not in installed and "celery" not in installed
    device_modules = sorted(
        m.removesuffix(".py").replace("/", ".").removesuffix(".__init__")
        for m in modules(wheel)
        if not m.endswith("__main__.py")
    )
    probe = (
        "import importlib, sys; [importlib.import_module(m) for m in sys.argv[1:]]; "
        "import devices, aggregation, privacy, sdk; "
        "print(devices.WHOSE, aggregation.WHOSE, privacy.WHOSE, sdk.WHOSE, sep=', ')"
    )
    env = {"PYTHONPATH": str(users), "PATH": "/usr/bin:/bin"}
    answer = subprocess.run(
        [bin_ / "python", "-c", probe, *device_modules], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert answer.returncode == 0, answer.stderr
    assert answer.stdout.strip() == "the user’s devices, the user’s aggregation, the user’s privacy, the user’s sdk"
    assert "--credential" in run(bin_ / "pfs-device", "--help", cwd=tmp_path).stdout
    version = (ROOT / "pfs_device" / "__init__.py").read_text().split('__version__ = "')[1].split('"')[0]
    assert run(bin_ / "pfs-device", "--version", cwd=tmp_path).stdout.strip() == f"pfs-device {version}"
    assert run(bin_ / "pfs", "--version", cwd=tmp_path).stdout.strip() == f"pfs-client {version}"
    assert meta["Version"] == metadata(client)["Version"] == version
    # Imported from the virtualenv, not from a checkout on the path.
    where = run(bin_ / "python", "-c", "import pfs_device; print(pfs_device.__file__)", cwd=tmp_path).stdout
    assert where.startswith(str(tmp_path / "venv")), where
