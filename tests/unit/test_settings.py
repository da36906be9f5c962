"""Every settings module imports, and bad environment values stop start-up with a clear error."""

from __future__ import annotations

import importlib
import sys

import pytest
from django.core.exceptions import ImproperlyConfigured


def load_settings(monkeypatch, **env):
    for key in ("DATABASE_URL", "REDIS_URL", "PFS_TASK_MODE", "DEBUG", "SECRET_KEY", "PFS_SHARD_SIZE"):
        monkeypatch.delenv(key, raising=False)
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
    ],
)
def test_bad_environment_values_raise_improperly_configured(monkeypatch, env, message) -> None:
    with pytest.raises(ImproperlyConfigured, match=message):
        load_settings(monkeypatch, **env)
