"""Fleets from the command line: create a synthetic fleet, import one from JSONL, list them.

Bad input exits with code 2, prints every problem, and writes nothing (docs/fleets.md).
"""

from __future__ import annotations

import secrets

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db.models import Count

from devices.fleet_io import MAX_SEED, PRIO3_SHARD_SIZE, FleetInvalid, fleet_create, fleet_import, unix_seconds
from devices.models import Fleet


class Command(BaseCommand):
    help = "Create a synthetic fleet, import a fleet from JSONL, or list the fleets (docs/fleets.md)."

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True, metavar="{create,import,list}")

        create = actions.add_parser("create", help="create a seeded synthetic fleet")
        create.add_argument("--name", required=True, help="name of the new fleet (letters, digits, - and _)")
        create.add_argument("--size", type=int, required=True, help="number of devices")
        create.add_argument("--seed", type=int, help="seed of the generator (default: a fresh one, printed)")
        self._shard_options(create)

        imported = actions.add_parser("import", help="create a fleet from a JSONL file, one device per line")
        imported.add_argument("file", help="path of the JSONL file")
        imported.add_argument("--name", required=True, help="name of the new fleet (letters, digits, - and _)")
        self._shard_options(imported)

        actions.add_parser("list", help="list the fleets: name, devices, shards, source")

    @staticmethod
    def _shard_options(parser: CommandParser) -> None:
        parser.add_argument(
            "--shard-size",
            type=int,
            help=f"devices per shard (default: {settings.PFS_SHARD_SIZE}, or {PRIO3_SHARD_SIZE} with --prio3-reports)",
        )
        parser.add_argument(
            "--now",
            help="the current time as unix seconds or ISO 8601 with offset (default: now); "
            "phrase times are relative to it, so it makes a synthetic fleet reproducible",
        )
        parser.add_argument(
            "--prio3-reports",
            action="store_true",
            help="each simulated device sends its own Prio3 report, verified by both aggregators "
            "(instead of a shard's pre-summed shares; slower)",
        )

    def handle(self, *args: object, **options: object) -> None:
        if options["action"] == "list":
            self._list()
            return
        now = self._now(options["now"])
        try:
            if options["action"] == "create":
                seed = options["seed"] if options["seed"] is not None else secrets.randbelow(MAX_SEED + 1)
                fleet = fleet_create(
                    name=options["name"],
                    size=options["size"],
                    seed=seed,
                    shard_size=self._shard_size(options),
                    now=now,
                    prio3_reports=options["prio3_reports"],
                )
                source = f"seed {seed}"
            else:
                fleet = fleet_import(
                    name=options["name"],
                    path=options["file"],
                    shard_size=self._shard_size(options),
                    now=now,
                    prio3_reports=options["prio3_reports"],
                )
                source = options["file"]
        except FleetInvalid as error:
            lines = "\n".join(f"  {message}" for message in error.errors)
            raise CommandError(f"invalid input, nothing was changed:\n{lines}", returncode=2) from error
        shards = fleet.shards.count()
        self.stdout.write(f"created fleet {fleet.name}: {fleet.size:,} devices in {shards:,} shards ({source})")

    @staticmethod
    def _shard_size(options: dict) -> int:
        if options["shard_size"] is not None:
            return options["shard_size"]
        return min(PRIO3_SHARD_SIZE, settings.PFS_SHARD_SIZE) if options["prio3_reports"] else settings.PFS_SHARD_SIZE

    @staticmethod
    def _now(value: object) -> float | None:
        if value is None:
            return None
        try:
            return float(unix_seconds(value))
        except ValueError as error:
            raise CommandError(f"invalid input, nothing was changed:\n  now: {error}", returncode=2) from error

    def _list(self) -> None:
        fleets = Fleet.objects.annotate(shard_count=Count("shards")).order_by("name")
        rows = [
            (
                fleet.name,
                f"{fleet.size:,}",
                f"{fleet.shard_count:,}",
                "imported" if fleet.seed is None else f"seed {fleet.seed}",
            )
            for fleet in fleets
        ]
        header = ("name", "devices", "shards", "source")
        widths = [max(len(row[column]) for row in [header, *rows]) for column in range(len(header))]
        for row in [header, *rows]:
            self.stdout.write("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
