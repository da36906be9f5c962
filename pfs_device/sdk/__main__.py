"""python -m pfs_device.sdk: run one or more real devices against a PFS Studio server.

    python -m pfs_device.sdk --server http://127.0.0.1:8000 --helper http://127.0.0.1:8001 \\
        --credential creds.json --data devices.jsonl --once

--credential: the file manage.py device_register wrote ({"server", "helper", "relay", "fleet",
"devices": [{"id", "secret", "attestation"}]}), or one device's {"id", "secret", "attestation", "fleet",
"server", "helper", "relay"}. With a relay (the credential file's, or --relay), every upload is sealed
to the leader's Oblivious HTTP gateway and sent through it (pfs_device.sdk.relay): the leader sees
the relay's address, never the device's; the gateway key is pinned as the aggregators' keys are, and
both of the leader's keys must be the copies the relay gives every device. Without one, the pass
says on stderr that uploads show the leader the device's address. Each device's private key is in --state, where python -m pfs_device.sdk.identity made it
before the attestation authority attested its public key (docs/devices-sdk.md, "Enrolment"); a
device whose key is not there exits with code 2. Each pass takes
the leader's HPKE key from the leader's /hpke_config and the helper's from the helper's, pins them
in --state (pfs_device.sdk.keys), and refuses every task that names other keys. --data: the
devices' data in the fleet JSONL format (docs/fleets.md), one line per credential, in the same
order. Each device keeps its ledger in --state (one JSON file per device), and there each task's
progress: charged, report sealed, token requested, report signed, each on disk before the next step leaves the
device, so a device stopped at any step resumes there on the next run and uploads exactly once.
Prints one JSON summary per pass; with --verbose one line per device and task too. On stderr, one
JSON line per device and step: what it waits for and until when ({"waiting": "token", "until":
ISO time}) before each wait, and each step done ({"progress": "charged" | "sealed" | "signed" | "uploaded"}). Bad input (among it a credential file
naming no helper) exits with code 2; with --once, a server that cannot be reached, or aggregators'
keys that cannot be had, 1.
Each device asks for its token and uploads at random times over the spread its task is served
with (pfs_device.sdk.pacing; --spread overrides it), so a pass lasts up to that long; never over
less than --min-spread, the device's own floor (default 600 s), whatever the server sends, and a
task whose deadline leaves less is declined (too_little_time): nothing charged, nothing sent.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from pfs_device import __version__
from pfs_device.attestation import Attestation, AttestationInvalid
from pfs_device.sdk.client import ClientError, Credential, DeviceClient
from pfs_device.sdk.device import DataInvalid, DeviceData, Offer, ServerKeys, data_read, task_answer
from pfs_device.sdk.identity import KeyMissing, device_key_load
from pfs_device.sdk.keys import FetchedKeys, KeyPins, announced_keys, keys_fetch
from pfs_device.sdk.ledger import Ledger, LedgerCorrupt
from pfs_device.sdk.pacing import MIN_SPREAD, Pacing

# Devices waiting at once in one process: each mostly sleeps until its random times.
MAX_THREADS = 1000
# Requests in flight at once from one process, whatever the number of devices: the server sees a
# few connections, not one per device.
REQUESTS_AT_ONCE = 4


class _Gated:
    """A device's client whose requests wait for one of the process's few request slots.

    ``relay``: the pass's route through the relay, when the enrolment names one (``relayed``). A
    relayed device with no route this pass (its keys could not be had) uploads nothing: directly,
    its upload would show the leader its address. The report stays for the next pass."""

    def __init__(
        self, client: DeviceClient, gate: threading.BoundedSemaphore, *, relayed: bool = False, relay=None
    ) -> None:
        self.client = client
        self.gate = gate
        self.relayed = relayed
        self.relay = relay

    def tasks(self) -> dict:
        with self.gate:
            return self.client.tasks()

    def token(self, collection_key: str, blinded: int) -> int:
        with self.gate:
            return self.client.token(collection_key, blinded)

    def upload(self, report) -> str:
        if self.relayed and self.relay is None:
            raise ClientError("no route through the relay this pass: not uploading directly", code="relay_unavailable")
        with self.gate:
            if self.relay is None:
                return self.client.upload(report)
            return self.client.upload(report, relay=self.relay)


class UsageError(Exception):
    """Bad input: exit code 2."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pfs_device.sdk", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"pfs-device {__version__}")
    parser.add_argument("--server", help="the server's URL (default: the credential file's 'server')")
    parser.add_argument(
        "--helper", help="the helper aggregator's URL, where its own key is fetched (default: the credential file's)"
    )
    parser.add_argument(
        "--relay",
        help="the Oblivious HTTP relay's URL, through which every upload goes (default: the credential file's; "
        "without one, uploads go to the leader directly, and the pass says so)",
    )
    parser.add_argument("--credential", required=True, help="credentials file from manage.py device_register")
    parser.add_argument("--data", required=True, help="the devices' data, fleet JSONL, one line per credential")
    parser.add_argument(
        "--state", default="pfs-device-state", help="folder of the devices' ledgers (default: %(default)s)"
    )
    parser.add_argument("--once", action="store_true", help="one pass over the open rounds, then exit")
    parser.add_argument("--interval", type=float, default=60.0, help="seconds between passes (default: %(default)s)")
    parser.add_argument("--verbose", action="store_true", help="print every device's outcome of every task")
    parser.add_argument(
        "--spread",
        type=float,
        default=None,
        help="seconds over which each device asks for its token and uploads, at random times (default: "
        "the spread each task is served with, raised to --min-spread); below --min-spread: refused",
    )
    parser.add_argument(
        "--min-spread",
        type=float,
        default=MIN_SPREAD,
        help="this device's own floor (seconds) on the spread, whatever the server sends; a task whose "
        "deadline leaves less is declined (default: %(default)s). Set by the device's owner; lower only "
        "for tests: below the default the issuer's and the aggregators' records can be joined, and 0 "
        "with --spread 0 sends at once",
    )
    options = parser.parse_args(argv)
    try:
        server, helper, relay, fleet, credentials = _credentials(
            Path(options.credential), options.server, options.helper, options.relay, Path(options.state)
        )
        devices = _data(Path(options.data), len(credentials))
        if not options.interval > 0:
            raise UsageError("--interval: must be a positive number of seconds")
        if not 0 <= options.min_spread < float("inf"):
            raise UsageError("--min-spread: must be a number of seconds, 0 or more")
        if options.spread is not None and not 0 <= options.spread < float("inf"):
            raise UsageError("--spread: must be a number of seconds, 0 or more")
        if options.spread is not None and options.spread < options.min_spread:
            raise UsageError(
                f"--spread: {options.spread:g} s is below this device's floor (--min-spread {options.min_spread:g} s): "
                "token and upload that close together let the issuer's and the aggregators' records be joined"
            )
        clients = [DeviceClient(server, credential) for credential in credentials]
    except (UsageError, ValueError) as error:
        print(f"invalid input: {error}", file=sys.stderr)
        return 2
    if relay is None:
        warning = "no relay: each upload reaches the leader from this device's address (enrol with a relay, or pass --relay URL)"
        print(json.dumps({"warning": warning}), file=sys.stderr, flush=True)
    if options.min_spread < MIN_SPREAD:
        warning = f"--min-spread {options.min_spread:g} s is below the safe floor of {MIN_SPREAD:g} s: for tests only"
        print(json.dumps({"warning": warning}), file=sys.stderr, flush=True)
    state = Path(options.state)
    pins = KeyPins(state)
    while True:
        try:
            summary = _pass(
                clients,
                devices,
                fleet,
                state,
                verbose=options.verbose,
                spread=options.spread,
                min_spread=options.min_spread,
                aggregator_keys=lambda: keys_fetch(leader=server, helper=helper, relay=relay, pins=pins),
                relayed=relay is not None,
            )
        except LedgerCorrupt as error:
            print(f"a ledger cannot be read, refusing to answer: {error}", file=sys.stderr)
            return 1
        print(json.dumps(summary, sort_keys=True), flush=True)
        if options.once:
            return 1 if summary["unreachable"] == len(clients) or summary.get("keys") else 0
        time.sleep(options.interval)


