"""Each aggregator's HPKE key, from that aggregator itself, pinned per key id (docs/devices-sdk.md).

A device seals the leader's share to the key the leader serves at ``{leader}/hpke_config`` and the
helper's to the key the helper serves at ``{helper}/hpke_config`` (DAP's HpkeConfigList,
pfs_device.hpke_config), never to a key one aggregator hands out for the other: a leader that served
a helper key of its own would open both shares. The keys the tasks answer names (``aggregators``)
must be these; a task whose keys differ is refused before anything is charged or sent
(pfs_device.sdk.device).

With a relay (pfs_device.sdk.relay), the leader's gateway key is fetched from the leader too and
pinned beside them, and key consistency is checked: the leader's HPKE key and its gateway key, as
the leader serves them to this device, must be the copies the relay gives every client
(``{relay}/leader/...``). Served a key of its own, a device's uploads would be recognisable through
the relay; served the relay's, they would open at the relay. Either way every task is refused
(``aggregator_key_inconsistent``) before anything is charged or sent.

Every key is pinned under its id in a small JSON file in the state folder (``aggregator-keys.json``,
written as the ledgers are: flushed, then renamed into place). A new id is a rotation and is pinned;
an id seen before that comes with another key is refused until the operator, having checked why,
deletes the pin file.
"""

from __future__ import annotations

import base64
import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pfs_device.hpke_config import MEDIA_TYPE, ConfigInvalid, HpkeConfig, config_list_decode, supported_config
from pfs_device.ohttp import KeyConfig
from pfs_device.report_client import AggregatorKeys
from pfs_device.sdk.relay import (
    GATEWAY_KEYS_PATH,
    RELAY_LEADER_PREFIX,
    RelayError,
    RelayRoute,
    gateway_config_fetch,
    http_get,
)

PIN_FILE = "aggregator-keys.json"
PIN_VERSION = 1
ROLES = ("leader", "helper", "gateway")
MAX_CONFIG_BYTES = 65_537  # HpkeConfigList<10..2^16-1> and its 2-byte length

# Refusals of a task for its aggregators' keys (Outcome.decision, the summary's "decisions").
KEY_MISMATCH = "aggregator_key_mismatch"  # the tasks answer names keys its aggregators do not serve
KEYS_UNAVAILABLE = "aggregator_keys_unavailable"  # an aggregator's /hpke_config: unreachable or malformed
KEY_CHANGED = "aggregator_key_changed"  # a pinned key id now comes with another key
KEY_INCONSISTENT = "aggregator_key_inconsistent"  # the leader serves this device other keys than the relay's copies


