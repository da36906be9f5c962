"""A device's own key pair, kept in its state folder, and the public keys it hands the attestation
authority (pfs_device.attestation; docs/devices-sdk.md, "Enrolment").

    python -m pfs_device.sdk.identity --state pfs-device-state --count 3 --out public-keys.json

makes one Ed25519 key pair per device: each private key in ``<state>/device-keys/<digest>.key``
(owner-only, never sent anywhere), the public keys in --out for the authority's
``manage.py attestation_sign``. Each token request is then signed with the private key
(pfs_device.sdk.client), so a leader that saw the device's attestation at enrolment cannot use it
to take the device's token. Bad input exits with code 2.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
from pathlib import Path

from pfs_device.attestation import DeviceKey, key_digest, public_of

FOLDER = "device-keys"


class KeyMissing(LookupError):
    """The state folder holds no private key for this public key."""


def key_path(state: Path, public_key: bytes) -> Path:
    return state / FOLDER / f"{key_digest(public_key)[:32]}.key"


def device_key_create(state: Path) -> DeviceKey:
    """A new key pair, its private half written to the state folder (owner-only) before it is returned."""
    key = DeviceKey.generate()
    folder = state / FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(key_path(state, key.public), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as file:
        file.write(base64.b64encode(key.private).decode() + "\n")
        file.flush()
        os.fsync(file.fileno())
    return key


def device_key_load(state: Path, public_key: bytes) -> DeviceKey:
    """The key pair whose public half is ``public_key``; KeyMissing if this state does not hold it."""
    try:
        private = base64.b64decode(key_path(state, public_key).read_text().strip(), validate=True)
    except (OSError, ValueError):
        raise KeyMissing(f"no private key for device key {key_digest(public_key)[:16]}… in {state}") from None
    if len(private) != 32 or public_of(private) != public_key:
        raise KeyMissing(f"the key file of device key {key_digest(public_key)[:16]}… does not match it")
    return DeviceKey(private)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pfs_device.sdk.identity", description=__doc__.splitlines()[0])
    parser.add_argument("--state", required=True, help="the devices' state folder (as for python -m pfs_device.sdk)")
    parser.add_argument("--count", type=int, default=1, help="how many devices' key pairs (default: %(default)s)")
    parser.add_argument("--out", required=True, help="the public keys file to write (must not exist)")
    options = parser.parse_args(argv)
    out = Path(options.out)
    if not 1 <= options.count <= 100_000:
        print("invalid input: --count must be from 1 to 100,000", file=sys.stderr)
        return 2
    if out.exists():
        print(f"invalid input: --out {out} already exists", file=sys.stderr)
        return 2
    keys = [device_key_create(Path(options.state)) for _ in range(options.count)]
    out.write_text(json.dumps({"keys": [base64.b64encode(key.public).decode() for key in keys]}, indent=1) + "\n")
    print(f"made {len(keys):,} device keys in {Path(options.state) / FOLDER}; public keys in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
