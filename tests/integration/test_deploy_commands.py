"""The deployment's files checked by the programs that read them, each run as a process: deploy/pfs.env passes
`manage.py check --deploy`, the systemd units pass `systemd-analyze verify`, `make setup` writes a local .env once,
and git ignores it.

That the units run the Procfile's commands is read from the files alone in tests/unit/test_deploy_files.py; the
production profile itself runs in tests/integration/test_production_profile.py.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pfs_base.env import env_file_read

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
VENV_BIN = "/opt/pfs/.venv/bin/"  # where deploy/systemd's units expect the virtualenv


def documented_environment(tmp_path: Path, name: str = "pfs.env") -> dict[str, str]:
    """deploy/pfs.env (or the helper's) as an operator fills it in: a generated SECRET_KEY, the metrics folder created."""
    env = env_file_read(DEPLOY / name)
    assert env["SECRET_KEY"] == "", "the documented file must not ship a key"  # noqa: S105
    assert env["PFS_AGGREGATOR_AUTH_SECRET"] == "", "nor the secret the two operators exchange"  # noqa: S105
    (tmp_path / "metrics").mkdir()
    return {**env, "SECRET_KEY": secrets.token_urlsafe(50), "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "metrics")}


def check_deploy(env: dict[str, str]) -> subprocess.CompletedProcess:
    plain = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/root"), "PFS_ENV_FILE": os.devnull}
    return subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env={**plain, "DJANGO_SETTINGS_MODULE": "pfs_web.settings", **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_check_deploy_is_clean_with_the_documented_configuration(tmp_path: Path) -> None:
    result = check_deploy(documented_environment(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout


def test_check_deploy_is_clean_with_the_helpers_documented_configuration(tmp_path: Path) -> None:
    env = documented_environment(tmp_path, "pfs-helper.env")
    assert env["DJANGO_SETTINGS_MODULE"] == "pfs_web.settings_helper"
    result = check_deploy(env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout


def test_check_deploy_warns_without_the_https_settings(tmp_path: Path) -> None:
    """What the documented file fixes, each from the environment (so the test above is not vacuous).
    With DEBUG off, HSTS and secure cookies are on by default: without the file's settings only the
    redirect to HTTPS (W008) and HSTS's subdomains (W005) are left to warn about; an explicit
    opt-out of the secure defaults brings their warnings back."""
    key = secrets.token_urlsafe(50)
    defaults = check_deploy({"DEBUG": "0", "SECRET_KEY": key})
    assert defaults.returncode != 0
    for warning in ("security.W005", "security.W008"):
        assert warning in defaults.stderr, defaults.stderr
    for warning in ("security.W004", "security.W012", "security.W016"):
        assert warning not in defaults.stderr, defaults.stderr
    opted_out = check_deploy(
        {
            "DEBUG": "0",
            "SECRET_KEY": key,
            "SECURE_HSTS_SECONDS": "0",
            "SESSION_COOKIE_SECURE": "0",
            "CSRF_COOKIE_SECURE": "0",
        }
    )
    for warning in ("security.W004", "security.W008", "security.W012", "security.W016"):
        assert warning in opted_out.stderr, opted_out.stderr


def test_the_systemd_units_pass_systemd_analyze_verify(tmp_path: Path) -> None:
    """The units as installed on this machine: the checkout in place of /opt/pfs, its virtualenv, root."""
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.fail("systemd-analyze is not installed: `make test` installs it in CI (apt-get install systemd)")
    venv_bin = Path(sys.executable).parent
    for source in (DEPLOY / "systemd").glob("*.service"):
        text = source.read_text().replace(VENV_BIN, f"{venv_bin}/").replace("/opt/pfs", str(ROOT))
        text = text.replace("/etc/pfs/pfs.env", str(DEPLOY / "pfs.env"))
        text = text.replace("/etc/pfs/pfs-helper.env", str(DEPLOY / "pfs-helper.env"))
        text = text.replace("User=pfs", "User=root").replace("Group=pfs", "Group=root")
        (tmp_path / source.name.replace("@", "@1")).write_text(text)
    result = subprocess.run(
        [analyze, "verify", *sorted(str(p) for p in tmp_path.glob("*.service"))],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0 and not result.stderr.strip(), result.stdout + result.stderr


def make_env(directory: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["make", "--no-print-directory", "-f", str(ROOT / "Makefile"), "-C", str(directory), ".env"],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_make_setup_writes_a_local_env_once_and_never_overwrites_it(tmp_path: Path) -> None:
    assert make_env(tmp_path).returncode == 0
    written = env_file_read(tmp_path / ".env")
    assert written["DEBUG"] == "1" and len(written["SECRET_KEY"]) >= 50
    assert (tmp_path / ".env").stat().st_mode & 0o077 == 0  # a secret: readable by its owner only
    assert make_env(tmp_path).returncode == 0
    assert env_file_read(tmp_path / ".env") == written  # the same key on a second run
    (tmp_path / ".env").write_text("DEBUG=0\nSECRET_KEY=the-operators-own\n")
    assert make_env(tmp_path).returncode == 0
    assert (tmp_path / ".env").read_text() == "DEBUG=0\nSECRET_KEY=the-operators-own\n"


def test_the_local_env_is_never_committed() -> None:
    result = subprocess.run(["git", "check-ignore", "-q", ".env"], cwd=ROOT, timeout=30)
    assert result.returncode == 0, ".gitignore must list .env"
