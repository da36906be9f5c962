"""PostgreSQL keeps a pending report's body out of line, uncompressed (aggregation migration 0012):
pglz cannot shrink sealed shares in base64 and spent about 0.13 ms of the server's CPU a body
finding that out (bench/results/upload_prio3.md)."""

from __future__ import annotations

import pytest
from django.db import connection

from aggregation.models import PendingReport


def test_postgresql_stores_pending_bodies_without_trying_to_compress_them(db) -> None:
    if connection.vendor != "postgresql":
        pytest.skip("STORAGE is PostgreSQL's setting; SQLite has none")
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT attstorage FROM pg_attribute WHERE attrelid = %s::regclass AND attname = 'body'",
            [PendingReport._meta.db_table],
        )
        assert cursor.fetchone()[0] == "e"  # EXTERNAL: out of line, never compressed
