"""Policy as code: create an analysis from a JSON spec, optionally approving it as the officer."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from analyses.management.commands._json_input import invalid, read_json
from analyses.services.policy import analysis_approve, analysis_create
from pfs_base.errors import ValidationFailed


class Command(BaseCommand):
    help = "Create an analysis from SPEC.json (format: docs/formats.md)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("spec", help="path of the analysis spec (JSON)")
        parser.add_argument("--approve", action="store_true", help="approve it as the privacy officer")
        parser.add_argument("--owner", default="analyst", help="username of the analyst who owns it")
        parser.add_argument("--officer", default="officer", help="username of the approving privacy officer")

    def handle(self, *args: object, **options: object) -> None:
        spec = read_json(options["spec"])
        users = get_user_model().objects
        owner = users.filter(username=options["owner"]).first()
        if owner is None:
            raise CommandError(f"no user {options['owner']!r} (--owner)", returncode=2)
        officer = None
        if options["approve"]:
            officer = users.filter(username=options["officer"], is_staff=True).first()
            if officer is None:
                raise CommandError(f"no privacy officer {options['officer']!r} (--officer)", returncode=2)
        try:
            with transaction.atomic():
                analysis = analysis_create(spec=spec, owner=owner)
                if officer is not None:
                    analysis_approve(analysis=analysis, officer=officer)
        except ValidationFailed as error:
            raise invalid(error) from error
        self.stdout.write(f"created analysis {analysis.identifier} ({analysis.get_status_display()})")
