"""Real devices' credentials: registering devices in a ``devices`` fleet and checking who signs in.

A device enrols with its attestation (pfs_device.attestation): the attestation authority's signature
on the device's own public key. The leader registers only attested devices, and the issuer signs
tokens only for attested devices, whatever the leader registered (aggregation.issuer).

A credential identifies a device to the task endpoint and to the token issuer only. Reports are
uploaded anonymously, with a blind-signed token instead (pfs_device.tokens), so the upload
cannot be linked back to the credential.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
from dataclasses import dataclass
from datetime import timedelta

from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from aggregation.issuer import RequestUnattested, attestation_check
from devices.fleet_io import NAME_PATTERN
from devices.models import DeviceCredential, Fleet

MAX_REGISTER = 100_000  # devices per call: the secrets are written to one file
# A device seen within this long is not written again: last_seen_at is for operators, not a log.
LAST_SEEN_RESOLUTION = timedelta(minutes=1)


audit = logging.getLogger("pfs.audit")


class RegistrationInvalid(ValueError):
    """The request cannot register devices; ``errors`` holds one message per problem."""

    def __init__(self, errors: list[str]) -> None:
        super().__init__("; ".join(errors))
        self.errors = errors


@dataclass(frozen=True)
class IssuedCredential:
    device_id: str
    secret: str  # shown once, never stored
    attestation: dict  # the device's, as it enrolled: it sends it with each token request

    def as_json(self) -> dict:
        return {"id": self.device_id, "secret": self.secret, "attestation": self.attestation}


def secret_hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def devices_register(
    *, fleet_name: str, attestations: list, registered_by: str = "unknown"
) -> tuple[Fleet, list[IssuedCredential]]:
    """Register one new device per attestation (their JSON form) in the ``devices`` fleet ``fleet_name``
    (created if new). Every attestation must be the attestation authority's (aggregation.issuer.attestation_check),
    each device key once: otherwise RegistrationInvalid and nothing is registered.

    Returns the credentials with their secrets, which are not kept: only their hashes are.
    """
    errors = []
    if not isinstance(fleet_name, str) or not NAME_PATTERN.match(fleet_name):
        errors.append("fleet: must be 1 to 64 letters, digits, hyphens or underscores")
    if not isinstance(attestations, list) or not 1 <= len(attestations) <= MAX_REGISTER:
        errors.append(f"attestations: must be a list of 1 to {MAX_REGISTER:,} device attestations")
    else:
        errors += _attestation_errors(attestations)
    count = len(attestations) if isinstance(attestations, list) else 0
    existing = Fleet.objects.filter(name=fleet_name).first() if not errors else None
    if existing is not None and not existing.is_real:
        errors.append(f"fleet: {fleet_name!r} is a simulated fleet; real devices need a fleet of kind 'devices'")
    if errors:
        raise RegistrationInvalid(errors)

    issued = [
        IssuedCredential(f"dev-{secrets.token_hex(12)}", secrets.token_urlsafe(32), attestation)
        for attestation in attestations
    ]
    try:
        with transaction.atomic():
            fleet, _ = Fleet.objects.get_or_create(
                name=fleet_name, defaults={"kind": Fleet.Kind.DEVICES, "size": 0, "vocabularies": {}}
            )
            fleet = Fleet.objects.select_for_update().get(pk=fleet.pk)
            if not fleet.is_real:  # created as a simulated fleet meanwhile
                raise RegistrationInvalid([f"fleet: {fleet_name!r} is a simulated fleet"])
            DeviceCredential.objects.bulk_create(
                DeviceCredential(fleet=fleet, device_id=c.device_id, secret_hash=secret_hash(c.secret)) for c in issued
            )
            Fleet.objects.filter(pk=fleet.pk).update(size=F("size") + count)
    except IntegrityError as error:  # 96 random bits collided: astronomically unlikely, but say so
        raise RegistrationInvalid([f"could not register: {error}"]) from error
    # Logged, so that a burst of new devices just before a collection (sybils) shows.
    audit.warning(
        "registered %s devices in %s",
        count,
        fleet_name,
        extra={"event": "devices.registered", "fleet": fleet_name, "count": count, "by": registered_by},
    )
    fleet.refresh_from_db()
    return fleet, issued


def _attestation_errors(attestations: list) -> list[str]:
    """One message per attestation the authority did not sign, or naming a device key already listed
    (at most five: a file of forgeries need not be read back whole)."""
    errors, seen = [], set()
    for index, content in enumerate(attestations):
        try:
            digest = attestation_check(content).digest
        except RequestUnattested as refused:
            errors.append(f"attestations[{index}]: {refused}")
        else:
            if digest in seen:
                errors.append(f"attestations[{index}]: the same device key twice")
            seen.add(digest)
        if len(errors) == 5:
            break
    return errors


def device_authenticate(*, device_id: str, secret: str) -> DeviceCredential | None:
    """The credential of ``device_id`` if ``secret`` is its secret; None otherwise."""
    credential = DeviceCredential.objects.select_related("fleet").filter(device_id=device_id).first()
    expected = credential.secret_hash if credential is not None else secret_hash("")
    # Compared in constant time, and hashed even for an unknown id, so timing tells nothing.
    if not hmac.compare_digest(expected, secret_hash(secret)) or credential is None:
        return None
    now = timezone.now()
    if credential.last_seen_at is None or now - credential.last_seen_at > LAST_SEEN_RESOLUTION:
        DeviceCredential.objects.filter(pk=credential.pk).update(last_seen_at=now)
        credential.last_seen_at = now
    return credential