class KeysUnavailable(Exception):
    """An aggregator's keys cannot be used; ``reason`` is one of the refusals above."""

    def __init__(self, message: str, *, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class FetchedKeys:
    """What one pass seals with: both aggregators' keys, each from its own /hpke_config; or why not.
    ``relay``: where its uploads go, when the enrolment names a relay."""

    keys: AggregatorKeys | None
    reason: str = ""
    detail: str = ""
    relay: RelayRoute | None = None


def config_fetch(url: str, *, timeout: float = 30.0) -> HpkeConfig:
    """GET ``{url}/hpke_config``: the aggregator's configuration of this project's suite.
    KeysUnavailable if it cannot be reached or does not answer an HpkeConfigList of the suite."""
    try:
        served, body = http_get(
            url.rstrip("/") + "/hpke_config", accept=MEDIA_TYPE, timeout=timeout, limit=MAX_CONFIG_BYTES
        )
    except RelayError as error:
        raise KeysUnavailable(str(error), reason=KEYS_UNAVAILABLE) from None
    # DAP's media type has a parameter of its own (";message=..."): the whole value is compared.
    if "".join(served.split()).lower() != MEDIA_TYPE:
        raise KeysUnavailable(
            f"{url}/hpke_config answered {served or 'no media type'!r}, not {MEDIA_TYPE}", reason=KEYS_UNAVAILABLE
        )
    try:
        return supported_config(config_list_decode(body))
    except ConfigInvalid as error:
        raise KeysUnavailable(f"{url}/hpke_config: {error}", reason=KEYS_UNAVAILABLE) from None


class KeyPins:
    """The keys this device has sealed to, per aggregator and key id, in the state folder."""

    def __init__(self, folder: str | Path) -> None:
        self.path = Path(folder) / PIN_FILE

    def _read(self) -> dict:
        if not self.path.exists():
            return {"version": PIN_VERSION, "aggregators": {}}  # each role's pins begin with its first key
        try:
            state = json.loads(self.path.read_text())
        except (OSError, ValueError) as error:
            raise KeysUnavailable(
                f"{self.path} cannot be read ({error}): refusing every task until an operator deletes it",
                reason=KEY_CHANGED,
            ) from error
        if not (
            isinstance(state, dict)
            and state.get("version") == PIN_VERSION
            and isinstance(state.get("aggregators"), dict)
            and all(isinstance(state["aggregators"].get(role, {}), dict) for role in ROLES)
        ):
            raise KeysUnavailable(
                f"{self.path} is not a version {PIN_VERSION} pin file: refusing every task until an operator deletes it",
                reason=KEY_CHANGED,
            )
        return state

    def check(self, configs: dict[str, HpkeConfig | KeyConfig]) -> None:
        """Pin every new key id; KeysUnavailable (KEY_CHANGED) if a pinned id comes with another key."""
        state = self._read()
        changed = False
        for role, config in configs.items():
            pinned = state["aggregators"].setdefault(role, {})
            key_id = str(config.key_id if isinstance(config, KeyConfig) else config.id)
            key = base64.b64encode(config.public_key).decode()
            if key_id not in pinned:
                pinned[key_id] = key  # a new id: a rotation
                changed = True
            elif pinned[key_id] != key:
                raise KeysUnavailable(
                    f"the {role}'s key id {key_id} was pinned with another key: refusing every task until an "
                    f"operator has checked why and deleted {self.path}",
                    reason=KEY_CHANGED,
                )
        if changed:
            self._write(state)

    def _write(self, state: dict) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        descriptor, temporary = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name}.")
        try:
            with os.fdopen(descriptor, "w") as file:
                json.dump(state, file, sort_keys=True)
                file.flush()
                os.fsync(file.fileno())
            os.replace(temporary, self.path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise


def keys_fetch(
    *,
    leader: str,
    helper: str,
    pins: KeyPins,
    relay: str | None = None,
    fetch: Callable[[str], HpkeConfig] = config_fetch,
    fetch_gateway: Callable[[str], KeyConfig] = lambda url: gateway_config_fetch(url)[0],
) -> FetchedKeys:
    """Each aggregator's key from its own /hpke_config, checked against the pins (and new ids pinned);
    with a relay, the gateway key too, and both of the leader's keys against the relay's copies."""
    try:
        configs: dict[str, HpkeConfig | KeyConfig] = {"leader": fetch(leader), "helper": fetch(helper)}
        route = None
        if relay is not None:
            configs["gateway"] = _gateway_key(leader, fetch_gateway)
            _consistent(relay, configs, fetch, fetch_gateway)
            route = RelayRoute(relay, configs["gateway"])
        pins.check(configs)
    except KeysUnavailable as error:
        return FetchedKeys(None, error.reason, str(error))
    keys = AggregatorKeys(leader=configs["leader"].public_key, helper=configs["helper"].public_key)
    return FetchedKeys(keys, relay=route)


def _gateway_key(leader: str, fetch_gateway: Callable[[str], KeyConfig]) -> KeyConfig:
    try:
        return fetch_gateway(leader + GATEWAY_KEYS_PATH)
    except RelayError as error:
        raise KeysUnavailable(f"the leader's gateway key: {error}", reason=KEYS_UNAVAILABLE) from None


def _consistent(
    relay: str,
    configs: dict[str, HpkeConfig | KeyConfig],
    fetch: Callable[[str], HpkeConfig],
    fetch_gateway: Callable[[str], KeyConfig],
) -> None:
    """KeysUnavailable (KEY_INCONSISTENT) unless the leader's keys, as served to this device, are the
    relay's copies of them, the ones every client of the relay gets."""
    copies = relay + RELAY_LEADER_PREFIX
    try:
        everyones = {"leader": fetch(copies), "gateway": fetch_gateway(copies + GATEWAY_KEYS_PATH)}
    except (KeysUnavailable, RelayError) as error:
        raise KeysUnavailable(f"the relay's copies of the leader's keys: {error}", reason=KEYS_UNAVAILABLE) from None
    differ = [role for role, config in everyones.items() if config != configs[role]]
    if differ:
        raise KeysUnavailable(
            f"the leader served this device {' and '.join(differ)} keys other than those the relay {relay} gives "
            "every device (a key of its own would single out this device's uploads): refusing every task",
            reason=KEY_INCONSISTENT,
        )


def announced_keys(tasks: dict) -> AggregatorKeys | None:
    """The aggregators' keys the tasks answer names (what the device compares); None if malformed."""
    try:
        named = tasks["aggregators"]
        return AggregatorKeys(
            leader=base64.b64decode(named["leader"], validate=True),
            helper=base64.b64decode(named["helper"], validate=True),
        )
    except (KeyError, TypeError, ValueError):
        return None
