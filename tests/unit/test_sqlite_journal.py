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


def test_a_new_sqlite_database_stores_its_rows_in_16_kib_pages(db) -> None:
    # Shards are blobs of a MiB and more: fewer, larger overflow pages to log and checkpoint.
    if connection.vendor != "sqlite":
        pytest.skip("the page size is the SQLite default's setting; this run uses another database")
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA page_size")
        assert cursor.fetchone()[0] == 16_384
