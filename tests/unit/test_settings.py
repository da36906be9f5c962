"""Every settings module imports, and bad environment values stop start-up with a clear error.

Settings come from the environment, then from the checkout's .env (PFS_ENV_FILE names another);
the environment always wins.
"""

from __future__ import annotations

import base64
import importlib
import os
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

# Every variable a test here sets, cleared first so that none leaks in from the shell or make.
ENV_KEYS = (
    "DATABASE_URL",
    "REDIS_URL",
    "PFS_TASK_MODE",
    "DEBUG",
    "SECRET_KEY",
    "PFS_SHARD_SIZE",
    "SECURE_PROXY_SSL_HEADER",
    "SECURE_SSL_REDIRECT",
    "SECURE_HSTS_SECONDS",
    "SESSION_COOKIE_SECURE",
    "PFS_PROBE_NETWORKS",
    "PFS_PROBE_TOKEN",
    "CSRF_COOKIE_SECURE",
    "CSRF_TRUSTED_ORIGINS",
    "PROMETHEUS_MULTIPROC_DIR",
    "LOG_LEVEL",
    "LOG_FORMAT",
    "SENTRY_DSN",
    "PFS_ENV_FILE",
    "ISSUER_DATABASE_URL",
    "HELPER_DATABASE_URL",
    *(f"PFS_{role}_KEY{suffix}" for role in ("LEADER", "HELPER", "ISSUER") for suffix in ("", "_FILE")),
)


def load_settings(monkeypatch, **env):
    for key in ENV_KEYS:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("PFS_ENV_FILE", os.devnull)  # no .env unless a test writes one
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    sys.modules.pop("pfs_web.settings", None)
    try:
        return importlib.import_module("pfs_web.settings")
    finally:
        sys.modules.pop("pfs_web.settings", None)


@pytest.mark.parametrize("module", ["pfs_web.settings", "pfs_web.settings_test"])
def test_every_settings_module_imports(monkeypatch, module) -> None:
    monkeypatch.setenv("SECRET_KEY", "x")
    sys.modules.pop(module, None)
    assert importlib.import_module(module).ROOT_URLCONF == "pfs_web.urls"


def test_embedded_default_is_sqlite_with_in_process_tasks(monkeypatch) -> None:
    settings = load_settings(monkeypatch, DEBUG="1")
    assert settings.DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3"
    assert settings.PFS_TASK_MODE == "thread" and settings.CELERY_TASK_ALWAYS_EAGER


def test_redis_url_selects_a_celery_worker_and_database_url_postgres(monkeypatch) -> None:
    settings = load_settings(
        monkeypatch,
        SECRET_KEY="s",
        REDIS_URL="redis://127.0.0.1:6379/3",
        DATABASE_URL="postgres://u@127.0.0.1:5432/pfs",
    )
    assert settings.PFS_TASK_MODE == "celery" and not settings.CELERY_TASK_ALWAYS_EAGER
    assert settings.CELERY_BROKER_URL == "redis://127.0.0.1:6379/3"
    assert settings.DATABASES["default"]["NAME"] == "pfs"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({}, "SECRET_KEY"),
        ({"SECRET_KEY": "s", "DEBUG": "maybe"}, "DEBUG"),
        ({"SECRET_KEY": "s", "PFS_SHARD_SIZE": "0"}, "PFS_SHARD_SIZE"),
        ({"SECRET_KEY": "s", "PFS_TASK_MODE": "celery"}, "REDIS_URL"),
        ({"SECRET_KEY": "s", "PFS_TASK_MODE": "fast"}, "PFS_TASK_MODE"),
        ({"SECRET_KEY": "s", "SECURE_PROXY_SSL_HEADER": "X-Forwarded-Proto"}, "SECURE_PROXY_SSL_HEADER"),
        ({"SECRET_KEY": "s", "SECURE_HSTS_SECONDS": "a year"}, "SECURE_HSTS_SECONDS"),
        ({"SECRET_KEY": "s", "CSRF_TRUSTED_ORIGINS": "pfs.example.org"}, "CSRF_TRUSTED_ORIGINS"),
        ({"SECRET_KEY": "s", "PROMETHEUS_MULTIPROC_DIR": "/nonexistent/metrics"}, "PROMETHEUS_MULTIPROC_DIR"),
        ({"SECRET_KEY": "s", "LOG_LEVEL": "LOUD"}, "LOG_LEVEL"),
        ({"SECRET_KEY": "s", "LOG_FORMAT": "xml"}, "LOG_FORMAT"),
        ({"SECRET_KEY": "s", "PFS_LEADER_KEY": "not base64!"}, "PFS_LEADER_KEY: a key must be base64"),
        ({"SECRET_KEY": "s", "PFS_HELPER_KEY": "c2hvcnQ="}, "PFS_HELPER_KEY: a key must be 32 bytes"),
        ({"SECRET_KEY": "s", "PFS_ISSUER_KEY": "A" * 43 + "=", "PFS_ISSUER_KEY_FILE": "/k"}, "not both"),
    ],
)
def test_bad_environment_values_raise_improperly_configured(monkeypatch, env, message) -> None:
    with pytest.raises(ImproperlyConfigured, match=message):
        load_settings(monkeypatch, **env)


