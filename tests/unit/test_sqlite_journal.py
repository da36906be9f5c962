"""The embedded default's SQLite database writes through a write-ahead log (pfs_web/settings.py)."""

from __future__ import annotations

import pytest
from django.db import connection


def test_the_sqlite_database_journals_to_a_write_ahead_log(db) -> None:
    if connection.vendor != "sqlite":
        pytest.skip("the write-ahead log is the SQLite default's setting; this run uses another database")
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA journal_mode")
        assert cursor.fetchone()[0] == "wal"
        # The log does not trade durability away: every commit is still synced.
        cursor.execute("PRAGMA synchronous")
        assert cursor.fetchone()[0] == 2  # FULL