def _pass(
    clients: list[DeviceClient],
    devices: list[DeviceData],
    fleet: str | None,
    state: Path,
    *,
    verbose: bool,
    aggregator_keys: Callable[[], FetchedKeys],
    spread: float | None = None,
    min_spread: float = MIN_SPREAD,
    relayed: bool = False,
):
    """One pass: every device at once, each in its own thread, since each waits its own random
    times (pfs_device.sdk.pacing) before its token and its upload.

    ``aggregator_keys``: each aggregator's key from its own /hpke_config, fetched once per pass
    (pfs_device.sdk.keys.keys_fetch). When they cannot be had, every task is refused and the pass
    says why (stderr, and the summary's "keys"). ``spread`` and ``min_spread``: pfs_device.sdk.pacing.Pacing's;
    a task declined for too little time is said on stderr too."""
    fetched = aggregator_keys()
    if fetched.keys is None:
        print(
            json.dumps({"refused": fetched.reason, "detail": fetched.detail, "uploads": "none"}),
            file=sys.stderr,
            flush=True,
        )
    decisions: Counter[str] = Counter()
    uploads: Counter[str] = Counter()
    resumed: Counter[str] = Counter()
    unreachable = 0
    lock = threading.Lock()
    gate = threading.BoundedSemaphore(REQUESTS_AT_ONCE)

    def device_pass(client: DeviceClient, data: DeviceData) -> None:
        nonlocal unreachable
        device_id = client.credential.device_id
        service = _Gated(client, gate, relayed=relayed, relay=fetched.relay)
        try:
            tasks = service.tasks()
        except ClientError as error:
            with lock:
                unreachable += 1
                if verbose:
                    print(json.dumps({"device": device_id, "error": str(error), "code": error.code}), flush=True)
            return
        keys = ServerKeys(
            aggregators=fetched.keys, announced=announced_keys(tasks), unavailable=fetched.reason, detail=fetched.detail
        )
        ledger = Ledger(state / f"{device_id}.json")

        def say(event: dict) -> None:  # what the device waits for and until when, and each step done
            with lock:
                print(json.dumps({"device": device_id, **event}), file=sys.stderr, flush=True)

        for offer_json in tasks["tasks"]:
            outcome = task_answer(
                offer=Offer.from_json(offer_json),
                data=data,
                fleet=fleet or tasks["fleet"],
                ledger=ledger,
                keys=keys,
                service=service,
                pacing=Pacing(spread=spread, min_spread=min_spread),
                progress=say,
            )
            if outcome.repeated:
                continue
            with lock:
                if outcome.problem and fetched.keys is not None:  # other keys named, or too little time: say so
                    print(
                        json.dumps(
                            {
                                "device": device_id,
                                "task": outcome.task_key,
                                "refused": outcome.decision,
                                "detail": outcome.problem,
                            }
                        ),
                        file=sys.stderr,
                        flush=True,
                    )
                decisions[outcome.decision] += 1
                if outcome.resumed:
                    resumed[outcome.resumed] += 1
                if outcome.upload:
                    uploads[outcome.upload] += 1
                if verbose:
                    print(json.dumps({"device": device_id, **outcome.__dict__}), flush=True)

    with ThreadPoolExecutor(max_workers=max(1, min(len(clients), MAX_THREADS))) as pool:
        for done in [pool.submit(device_pass, client, data) for client, data in zip(clients, devices, strict=True)]:
            done.result()  # a device's error (a corrupt ledger) stops the pass, as before
    summary = {"devices": len(clients), "unreachable": unreachable, "decisions": decisions, "uploads": uploads}
    if resumed:
        summary["resumed"] = resumed
    if fetched.keys is None:
        summary["keys"] = fetched.reason
    return summary


