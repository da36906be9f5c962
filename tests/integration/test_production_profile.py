"""The production profile as deploy/ runs it, on one machine: the Procfile's processes with the settings
of deploy/pfs.env, nginx with deploy/nginx/pfs.conf in front (HTTPS), PostgreSQL and Redis.

gunicorn (DEBUG off, static files collected), a Celery worker and Celery beat run as separate
processes. A round runs through the API (the Python client, over HTTPS), Chromium draws its chart
with the static files the app serves, and /healthz, /readyz and /metrics say what happened,
including what the worker did. Then the worker stops, and readiness says so.

Only what the machine forces is changed from the documented files: ports, the host name (127.0.0.1),
a self-signed certificate, and folders under the test's tmp_path. The systemd units run the same
commands (tests/unit/test_deploy_files.py checks that).
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from django.db import connection
from playwright.sync_api import expect

from pfs_base.env import env_file_read
from pfs_client import Client
from tests import services

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
PASSWORD = "production-profile-password"  # noqa: S105


def procfile(name: str = "Procfile") -> dict[str, str]:
    lines = (ROOT / name).read_text().splitlines()
    return dict(line.split(": ", 1) for line in lines if line and not line.startswith("#"))


def self_signed_certificate(folder: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1, its own issuer: the test trusts it, as a browser would a real one."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.now(UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = folder / "cert.pem", folder / "key.pem"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path


def nginx_site(*, http_port: int, https_port: int, web_port: int, cert: Path, key: Path, log: Path) -> str:
    """deploy/nginx/pfs.conf with this machine's ports, certificate and log; each line replaced must be there."""
    site = (ROOT / "deploy" / "nginx" / "pfs.conf").read_text()
    for documented, here in [
        ("listen 80;", f"listen 127.0.0.1:{http_port};"),
        ("listen [::]:80;", ""),
        ("listen 443 ssl http2;", f"listen 127.0.0.1:{https_port} ssl http2;"),
        ("listen [::]:443 ssl http2;", ""),
        ("/etc/letsencrypt/live/pfs.example.org/fullchain.pem", str(cert)),
        ("/etc/letsencrypt/live/pfs.example.org/privkey.pem", str(key)),
        ("server 127.0.0.1:8000;", f"server 127.0.0.1:{web_port};"),
        ("/var/log/nginx/pfs.access.log", str(log)),
    ]:
        assert documented in site, f"deploy/nginx/pfs.conf no longer has {documented!r}: update this test"
        site = site.replace(documented, here)
    return site


NGINX_MAIN = """
daemon off;
worker_processes 1;
pid {tmp}/nginx.pid;
error_log {tmp}/nginx-error.log warn;
events {{ worker_connections 256; }}
http {{
  client_body_temp_path {tmp}/body;
  proxy_temp_path {tmp}/proxy;
  fastcgi_temp_path {tmp}/fastcgi;
  uwsgi_temp_path {tmp}/uwsgi;
  scgi_temp_path {tmp}/scgi;
  include {tmp}/pfs.conf;
}}
"""


def metric(text: str, name: str, **labels: str) -> float:
    """The sample of a Prometheus text page with this name and exactly these labels; 0 if absent."""
    for line in text.splitlines():
        series, _, value = line.rpartition(" ")
        series_name, _, label_text = series.partition("{")
        if series_name == name and dict(re.findall(r'(\w+)="([^"]*)"', label_text)) == labels:
            return float(value)
    return 0.0


def get(url: str, **headers: str) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=15) as answer:  # noqa: S310 (loopback)
            return answer.status, dict(answer.headers), answer.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


