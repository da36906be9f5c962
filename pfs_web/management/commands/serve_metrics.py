"""Serve this host's Prometheus counts on a port of their own: for a host that runs workers and no
web process (docs/deployment.md, more hosts). It reads PROMETHEUS_MULTIPROC_DIR, where the host's
Celery workers and beat write their counts, as /metrics does on a web host."""

from __future__ import annotations

import os
import threading

from django.core.management.base import BaseCommand, CommandError


class Command(BaseCommand):
    help = "Serve the counts in PROMETHEUS_MULTIPROC_DIR over HTTP (for hosts without a web process)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--port", type=int, default=9808)
        parser.add_argument("--bind", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")

    def handle(self, *args, **options) -> None:
        if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            raise CommandError("PROMETHEUS_MULTIPROC_DIR is not set: the workers of this host write no counts to serve")
        from prometheus_client import CollectorRegistry, start_http_server
        from prometheus_client.multiprocess import MultiProcessCollector

        registry = CollectorRegistry()
        MultiProcessCollector(registry)
        start_http_server(options["port"], addr=options["bind"], registry=registry)
        self.stdout.write(
            f"serving the counts of {os.environ['PROMETHEUS_MULTIPROC_DIR']} on {options['bind']}:{options['port']}"
        )
        self.stdout.flush()
        threading.Event().wait()  # the server runs in its own thread until the process is stopped
