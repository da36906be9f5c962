"""The deployment's files hold together: the systemd units run the Procfile's commands, read from the files alone.

The checks that run programs (deploy/pfs.env through `check --deploy`, the units through `systemd-analyze verify`,
`make setup`'s .env) are in tests/integration/test_deploy_commands.py; the production profile itself runs in
tests/integration/test_production_profile.py (the Procfile's processes, nginx with deploy/nginx/pfs.conf,
PostgreSQL, Redis, Chromium).
"""

from __future__ import annotations

import configparser
import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
VENV_BIN = "/opt/pfs/.venv/bin/"  # where deploy/systemd's units expect the virtualenv


def procfile(name: str = "Procfile") -> dict[str, str]:
    lines = (ROOT / name).read_text().splitlines()
    return dict(line.split(": ", 1) for line in lines if line and not line.startswith("#"))


def unit(name: str) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # systemd's keys are case-sensitive
    parser.read(DEPLOY / "systemd" / name)
    return parser


def venv_command(line: str) -> str:
    """'/opt/pfs/.venv/bin/celery -A ...' -> 'celery -A ...': the Procfile runs with that bin/ on the PATH."""
    assert line.startswith(VENV_BIN), line
    return line.removeprefix(VENV_BIN)


def test_the_systemd_units_run_the_procfiles_commands() -> None:
    """So the production profile's test, which runs the Procfile, runs what systemd runs."""
    commands = procfile()
    web = unit("pfs-web.service")["Service"]
    assert venv_command(web["ExecStart"]) == commands["web"]
    before_start = [venv_command(line) for line in _all(DEPLOY / "systemd" / "pfs-web.service", "ExecStartPre")]
    assert " && ".join(before_start) == commands["release"]
    worker = shlex.split(venv_command(unit("pfs-worker@.service")["Service"]["ExecStart"]))
    hostname = worker.index("--hostname")
    assert worker[hostname + 1] == "worker%i@%%h"  # systemd's instance name, and the host
    assert shlex.join(worker[:hostname] + worker[hostname + 2 :]) == commands["worker"]
    assert venv_command(unit("pfs-beat.service")["Service"]["ExecStart"]) == commands["beat"]
    for name in ("pfs-web.service", "pfs-worker@.service", "pfs-beat.service"):
        assert unit(name)["Service"]["EnvironmentFile"] == "/etc/pfs/pfs.env"


def test_the_helpers_unit_runs_its_procfiles_commands_with_its_own_settings() -> None:
    """The helper's host runs Procfile.helper (pfs-helper.service), reading deploy/pfs-helper.env, never the leader's."""
    commands = procfile("Procfile.helper")
    helper = unit("pfs-helper.service")["Service"]
    assert venv_command(helper["ExecStart"]) == commands["web"]
    before_start = [venv_command(line) for line in _all(DEPLOY / "systemd" / "pfs-helper.service", "ExecStartPre")]
    assert " && ".join(before_start) == commands["release"]
    assert helper["EnvironmentFile"] == "/etc/pfs/pfs-helper.env"
    documented = (DEPLOY / "pfs-helper.env").read_text()
    assert "DJANGO_SETTINGS_MODULE=pfs_web.settings_helper" in documented
    assert "DATABASE_URL=postgres" not in documented.replace("HELPER_DATABASE_URL", "")  # no leader's store
    assert "--database helper" not in procfile()["release"]  # the leader's host migrates no helper store


def _all(path: Path, key: str) -> list[str]:
    """Every value of a key systemd allows to repeat (configparser keeps only the last)."""
    return [line.split("=", 1)[1] for line in path.read_text().splitlines() if line.startswith(f"{key}=")]