@pytest.mark.django_db(transaction=True)
def test_the_production_profile_serves_a_round_its_chart_its_probes_and_its_metrics(
    analysis, recipe, settings, tmp_path, monkeypatch, browser
) -> None:
    if connection.vendor != "postgresql":
        pytest.fail("the production profile runs on PostgreSQL: `make test` finds or starts one (DATABASE_URL)")
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    if not Path(nginx).exists():
        pytest.fail("nginx is not installed: `make test` installs it in CI (apt-get install nginx-light)")
    redis_server = services.PrivateRedis(tmp_path)  # its own: no other worker answers its pings
    redis_server.start()
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.PBKDF2PasswordHasher"]  # the servers' hasher
    analyst = analysis.owner
    analyst.set_password(PASSWORD)
    analyst.save()

    web_port, http_port, https_port = services.free_port(), services.free_port(), services.free_port()
    site = f"https://127.0.0.1:{https_port}"
    cert, key = self_signed_certificate(tmp_path)
    for folder in ("metrics", "static", "nginx"):
        (tmp_path / folder).mkdir()
    documented = env_file_read(ROOT / "deploy" / "pfs.env")
    env = {
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",  # the virtualenv's bin/ first
        "HOME": os.environ.get("HOME", "/root"),
        "DJANGO_SETTINGS_MODULE": "pfs_web.settings",
        "PFS_ENV_FILE": os.devnull,
        **documented,
        "SECRET_KEY": secrets.token_urlsafe(50),
        "ALLOWED_HOSTS": "127.0.0.1",
        "CSRF_TRUSTED_ORIGINS": site,
        "DATABASE_URL": services.test_database_url(),
        "ISSUER_DATABASE_URL": services.test_database_url("issuer"),
        "HELPER_DATABASE_URL": services.test_database_url("helper"),
        "REDIS_URL": redis_server.url,
        "PFS_BIND": f"127.0.0.1:{web_port}",
        "WEB_CONCURRENCY": "2",
        "STATIC_ROOT": str(tmp_path / "static"),
        "PFS_BEAT_SCHEDULE": str(tmp_path / "celerybeat-schedule"),
        "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "metrics"),
        "PFS_REAPER_INTERVAL": "2",  # so that beat's schedule is seen to run within the test
    }
    # The helper aggregator, as its own operator runs it (Procfile.helper, deploy/pfs-helper.env): its own
    # settings, database, metrics and port; of the leader's, only the secret the two exchanged.
    helper_port, exchanged = services.free_port(), secrets.token_urlsafe(32)
    (tmp_path / "helper-metrics").mkdir()
    helper_env = {
        "PATH": env["PATH"],
        "HOME": env["HOME"],
        "PFS_ENV_FILE": os.devnull,
        **env_file_read(ROOT / "deploy" / "pfs-helper.env"),
        "SECRET_KEY": secrets.token_urlsafe(50),
        "ALLOWED_HOSTS": "127.0.0.1",
        "HELPER_DATABASE_URL": services.test_database_url("helper"),
        "PFS_AGGREGATOR_AUTH_SECRET": exchanged,
        "PFS_HELPER_ACCEPT_SIMULATED": "1",  # this test's fleet is simulated
        "SECURE_SSL_REDIRECT": "0",  # reached on loopback here, without the TLS proxy of its host
        "PFS_BIND": f"127.0.0.1:{helper_port}",
        "WEB_CONCURRENCY": "2",
        "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "helper-metrics"),
    }
    env.update(HELPER_URL=f"http://127.0.0.1:{helper_port}", PFS_AGGREGATOR_AUTH_SECRET=exchanged)
    commands, helper_commands = procfile(), procfile("Procfile.helper")
    for command, environment in ((commands["release"], env), (helper_commands["release"], helper_env)):
        release = subprocess.run(
            ["bash", "-c", command], cwd=ROOT, env=environment, capture_output=True, text=True, timeout=300
        )
        assert release.returncode == 0, release.stdout + release.stderr

    (tmp_path / "nginx" / "pfs.conf").write_text(
        nginx_site(
            http_port=http_port,
            https_port=https_port,
            web_port=web_port,
            cert=cert,
            key=key,
            log=tmp_path / "access.log",
        )
    )
    (tmp_path / "nginx" / "nginx.conf").write_text(NGINX_MAIN.format(tmp=tmp_path / "nginx"))
    processes = {
        name: services.Background(commands[name], cwd=ROOT, env=env, log_path=tmp_path / f"{name}.log")
        for name in ("web", "worker", "beat")
    }
    processes["helper"] = services.Background(
        helper_commands["web"], cwd=ROOT, env=helper_env, log_path=tmp_path / "helper.log"
    )
    processes["nginx"] = services.Background(
        f"exec {nginx} -c {tmp_path / 'nginx' / 'nginx.conf'} -p {tmp_path / 'nginx'}",
        cwd=tmp_path,
        env=env,
        log_path=tmp_path / "nginx.log",
    )
    web, worker, beat = processes["web"], processes["worker"], processes["beat"]
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # this process trusts the test's certificate
    try:
        web.wait_for(
            lambda: services.http_status(f"http://127.0.0.1:{web_port}/readyz") == 200,
            timeout=120,
            what="a ready web process (database, Redis and a worker answering)",
        )
        processes["nginx"].wait_for(lambda: services.http_status(f"{site}/healthz") == 200, timeout=30, what="nginx")
        processes["helper"].wait_for(
            lambda: services.http_status(f"http://127.0.0.1:{helper_port}/readyz") == 200, timeout=60, what="the helper"
        )

        # ---- the probes, through nginx over HTTPS
        status, _, body = get(f"{site}/healthz")
        assert status == 200 and json.loads(body) == {"status": "ok"}
        status, _, body = get(f"{site}/readyz")
        ready = json.loads(body)
        assert status == 200 and ready["status"] == "ready", ready
        checks = ready["checks"]
        assert checks["database"]["ok"] and checks["redis"]["ok"]
        assert checks["workers"]["ok"] and checks["workers"]["answered"]
        assert isinstance(checks["queue"]["depth"], int)  # beat's messages come and go every 2 s

        # ---- HTTPS as documented: nginx and the app redirect plain HTTP; HSTS on every answer
        assert services.http_status(f"http://127.0.0.1:{http_port}/login/") == 301
        assert services.http_status(f"http://127.0.0.1:{web_port}/login/") == 301  # the app's own redirect
        assert services.http_status(f"http://127.0.0.1:{web_port}/healthz") == 200  # probes by address, over HTTP
        status, headers, _ = get(f"{site}/login/")
        assert status == 200
        assert headers["Strict-Transport-Security"] == "max-age=31536000; includeSubDomains; preload"

        # ---- a round through the API: the Python client, over HTTPS
        client = Client(site, username=analyst.username, password=PASSWORD)
        release = client.run_recipe(analysis.identifier, recipe, poll=0.5, timeout=180)
        assert release["reports"] == 5_000
        # The helper released its share of each batch from its own process, and counted its work there.
        helper_metrics = get(f"http://127.0.0.1:{helper_port}/metrics")[2].decode()
        assert (
            metric(
                helper_metrics,
                "pfs_http_request_duration_seconds_count",
                route="tasks/<str:task_id>/aggregate_shares",
                method="POST",
                status="200",
            )
            == 1
        )

        # ---- the request id: given through nginx, returned, and on the app's and nginx's log lines
        status, headers, _ = get(
            f"{site}/api/analyses/", Authorization=f"Token {client.token}", **{"X-Request-ID": "prod-42"}
        )
        assert status == 200 and headers["X-Request-ID"] == "prod-42"

        # ---- the chart page in Chromium, with the static files the app serves
        requested, static = [], {}
        context = browser.new_context(ignore_https_errors=True, viewport={"width": 1280, "height": 900})
        try:
            page = context.new_page()
            page.on("request", lambda request: requested.append(request.url))
            page.on(
                "response",
                lambda response: static.update({response.url: response}) if "/static/" in response.url else None,
            )
            page.goto(f"{site}/login/")
            page.get_by_label("Username").fill(analyst.username)
            page.get_by_label("Password").fill(PASSWORD)
            page.get_by_role("button", name="Sign in").click()
            page.goto(f"{site}/rounds/{release.round_id}/")
            expect(page.locator("#chart .bars .point")).to_have_count(8, timeout=30_000)  # OOV + 7 buckets
            cookies = {cookie["name"]: cookie for cookie in context.cookies()}
            plotly = next(url for url in static if "/static/vendor/plotly.min." in url)
            plotly_headers = static[plotly].all_headers()
            static_statuses = {url: response.status for url, response in static.items()}
        finally:
            context.close()
        assert cookies["sessionid"]["secure"] and cookies["csrftoken"]["secure"]
        assert all(url.startswith(site) or url.startswith(("data:", "blob:")) for url in requested), requested
        assert set(static_statuses.values()) == {200}, static_statuses
        # Collected under a name with its content's hash, gzipped, cached by browsers for a year.
        assert re.search(r"/static/vendor/plotly\.min\.[0-9a-f]{12}\.js$", plotly), plotly
        assert plotly_headers["content-encoding"] == "gzip"
        assert "max-age=315360000" in plotly_headers["cache-control"] and "immutable" in plotly_headers["cache-control"]

        # ---- the metrics: the web process and the worker's, added up (multiprocess mode)
        def metrics_page() -> str:
            return get(f"{site}/metrics")[2].decode()

        shards = analysis.fleet.shards.count()
        # beat schedules the reaper every 2 s and the worker runs it: counted in the worker's processes.
        web.wait_for(
            lambda: metric(metrics_page(), "pfs_tasks_total", task="analyses.tasks.reap_rounds", state="SUCCESS") >= 1,
            timeout=60,
            what="a reaper run scheduled by beat and counted from the worker",
        )
        text = metrics_page()
        assert metric(text, "pfs_rounds_total", event="started") == 1
        assert metric(text, "pfs_rounds_total", event="released") == 1
        assert metric(text, "pfs_task_duration_seconds_count", task="analyses.tasks.run_shard") == shards
        assert metric(text, "pfs_tasks_total", task="analyses.tasks.run_shard", state="SUCCESS") == shards
        assert (
            metric(
                text,
                "pfs_http_request_duration_seconds_count",
                route="api/rounds/<int:pk>/",
                method="GET",
                status="200",
            )
            >= 1
        )
        assert metric(text, "pfs_http_request_duration_seconds_count", route="static", method="GET", status="200") >= 1
        assert f'pfs_task_queue_depth{{queue="{documented.get("PFS_TASK_QUEUE", "celery")}"}}' in text

        # ---- the logs: every line of the web process is JSON; the request id on the app's and nginx's
        web_lines = [json.loads(line) for line in web.output().splitlines() if line.strip()]
        [line] = [line for line in web_lines if line.get("request_id") == "prod-42"]
        assert (line["logger"], line["route"], line["status"]) == ("pfs.http", "api/analyses/", 200)
        assert "request_id=prod-42" in (tmp_path / "access.log").read_text()
        assert any(
            json.loads(line).get("message", "").startswith("Scheduler: Sending due task reap-stuck-rounds")
            for line in beat.output().splitlines()
            if line.startswith("{")
        ), beat.output()[-3000:]

        # ---- the worker's health check, then readiness without a worker
        def worker_health() -> subprocess.CompletedProcess:
            return subprocess.run(
                [sys.executable, "manage.py", "worker_health", "--timeout", "2"],
                cwd=ROOT,
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
            )

        healthy = worker_health()
        assert healthy.returncode == 0 and healthy.stdout.startswith("ok: "), healthy.stdout + healthy.stderr
        worker.stop()
        status, _, body = get(f"{site}/readyz")
        assert status == 503, body
        checks = json.loads(body)["checks"]
        assert checks["database"]["ok"] and checks["redis"]["ok"] and not checks["workers"]["ok"]
        assert "no Celery worker answered" in checks["workers"]["error"]
        unhealthy = worker_health()
        assert unhealthy.returncode == 1 and "no Celery worker answered" in unhealthy.stderr
        assert services.http_status(f"{site}/healthz") == 200  # alive all the same
    finally:
        for process in processes.values():
            process.stop()
        redis_server.kill()
