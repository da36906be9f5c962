"""Rotate a private key without breaking the collections already open (aggregation.key_rotation).

    manage.py rotate_keys --role leader      # a new HPKE key; the old one opens what was sealed to it
    manage.py rotate_keys --role issuer      # erase closed collections' signing keys, re-seal the rest

The keys are where the settings say (docs/deployment.md, "Keys"): the role's database, or a key
file, which this command rewrites. Keys from the environment are rotated by the operator. Bad
input exits with code 2 and changes nothing.
"""

from __future__ import annotations

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from aggregation.key_rotation import RotationRefused, keys_rotate
from aggregation.keys import ROLES, KeysUnavailable


class Command(BaseCommand):
    help = "Rotate the leader's or the helper's HPKE key, or the issuer's keys; open collections keep working."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--role", required=True, help=f"whose keys: {', '.join(ROLES)}")

    def handle(self, *args: object, **options: object) -> None:
        role = str(options["role"])
        if role not in ROLES:
            raise CommandError(
                f"invalid input, nothing was changed:\n  role: {role!r} is not one of {', '.join(ROLES)}", returncode=2
            )
        own = role == "helper" if settings.PFS_ROLE == "helper" else role != "helper" or "helper" in settings.DATABASES
        if not own:
            # Each party rotates its own keys, on its own host: the leader's process cannot reach the
            # helper's store, nor the helper's service the leader's or the issuer's.
            where = "the helper's own service (DJANGO_SETTINGS_MODULE=pfs_web.settings_helper)"
            raise CommandError(
                f"invalid input, nothing was changed:\n  role: rotate the {role}'s keys from "
                + (where if role == "helper" else "the leader's process (pfs_web.settings)"),
                returncode=2,
            )
        try:
            rotation = keys_rotate(role=role)
        except (RotationRefused, KeysUnavailable) as refused:
            raise CommandError(f"invalid input, nothing was changed:\n  {refused}", returncode=2) from refused
        self.stdout.write(rotation.summary())