def test_the_env_file_fills_what_the_environment_does_not_set(monkeypatch, tmp_path: Path) -> None:
    env_file = tmp_path / ".env"
    env_file.write_text(
        "# written by make setup\n\nDEBUG=1\nexport SECRET_KEY='from-the-file'\nPFS_SHARD_SIZE=\"250\"\n"
    )
    settings = load_settings(monkeypatch, PFS_ENV_FILE=str(env_file), PFS_SHARD_SIZE="500")
    assert settings.DEBUG is True and settings.SECRET_KEY == "from-the-file"  # noqa: S105
    assert settings.PFS_SHARD_SIZE == 500  # the environment wins over the file


def test_without_an_env_file_debug_is_off_and_a_secret_key_is_required(monkeypatch, tmp_path: Path) -> None:
    with pytest.raises(ImproperlyConfigured, match="SECRET_KEY must be set"):
        load_settings(monkeypatch, PFS_ENV_FILE=str(tmp_path / "absent.env"))


def test_a_malformed_env_file_line_is_named(monkeypatch, tmp_path: Path) -> None:
    env_file = tmp_path / ".env"
    env_file.write_text("DEBUG=1\nthis is not a setting\n")
    with pytest.raises(ImproperlyConfigured, match=r"\.env, line 2"):
        load_settings(monkeypatch, PFS_ENV_FILE=str(env_file))


def test_every_https_setting_comes_from_the_environment(monkeypatch) -> None:
    settings = load_settings(
        monkeypatch,
        SECRET_KEY="s",
        SECURE_PROXY_SSL_HEADER="X-Forwarded-Proto: https",
        SECURE_SSL_REDIRECT="1",
        SECURE_HSTS_SECONDS="31536000",
        SESSION_COOKIE_SECURE="true",
        CSRF_COOKIE_SECURE="yes",
        CSRF_TRUSTED_ORIGINS="https://pfs.example.org, https://pfs-staging.example.org",
    )
    assert settings.SECURE_PROXY_SSL_HEADER == ("HTTP_X_FORWARDED_PROTO", "https")
    assert settings.SECURE_SSL_REDIRECT and settings.SESSION_COOKIE_SECURE and settings.CSRF_COOKIE_SECURE
    assert settings.SECURE_HSTS_SECONDS == 31_536_000
    assert settings.CSRF_TRUSTED_ORIGINS == ["https://pfs.example.org", "https://pfs-staging.example.org"]


def test_with_debug_off_hsts_and_secure_cookies_are_on_by_default_but_no_redirect(monkeypatch) -> None:
    """Secure unless told otherwise; the redirect (and the proxy's header) are the deployment's to
    set, so that `make serve` still answers plain HTTP and a proxy that says nothing gets no loop."""
    settings = load_settings(monkeypatch, SECRET_KEY="s")
    assert settings.SECURE_PROXY_SSL_HEADER is None and not settings.SECURE_SSL_REDIRECT
    assert settings.SESSION_COOKIE_SECURE and settings.CSRF_COOKIE_SECURE
    assert settings.SECURE_HSTS_SECONDS == 31_536_000
    opted_out = load_settings(
        monkeypatch, SECRET_KEY="s", SESSION_COOKIE_SECURE="0", CSRF_COOKIE_SECURE="0", SECURE_HSTS_SECONDS="0"
    )
    assert not opted_out.SESSION_COOKIE_SECURE and not opted_out.CSRF_COOKIE_SECURE
    assert opted_out.SECURE_HSTS_SECONDS == 0


