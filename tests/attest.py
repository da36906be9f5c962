"""The test attestation authority: it plays the platform's device attestation (pfs_device.attestation).

Its key is the test settings' PFS_ATTESTATION_KEY (pfs_web.settings_test); the leader and the issuer
under test verify with PFS_ATTESTATION_PUBLIC_KEY only. ``devices_enrol`` is what a real deployment
does in three hands: each device makes its key pair, the authority attests its public key, the
leader's operator registers the attested devices (devices.credentials.devices_register).
"""

from __future__ import annotations

import base64
import itertools
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from django.conf import settings

from devices.credentials import IssuedCredential, devices_register
from devices.models import Fleet
from pfs_device.attestation import DeviceKey, attestation_sign
from pfs_device.sdk.identity import FOLDER, key_path

POOL = 4096  # key pairs made once per session: more than any one test registers
_cursor = itertools.count()


@dataclass(frozen=True)
class Enrolled:
    """A registered device as the device holds it: its credential and its own key pair."""

    credential: IssuedCredential
    key: DeviceKey

    @property
    def device_id(self) -> str:
        return self.credential.device_id

    @property
    def secret(self) -> str:
        return self.credential.secret

    @property
    def attestation(self) -> dict:
        return self.credential.attestation

    def as_json(self) -> dict:
        return self.credential.as_json()


@cache
def _pool() -> tuple[tuple[DeviceKey, dict], ...]:
    authority = settings.PFS_ATTESTATION_KEY
    keys = [DeviceKey.generate() for _ in range(POOL)]
    return tuple((key, attestation_sign(authority, key.public).as_json()) for key in keys)


def attested(count: int) -> list[tuple[DeviceKey, dict]]:
    """``count`` device key pairs with the authority's attestations, none repeated within POOL calls' worth."""
    pool = _pool()
    return [pool[next(_cursor) % POOL] for _ in range(count)]


def devices_enrol(*, fleet_name: str, count: int, registered_by: str = "test") -> tuple[Fleet, list[Enrolled]]:
    """Register ``count`` attested devices in ``fleet_name``."""
    pairs = attested(count)
    fleet, issued = devices_register(
        fleet_name=fleet_name, attestations=[attestation for _, attestation in pairs], registered_by=registered_by
    )
    return fleet, [Enrolled(credential, key) for credential, (key, _) in zip(issued, pairs, strict=True)]


def keys_store(state: Path, devices: list[Enrolled]) -> None:
    """Put each device's private key in its state folder, where the SDK looks for it (pfs_device.sdk.identity)."""
    (state / FOLDER).mkdir(parents=True, exist_ok=True)
    for device in devices:
        key_path(state, device.key.public).write_text(base64.b64encode(device.key.private).decode() + "\n")
