"""Register real devices in a fleet of kind 'devices' and write their credentials to a file.

    manage.py device_register --fleet phones --count 100 --out creds.json

The file holds each device's id and secret, the leader's URL (``server``) and the helper's
(``helper``, from --helper or the setting HELPER_URL), where the SDK fetches each aggregator's own
key (docs/devices-sdk.md); the server keeps only the secret's hash, so the file is the one copy. Bad input exits with code 2 and changes nothing.
"""

from __future__ import annotations

import getpass
import json
import os
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from devices.credentials import RegistrationInvalid, devices_register


class Command(BaseCommand):
    help = "Register real devices in a 'devices' fleet (created if new); write their credentials to --out."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--fleet", required=True, help="the fleet's name (letters, digits, - and _)")
        parser.add_argument("--count", type=int, required=True, help="how many devices to register")
        parser.add_argument("--out", required=True, help="the credentials file to write (must not exist)")
        parser.add_argument("--server", default="", help="the server's URL, written into the file for the SDK")
        parser.add_argument(
            "--helper",
            default="",
            help="the helper aggregator's URL, written into the file for the SDK (default: the setting HELPER_URL)",
        )

    def handle(self, *args: object, **options: object) -> None:
        out = Path(options["out"])
        problems = []
        helper = (options["helper"] or settings.HELPER_URL).rstrip("/")
        if not helper.startswith(("http://", "https://")):
            problems.append(f"helper: must be the helper aggregator's http:// or https:// URL, not {helper!r}")
        if out.exists():
            problems.append(f"out: {out} already exists; the secrets in it would be lost")
        elif not out.parent.is_dir():
            problems.append(f"out: the folder {out.parent} does not exist")
        if problems:
            raise CommandError(self._invalid(problems), returncode=2)
        try:
            fleet, issued = devices_register(
                fleet_name=options["fleet"], count=options["count"], registered_by=f"cli:{getpass.getuser()}"
            )
        except RegistrationInvalid as error:
            raise CommandError(self._invalid(error.errors), returncode=2) from error
        content = {
            "server": options["server"],
            # The device fetches the helper's key from the helper itself (pfs_device.sdk.keys).
            "helper": helper,
            "fleet": fleet.name,
            "devices": [credential.as_json() for credential in issued],
        }
        # Owner-only from the first byte: the file holds secrets.
        descriptor = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w") as file:
            json.dump(content, file, indent=1)
            file.write("\n")
        self.stdout.write(
            f"registered {len(issued):,} devices in fleet {fleet.name} ({fleet.size:,} in all); credentials in {out}"
        )

    @staticmethod
    def _invalid(problems: list[str]) -> str:
        lines = "\n".join(f"  {problem}" for problem in problems)
        return f"invalid input, nothing was changed:\n{lines}"
