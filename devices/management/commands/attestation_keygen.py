"""Make the attestation authority's key (pfs_device.attestation), on the authority's host.

    manage.py attestation_keygen --out attestation.key

Writes the Ed25519 private seed (base64, owner-only) to --out for PFS_ATTESTATION_KEY_FILE, and prints
the public key for PFS_ATTESTATION_PUBLIC_KEY, which the leader and the issuer are configured with
(docs/deployment.md, "Keys"). An existing file is never overwritten (exit code 2).
"""

from __future__ import annotations

import base64
import os
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError, CommandParser

from pfs_device.attestation import DeviceKey


class Command(BaseCommand):
    help = "Make the attestation authority's Ed25519 key: the private half to --out, the public half printed."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--out", required=True, help="the private key file to write (must not exist)")

    def handle(self, *args: object, **options: object) -> None:
        out = Path(options["out"])
        if out.exists():
            raise CommandError(f"out: {out} already exists; nothing was written", returncode=2)
        if not out.parent.is_dir():
            raise CommandError(f"out: the folder {out.parent} does not exist", returncode=2)
        key = DeviceKey.generate()  # an Ed25519 key pair, as a device's
        descriptor = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w") as file:
            file.write(base64.b64encode(key.private).decode() + "\n")
        self.stdout.write(f"PFS_ATTESTATION_PUBLIC_KEY={base64.b64encode(key.public).decode()}")
