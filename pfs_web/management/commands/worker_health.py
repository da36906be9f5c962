"""Exit 0 when a Celery worker answers a ping, 1 when none does: a health check for monitoring,
systemd timers and container orchestrators. ``--worker`` asks one worker by name (celery@host)."""

from __future__ import annotations

import json

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from pfs_base.health import workers_check


class Command(BaseCommand):
    help = "Exit 0 if a Celery worker (or the one named) answers a ping, 1 if none does."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--worker", action="append", metavar="NAME", help="ask only this worker (celery@host)")
        parser.add_argument("--timeout", type=float, default=None, help="seconds to wait (default PFS_READYZ_TIMEOUT)")
        parser.add_argument("--json", action="store_true", help="print the result as JSON")

    def handle(self, *args, **options) -> None:
        if settings.PFS_TASK_MODE != "celery":
            raise CommandError(f"no worker to ask: tasks run {settings.PFS_TASK_MODE} (set REDIS_URL)", returncode=1)
        timeout = options["timeout"] or settings.PFS_READYZ_TIMEOUT
        result = workers_check(timeout=timeout, destination=options["worker"])
        if options["json"]:
            self.stdout.write(json.dumps(result, sort_keys=True))
        if not result["ok"]:
            raise CommandError(result["error"], returncode=1)
        if not options["json"]:
            self.stdout.write(f"ok: {', '.join(result['answered'])} answered in {result['ms']:g} ms")
