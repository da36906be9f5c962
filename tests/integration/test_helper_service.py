"""The helper aggregator as a service of its own (pfs_web.settings_helper), in a process of its own.

Started as `make helper` starts it (its store migrated, then gunicorn), with nothing of the
leader's: it opens its own store only, creates only its own tables there, serves its own HPKE
configuration, its probes and metrics, and no page, admin, sign-in or device endpoint of the
leader's. Its private key comes from its store, or from its own environment.
"""

from __future__ import annotations

import base64
import json
import os
import sqlite3
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from pfs_device import hpke
from pfs_device.hpke_config import MEDIA_TYPE, config_list_decode, config_of, supported_config
from tests import services

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
HELPER_TABLES = {
    "aggregation_aggregatorkey",
    "aggregation_collection",
    "aggregation_collectionrules",
    "aggregation_helperjob",
    "aggregation_helperrelease",
    "aggregation_helpershare",
    "aggregation_poplar1job",
    "aggregation_poplar1level",
    "aggregation_poplar1report",
    "aggregation_reportrejection",
    "aggregation_spenttoken",
}
# Everything the leader's process answers: none of it is the helper's.
LEADERS_PATHS = [
    "/",
    "/admin/",
    "/login/",
    "/api/analyses/",
    "/api/device/tasks/",
    "/api/schema/",
    "/static/css/app.css",
]


def helper_env(folder: Path, **extra: str) -> dict[str, str]:
    return {
        "PATH": "/usr/bin:/bin",
        "DJANGO_SETTINGS_MODULE": "pfs_web.settings_helper",
        "PFS_ENV_FILE": "/dev/null",
        "SECRET_KEY": "helper-service-test-key",
        "DEBUG": "0",
        "ALLOWED_HOSTS": "127.0.0.1",
        # Where a leader's store would be: the helper must never create or open it.
        "DATABASE_URL": f"sqlite:///{folder / 'leader.sqlite3'}",
        "HELPER_DATABASE_URL": f"sqlite:///{folder / 'helper.sqlite3'}",
        # The issuer's statement public key, as its operator gives it at set-up (pfs_web.settings_test's).
        "PFS_ISSUER_STATEMENT_PUBLIC_KEY": os.environ["PFS_ISSUER_STATEMENT_PUBLIC_KEY"],
        **extra,
    }


def start_helper(folder: Path, *, log_name: str = "helper.log", **extra: str) -> tuple[services.Background, str]:
    env = helper_env(folder, **extra)
    migrate = [sys.executable, "manage.py", "migrate", "--database", "helper", "--noinput"]
    subprocess.run(migrate, cwd=ROOT, env=env, check=True, capture_output=True, timeout=120)
    port = services.free_port()
    server = services.Background(
        f"exec {sys.executable} -m gunicorn -c gunicorn.conf.py --workers 1 --bind 127.0.0.1:{port}",
        cwd=ROOT,
        env=env,
        log_path=folder / log_name,
    )
    url = f"http://127.0.0.1:{port}"
    server.wait_for(lambda: services.http_status(f"{url}/healthz") == 200, timeout=60, what="/healthz")
    return server, url


def get(url: str) -> tuple[int, str, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:  # noqa: S310 - a loopback URL of the test's own
            return answer.status, answer.headers["Content-Type"], answer.read()
    except urllib.error.HTTPError as error:
        return error.code, error.headers["Content-Type"], error.read()


def test_the_helper_serves_its_own_key_and_nothing_of_the_leaders(tmp_path: Path) -> None:
    server, url = start_helper(tmp_path)
    try:
        status, media_type, body = get(f"{url}/hpke_config")
        assert (status, media_type) == (200, MEDIA_TYPE)
        config = supported_config(config_list_decode(body))
        with sqlite3.connect(tmp_path / "helper.sqlite3") as store:
            [(stored,)] = store.execute(
                "SELECT public_key FROM aggregation_aggregatorkey WHERE role = 'helper' AND retired_at IS NULL"
            ).fetchall()
            tables = {name for (name,) in store.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        assert config == config_of(bytes(stored))  # the key it opens with, from its own store

        assert services.http_status(f"{url}/readyz") == 200
        readiness = json.loads(get(f"{url}/readyz")[2])
        assert set(readiness["checks"]) == {"database"}  # no leader database, no Redis, no worker to ask
        assert get(f"{url}/metrics")[0] == 200
        for path in LEADERS_PATHS:
            status, media_type, body = get(f"{url}{path}")
            assert status == 404 and media_type == "application/json", (path, status, body[:200])
        request = urllib.request.Request(f"{url}/api/device/reports/", data=b"{}", method="POST")
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=10)  # noqa: S310
        assert refused.value.code == 404  # devices upload to the leader, never here

        # Its store holds the helper's tables only, and no store of the leader's was made.
        assert tables - {"django_migrations", "sqlite_sequence"} == HELPER_TABLES
        assert sorted(p.name for p in tmp_path.glob("*.sqlite3")) == ["helper.sqlite3"]
    finally:
        server.stop()


def test_the_helper_takes_its_private_key_from_its_own_environment(tmp_path: Path) -> None:
    private, public = hpke.key_pair_generate()
    server, url = start_helper(tmp_path, PFS_HELPER_KEY=base64.b64encode(private).decode())
    try:
        assert supported_config(config_list_decode(get(f"{url}/hpke_config")[2])) == config_of(public)
    finally:
        server.stop()
