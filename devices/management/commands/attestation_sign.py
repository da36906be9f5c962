"""The attestation authority's act: attest devices' public keys (pfs_device.attestation).

    manage.py attestation_sign --keys public-keys.json --out attestations.json [--days 365]

--keys: {"keys": [base64 public key, ...]}, as ``python -m pfs_device.sdk.identity`` writes them on the
devices. --out: {"attestations": [...]}, one per key in the same order, for the leader's
``device_register --attestations``. Needs the authority's key (PFS_ATTESTATION_KEY[_FILE]), which
only the authority's host holds. Bad input exits with code 2 and signs nothing.
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from devices.attestation import AuthorityUnavailable, devices_attest
from pfs_device.attestation import AttestationInvalid


class Command(BaseCommand):
    help = "Attest devices' public keys with the attestation authority's key."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--keys", required=True, help="the devices' public keys, JSON {'keys': [...]}")
        parser.add_argument("--out", required=True, help="the attestations file to write (must not exist)")
        parser.add_argument("--days", type=int, default=0, help="days until the attestations expire (0: never)")

    def handle(self, *args: object, **options: object) -> None:
        out = Path(options["out"])
        if out.exists():
            raise CommandError(f"out: {out} already exists; nothing was signed", returncode=2)
        if options["days"] < 0:
            raise CommandError("days: must be 0 (no expiry) or more", returncode=2)
        try:
            content = json.loads(Path(options["keys"]).read_text())
        except (OSError, ValueError) as error:
            raise CommandError(f"keys: cannot read {options['keys']}: {error}", returncode=2) from None
        keys = content.get("keys") if isinstance(content, dict) else None
        if not isinstance(keys, list) or not keys:
            raise CommandError("keys: must hold 'keys', a non-empty list of base64 public keys", returncode=2)
        expires_at = timezone.now() + timedelta(days=options["days"]) if options["days"] else None
        try:
            attestations = devices_attest(public_keys=keys, expires_at=expires_at)
        except (AttestationInvalid, AuthorityUnavailable) as error:
            raise CommandError(f"{error}; nothing was signed", returncode=2) from None
        out.write_text(json.dumps({"attestations": [a.as_json() for a in attestations]}, indent=1) + "\n")
        self.stdout.write(f"attested {len(attestations):,} device keys in {out}")
