"""Run a recipe headless: validate, start a round through the same tasks, wait, print the release."""

from __future__ import annotations

import json
import time

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from analyses.management.commands._json_input import invalid, read_json
from analyses.models import Analysis, Round
from analyses.presenters.releases import release_as_json
from analyses.services.releases import is_walk
from analyses.services.rounds import round_create_and_start, round_progress
from pfs_base.errors import NotAllowed, ValidationFailed


class Command(BaseCommand):
    help = "Run RECIPE.json (Figure 4's format plus a privacy object) and print its release."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("recipe", help="path of the recipe (JSON)")
        parser.add_argument("--analysis", required=True, help="identifier of the analysis to run it in")
        parser.add_argument("--user", default="analyst", help="username of the analyst running it")
        parser.add_argument("--json", action="store_true", help="print the release as JSON")
        parser.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for the release")
        parser.add_argument(
            "--confirm-small-cohorts",
            action="store_true",
            help="start even if some cohorts are expected below the minimum cohort, or the expected noise exceeds what "
            "most buckets can hold (docs/accuracy.md): their devices spend for nothing",
        )

    def handle(self, *args: object, **options: object) -> None:
        content = read_json(options["recipe"])
        analysis = Analysis.objects.filter(identifier=options["analysis"]).first()
        if analysis is None:
            raise CommandError(f"no analysis {options['analysis']!r} (--analysis)", returncode=2)
        user = get_user_model().objects.filter(username=options["user"]).first()
        if user is None or not (user.is_staff or analysis.owner_id == user.pk):
            raise CommandError(f"user {options['user']!r} may not run {analysis.identifier} (--user)", returncode=2)
        try:
            round_ = round_create_and_start(
                analysis=analysis, content=content, user=user, confirm_small_cohorts=options["confirm_small_cohorts"]
            )
        except ValidationFailed as error:
            raise invalid(error) from error
        except NotAllowed as error:
            raise CommandError(str(error), returncode=2) from error

        deadline = time.monotonic() + options["timeout"]
        while True:
            round_.refresh_from_db()
            if round_.is_finished:
                break
            if time.monotonic() > deadline:
                raise CommandError(f"round {round_.pk} did not finish in {options['timeout']} s")
            if not options["json"]:
                progress = round_progress(round_)
                self.stderr.write(f"\r{progress['shards_done']}/{progress['shards_total']} shards", ending="")
            time.sleep(0.2)
        if round_.status != Round.Status.RELEASED:
            raise CommandError(f"round {round_.pk} {round_.get_status_display().lower()}: {round_.error}")
        release = release_as_json(round_.release)
        if options["json"]:
            self.stdout.write(json.dumps(release, indent=2))
            return
        self.stdout.write(
            f"\nround {round_.pk}: {release['reports']:,} reports, min cohort {release['min_cohort']:,}, "
            f"epsilon spent {release['epsilon_spent']}"
        )
        if is_walk(release):  # a Poplar1 walk's release: the words found, not buckets
            walk = release["walk"]
            self.stdout.write(f"{len(walk['words']):,} words found over {len(walk['levels'])} levels")
            for word in walk["words"]:
                # A word that fills every byte may be cut from a longer one: it ends with "…".
                shown = word["word"] if word["complete"] else f"{word['word']}…"
                self.stdout.write(f"  {shown:>20}  {word['count']:>10,} ± {1.96 * word['standard_error']:.1f}")
            return
        for batch in release["batches"]:
            if batch["suppressed"]:
                self.stdout.write(f"cohort {batch['cohort'] or 'all'}: fewer than {batch['min_cohort']:,} reports")
                self.stdout.write(f"  suppressed: {batch['reason']}")
                continue
            self.stdout.write(f"cohort {batch['cohort'] or 'all'}: {batch['reports']:,} reports")
            for bucket in batch["buckets"]:
                self.stdout.write(
                    f"  {bucket['label']:>12}  {bucket['estimate']:>10.1f} ± {1.96 * bucket['standard_error']:.1f}"
                )
