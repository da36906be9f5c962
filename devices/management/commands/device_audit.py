"""Show one simulated device's audit log: each task, its decision (answered / refused and why), epsilon spent."""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError, CommandParser

from devices.audit import DeviceNotFound, device_audit
from devices.models import Fleet


class Command(BaseCommand):
    help = "Print the audit log of one device of a fleet."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("device", help="device id, e.g. d42")
        parser.add_argument("--fleet", required=True, help="fleet name")
        parser.add_argument("--json", action="store_true", help="print JSON")

    def handle(self, *args: object, **options: object) -> None:
        fleet = Fleet.objects.filter(name=options["fleet"]).first()
        if fleet is None:
            raise CommandError(f"no fleet {options['fleet']!r} (--fleet)", returncode=2)
        try:
            entries = device_audit(fleet=fleet, device_id=options["device"])
        except DeviceNotFound as error:
            raise CommandError(str(error), returncode=2) from error
        if options["json"]:
            self.stdout.write(json.dumps([e.as_json() for e in entries], indent=2))
            return
        if not entries:
            self.stdout.write(f"device {options['device']} has received no task")
        for e in entries:
            self.stdout.write(
                f"{e.at:%Y-%m-%d %H:%M:%S}  {e.task_key}  {e.query!r} {e.mechanism} "
                f"eps0={e.epsilon0:g} eps={e.epsilon:g}  {e.decision}  spent {e.epsilon_spent:g}"
            )
