"""Create the PostgreSQL database DATABASE_URL names if it does not exist yet (SQLite creates its
file by itself). `make setup` runs it first, so that a new DATABASE_URL works at once."""

from __future__ import annotations

import psycopg
from django.core.management.base import BaseCommand
from django.db import connection
from psycopg import sql


class Command(BaseCommand):
    help = "Create the PostgreSQL database of DATABASE_URL if it does not exist (nothing for SQLite)."

    def handle(self, *args, **options) -> None:
        if connection.vendor != "postgresql":
            return
        db = connection.settings_dict
        server = {
            "host": db["HOST"] or None,
            "port": db["PORT"] or None,
            "user": db["USER"] or None,
            "password": db["PASSWORD"] or None,
            "connect_timeout": db.get("OPTIONS", {}).get("connect_timeout", 5),
        }
        # The server's maintenance database: the one named does not exist yet.
        with psycopg.connect(dbname="postgres", autocommit=True, **server) as maintenance:
            if maintenance.execute("SELECT 1 FROM pg_database WHERE datname = %s", [db["NAME"]]).fetchone():
                return
            maintenance.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(db["NAME"])))
        self.stdout.write(f"created database {db['NAME']}")
