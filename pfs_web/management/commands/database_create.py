"""Create the PostgreSQL databases DATABASE_URL, ISSUER_DATABASE_URL and HELPER_DATABASE_URL name if they do not exist
yet (SQLite creates its file by itself). `make setup` runs it first, so that a new DATABASE_URL
works at once."""

from __future__ import annotations

import psycopg
from django.core.management.base import BaseCommand
from django.db import connections
from psycopg import sql


class Command(BaseCommand):
    help = "Create the PostgreSQL databases of every store this process has (the leader: default, issuer; the helper's service: helper) that do not exist (nothing for SQLite)."

    def handle(self, *args, **options) -> None:
        for alias in connections:
            if connections[alias].vendor == "postgresql":
                self._create(connections[alias].settings_dict)

    def _create(self, db: dict) -> None:
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