def test_with_debug_on_the_https_settings_are_off_by_default(monkeypatch) -> None:
    settings = load_settings(monkeypatch, DEBUG="1")
    assert not settings.SESSION_COOKIE_SECURE and not settings.CSRF_COOKIE_SECURE
    assert settings.SECURE_HSTS_SECONDS == 0 and not settings.SECURE_SSL_REDIRECT


def test_the_probes_readers_default_to_loopback_and_a_bad_network_stops_start_up(monkeypatch) -> None:
    settings = load_settings(monkeypatch, SECRET_KEY="s")
    assert settings.PFS_PROBE_NETWORKS == ["127.0.0.0/8", "::1/128"] and settings.PFS_PROBE_TOKEN is None
    configured = load_settings(monkeypatch, SECRET_KEY="s", PFS_PROBE_NETWORKS="10.0.0.0/8, 2001:db8::/32")
    assert configured.PFS_PROBE_NETWORKS == ["10.0.0.0/8", "2001:db8::/32"]
    with pytest.raises(ImproperlyConfigured, match="PFS_PROBE_NETWORKS"):
        load_settings(monkeypatch, SECRET_KEY="s", PFS_PROBE_NETWORKS="10.0.0.0/33")


def test_debug_off_serves_hashed_compressed_static_files_and_debug_on_the_files_as_they_are(monkeypatch) -> None:
    production = load_settings(monkeypatch, SECRET_KEY="s")
    assert production.STORAGES["staticfiles"]["BACKEND"] == "whitenoise.storage.CompressedManifestStaticFilesStorage"
    development = load_settings(monkeypatch, DEBUG="1")
    assert development.STORAGES["staticfiles"]["BACKEND"].endswith("StaticFilesStorage")
    assert "Manifest" not in development.STORAGES["staticfiles"]["BACKEND"]


@pytest.mark.parametrize("role", ["issuer", "helper"])
def test_the_issuer_and_the_helper_each_have_a_store_of_their_own_beside_the_default_one(monkeypatch, role) -> None:
    embedded = load_settings(monkeypatch, SECRET_KEY="s")
    assert Path(embedded.DATABASES[role]["NAME"]).name == f"{role}.sqlite3"
    assert Path(embedded.DATABASES[role]["NAME"]).parent == Path(embedded.DATABASES["default"]["NAME"]).parent
    elsewhere = load_settings(monkeypatch, SECRET_KEY="s", DATABASE_URL="sqlite:////tmp/bench/b.sqlite3")
    assert elsewhere.DATABASES[role]["NAME"] == f"/tmp/bench/{role}.sqlite3"  # beside it, not in this checkout
    tests = {alias: database["TEST"]["NAME"] for alias, database in embedded.DATABASES.items()}
    assert len(set(tests.values())) == len(tests) == 3  # every store its own test file
    postgres = load_settings(monkeypatch, SECRET_KEY="s", DATABASE_URL="postgres://u@db:5432/pfs?sslmode=require")
    assert (postgres.DATABASES[role]["NAME"], postgres.DATABASES[role]["HOST"]) == (f"pfs_{role}", "db")
    assert postgres.DATABASES[role]["OPTIONS"]["sslmode"] == "require"
    apart = load_settings(
        monkeypatch,
        SECRET_KEY="s",
        DATABASE_URL="postgres://u@db/pfs",
        **{f"{role.upper()}_DATABASE_URL": "postgres://i@vault/tokens"},
    )
    assert (apart.DATABASES[role]["NAME"], apart.DATABASES[role]["HOST"]) == ("tokens", "vault")
    other = "helper" if role == "issuer" else "issuer"
    assert apart.DATABASES[other]["NAME"] == f"pfs_{other}"
    assert apart.DATABASE_ROUTERS == ["pfs_base.db_router.StoreRouter"]


def test_private_keys_come_from_the_environment_current_first(monkeypatch) -> None:
    new, old = b"\x01" * 32, b"\x02" * 32
    settings = load_settings(
        monkeypatch,
        SECRET_KEY="s",
        PFS_LEADER_KEY=f"{base64.b64encode(new).decode()}, {base64.b64encode(old).decode()}",
        PFS_HELPER_KEY_FILE="/etc/pfs/helper.key",
    )
    assert settings.PFS_KEYS == {"leader": [new, old], "helper": [], "issuer": []}
    assert settings.PFS_KEY_FILES == {"leader": None, "helper": "/etc/pfs/helper.key", "issuer": None}
