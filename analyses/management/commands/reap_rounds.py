"""Resume rounds stuck after their tasks were lost, or fail them when too old (analyses.reaper)."""

from __future__ import annotations

import json
from datetime import timedelta

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from analyses.reaper import rounds_reap


class Command(BaseCommand):
    help = "Resume rounds with no progress for --stuck-after seconds; fail those older than --fail-after."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--stuck-after", type=float, default=settings.PFS_ROUND_STUCK_AFTER, help="seconds")
        parser.add_argument("--fail-after", type=float, default=settings.PFS_ROUND_FAIL_AFTER, help="seconds")
        parser.add_argument("--json", action="store_true", help="print the rounds resumed and failed as JSON")

    def handle(self, *args: object, **options: object) -> None:
        stuck, fail = options["stuck_after"], options["fail_after"]
        if not (stuck > 0 and fail > 0):
            raise CommandError("--stuck-after and --fail-after must be positive numbers of seconds", returncode=2)
        reaped = rounds_reap(stuck_after=timedelta(seconds=stuck), fail_after=timedelta(seconds=fail))
        if options["json"]:
            self.stdout.write(
                json.dumps({"resumed": reaped.resumed, "failed": reaped.failed, "advanced": reaped.advanced})
            )
            return
        self.stdout.write(
            f"resumed {len(reaped.resumed)} round(s) {reaped.resumed or ''}; failed {len(reaped.failed)} "
            f"{reaped.failed or ''}; advanced {len(reaped.advanced)} adaptive run(s) {reaped.advanced or ''}; "
            f"closed {len(reaped.closed)} round(s) on real devices {reaped.closed or ''}"
        )