def _credentials(
    path: Path, server: str | None, helper: str | None, relay: str | None, state: Path
) -> tuple[str, str, str | None, str | None, list[Credential]]:
    try:
        content = json.loads(path.read_text())
    except OSError as error:
        raise UsageError(f"--credential: cannot read {path}: {error.strerror}") from None
    except ValueError as error:
        raise UsageError(f"--credential: {path} is not JSON: {error}") from None
    if isinstance(content, dict) and "devices" not in content:
        content = {
            "fleet": content.get("fleet"),
            "server": content.get("server"),
            "helper": content.get("helper"),
            "relay": content.get("relay"),
            "devices": [content],
        }
    if not isinstance(content, dict) or not isinstance(content.get("devices"), list) or not content["devices"]:
        raise UsageError("--credential: must hold 'devices', a non-empty list of {id, secret}")
    credentials = []
    for index, entry in enumerate(content["devices"]):
        if not (isinstance(entry, dict) and isinstance(entry.get("id"), str) and isinstance(entry.get("secret"), str)):
            raise UsageError(f"--credential: devices[{index}] must be an object with string 'id' and 'secret'")
        credentials.append(_credential(entry, index, state))
    server = server or content.get("server")
    if not server:
        raise UsageError("--server: needed (the credential file names no server)")
    helper = helper or content.get("helper")
    if not helper:
        # Fail closed: without the helper's own URL the device could only take the helper's key from
        # the leader, which would then open both shares of every report.
        raise UsageError(
            "--helper: needed (the credential file names no helper aggregator: register the devices again "
            "with a server whose HELPER_URL is set, or pass --helper URL); nothing was sent"
        )
    if not isinstance(helper, str) or not helper.startswith(("http://", "https://")):
        raise UsageError(f"--helper: must be an http:// or https:// URL, not {helper!r}")
    relay = relay or content.get("relay")
    if relay is not None and (not isinstance(relay, str) or not relay.startswith(("http://", "https://"))):
        raise UsageError(f"--relay: must be an http:// or https:// URL, not {relay!r}")
    return server, helper.rstrip("/"), relay and relay.rstrip("/"), content.get("fleet"), credentials


def _credential(entry: dict, index: int, state: Path) -> Credential:
    """The entry's credential with its attestation and, from the state folder, its private key.

    An entry without an attestation still runs: the issuer refuses its token (attestation_missing)
    and says so, as it would any unattested device."""
    if "attestation" not in entry:
        return Credential(entry["id"], entry["secret"])
    try:
        attestation = Attestation.from_json(entry["attestation"])
        key = device_key_load(state, attestation.device_public_key)
    except (AttestationInvalid, KeyMissing) as error:
        raise UsageError(f"--credential: devices[{index}]: {error}") from None
    return Credential(entry["id"], entry["secret"], attestation=entry["attestation"], device_key=key)


def _data(path: Path, count: int) -> list[DeviceData]:
    try:
        lines = [line for line in path.read_bytes().splitlines() if line.strip()]
    except OSError as error:
        raise UsageError(f"--data: cannot read {path}: {error.strerror}") from None
    try:
        devices = data_read(lines)
    except DataInvalid as error:
        raise UsageError(f"--data: {'; '.join(error.errors[:5])}") from None
    if len(devices) != count:
        raise UsageError(f"--data: {len(devices)} devices for {count} credentials; one line per credential")
    return devices


if __name__ == "__main__":
    sys.exit(main())
