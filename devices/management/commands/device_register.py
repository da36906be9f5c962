"""Register attested devices in a fleet of kind 'devices' and write their credentials to a file.

    manage.py device_register --fleet phones --attestations attestations.json --out creds.json

--attestations: {"attestations": [...]}, as the attestation authority's ``attestation_sign`` wrote
them: one device per attestation, each the authority's signature on the device's own key (a device
without one gets no token from the issuer, pfs_device.attestation). The file holds each device's id,
secret and attestation, the leader's URL (``server``) and the helper's
(``helper``, from --helper or the setting HELPER_URL), where the SDK fetches each aggregator's own
key (docs/devices-sdk.md), and the Oblivious HTTP relay its uploads go through (``relay``, from
--relay or the setting RELAY_URL; --no-relay for none); the server keeps only the secret's hash, so the file is the one copy. Bad input exits with code 2 and changes nothing.
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
        parser.add_argument(
            "--attestations", required=True, help="the devices' attestations, JSON {'attestations': [...]}"
        )
        parser.add_argument("--out", required=True, help="the credentials file to write (must not exist)")
        parser.add_argument("--server", default="", help="the server's URL, written into the file for the SDK")
        parser.add_argument(
            "--helper",
            default="",
            help="the helper aggregator's URL, written into the file for the SDK (default: the setting HELPER_URL)",
        )

        relay = parser.add_mutually_exclusive_group()
        relay.add_argument(
            "--relay",
            default="",
            help="the Oblivious HTTP relay's URL, written into the file for the SDK (default: the setting RELAY_URL)",
        )
        relay.add_argument(
            "--no-relay", action="store_true", help="name no relay: the devices upload to the leader directly"
        )

    def handle(self, *args: object, **options: object) -> None:
        out = Path(options["out"])
        problems = []
        helper = (options["helper"] or settings.HELPER_URL).rstrip("/")
        if not helper.startswith(("http://", "https://")):
            problems.append(f"helper: must be the helper aggregator's http:// or https:// URL, not {helper!r}")
        relay = None if options["no_relay"] else (options["relay"] or settings.RELAY_URL)
        if relay is not None and not relay.startswith(("http://", "https://")):
            problems.append(f"relay: must be the relay's http:// or https:// URL, not {relay!r}")
        if out.exists():
            problems.append(f"out: {out} already exists; the secrets in it would be lost")
        elif not out.parent.is_dir():
            problems.append(f"out: the folder {out.parent} does not exist")
        attestations = self._attestations(Path(options["attestations"]), problems)
        if problems:
            raise CommandError(self._invalid(problems), returncode=2)
        try:
            fleet, issued = devices_register(
                fleet_name=options["fleet"], attestations=attestations, registered_by=f"cli:{getpass.getuser()}"
            )
        except RegistrationInvalid as error:
            raise CommandError(self._invalid(error.errors), returncode=2) from error
        content = {
            "server": options["server"],
            # The device fetches the helper's key from the helper itself (pfs_device.sdk.keys).
            "helper": helper,
            # The device's uploads go through it (pfs_device.sdk.relay); None: directly.
            "relay": relay and relay.rstrip("/"),
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
    def _attestations(path: Path, problems: list[str]) -> list:
        try:
            content = json.loads(path.read_text())
        except (OSError, ValueError) as error:
            problems.append(f"attestations: cannot read {path}: {error}")
            return []
        attestations = content.get("attestations") if isinstance(content, dict) else None
        if not isinstance(attestations, list):
            problems.append(f"attestations: {path} must hold 'attestations', a list")
            return []
        return attestations

    @staticmethod
    def _invalid(problems: list[str]) -> str:
        lines = "\n".join(f"  {problem}" for problem in problems)
        return f"invalid input, nothing was changed:\n{lines}"
