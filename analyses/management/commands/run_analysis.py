"""Run an adaptive analysis headless: every round through the same tasks, then print every level."""

from __future__ import annotations

import json
import time

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from analyses.adaptive.chain import adaptive_start
from analyses.adaptive.presenters import adaptive_output
from analyses.management.commands._json_input import invalid, read_json
from analyses.models import AdaptiveRun
from pfs_base.errors import NotAllowed, ValidationFailed


class Command(BaseCommand):
    help = "Run SPEC.json (an n-gram discovery or bucket refinement, docs/adaptive.md) and print its levels."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("spec", help="path of the adaptive analysis spec (JSON)")
        parser.add_argument("--user", default="analyst", help="username of the analyst running it")
        parser.add_argument("--json", action="store_true", help="print the result as JSON")
        parser.add_argument("--timeout", type=float, default=3600.0, help="seconds to wait for the last round")

    def handle(self, *args: object, **options: object) -> None:
        spec = read_json(options["spec"])
        user = get_user_model().objects.filter(username=options["user"]).first()
        if user is None:
            raise CommandError(f"no user {options['user']!r} (--user)", returncode=2)
        try:
            run = adaptive_start(spec=spec, user=user)
        except ValidationFailed as error:
            raise invalid(error) from error
        except NotAllowed as error:
            raise CommandError(str(error), returncode=2) from error

        deadline = time.monotonic() + options["timeout"]
        shown = 0
        while True:
            run.refresh_from_db()
            if not options["json"]:
                for level in run.levels[shown:]:
                    self._print_level(run, level)
                shown = len(run.levels)
            if run.is_finished or run.status == AdaptiveRun.Status.PAUSED:
                break
            if time.monotonic() > deadline:
                raise CommandError(f"adaptive run {run.pk} did not finish in {options['timeout']} s")
            time.sleep(0.2)
        output = adaptive_output(run)
        if options["json"]:
            self.stdout.write(json.dumps(output, indent=2))
        else:
            self.stdout.write(f"{run.get_status_display()}: {run.stop_reason}")
            comparison = output.get("comparison")
            if comparison and comparison.get("available"):
                for method in ("interactive", "static"):
                    m = comparison[method]
                    self.stdout.write(
                        f"{method:>11}: recall {m['recall']:.2f}, precision {m['precision']:.2f} "
                        f"of the true top {comparison['top_k']} ({m['rounds']} rounds)"
                    )
        if run.status == AdaptiveRun.Status.FAILED:
            raise CommandError(f"adaptive run {run.pk} failed: {run.stop_reason}")

    def _print_level(self, run: AdaptiveRun, level: dict) -> None:
        if run.kind == AdaptiveRun.Kind.BUCKET_REFINEMENT:
            self.stdout.write(f"round {level['round']}: {level['buckets']} buckets, split {', '.join(level['split'])}")
            return
        self.stdout.write(f"length {level['length']}: {level['buckets']:,} buckets, {len(level['kept'])} kept")
        for kept in level["kept"]:
            self.stdout.write(f"  {kept['ngram']:<32} {kept['estimate']:>10.1f} ± {1.96 * kept['standard_error']:.1f}")
