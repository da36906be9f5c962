"""An aggregator's HPKE configuration, as DAP publishes it (draft-ietf-ppm-dap, "HPKE Configuration
Request"): each aggregator serves its own at ``{aggregator}/hpke_config``, so that a device learns
the helper's key from the helper and the leader's from the leader, never one from the other.

The encoding is DAP's, in TLS presentation language::

    HpkeConfig HpkeConfigList<10..2^16-1>;
    struct {
      HpkeConfigId id;            /* uint8 */
      HpkeKemId kem_id;           /* uint16 */
      HpkeKdfId kdf_id;           /* uint16 */
      HpkeAeadId aead_id;         /* uint16 */
      HpkePublicKey public_key;   /* opaque<1..2^16-1> */
    } HpkeConfig;

A key's id is the first byte of the SHA-256 of its public key: the same key always has the same
id, on every host that serves it, and a device pins what it saw under each id.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

MEDIA_TYPE = "application/ppm-dap;message=hpke-config-list"
# RFC 9180 Section 7: DHKEM(X25519, HKDF-SHA256), HKDF-SHA256, ChaCha20Poly1305 (pfs_device.hpke's suite).
KEM_X25519 = 0x0020
KDF_HKDF_SHA256 = 0x0001
AEAD_CHACHA20_POLY1305 = 0x0003
SUITE = (KEM_X25519, KDF_HKDF_SHA256, AEAD_CHACHA20_POLY1305)
_HEADER_BYTES = 1 + 2 + 2 + 2  # id, kem_id, kdf_id, aead_id
_MIN_LIST_BYTES = 10  # HpkeConfigList<10..2^16-1>


class ConfigInvalid(ValueError):
    """Not an HpkeConfigList of this project's suite: the device must abort (DAP)."""


@dataclass(frozen=True)
class HpkeConfig:
    id: int
    kem_id: int
    kdf_id: int
    aead_id: int
    public_key: bytes

    @property
    def suite(self) -> tuple[int, int, int]:
        return (self.kem_id, self.kdf_id, self.aead_id)


def config_id_of(public_key: bytes) -> int:
    return hashlib.sha256(public_key).digest()[0]


def config_of(public_key: bytes) -> HpkeConfig:
    """The configuration an aggregator serves for one of its X25519 public keys."""
    return HpkeConfig(config_id_of(public_key), *SUITE, public_key=public_key)


def config_list_encode(configs: list[HpkeConfig]) -> bytes:
    body = b"".join(
        bytes([config.id])
        + b"".join(value.to_bytes(2, "big") for value in config.suite)
        + len(config.public_key).to_bytes(2, "big")
        + config.public_key
        for config in configs
    )
    return len(body).to_bytes(2, "big") + body


def config_list_decode(data: bytes) -> list[HpkeConfig]:
    """The configurations of an HpkeConfigList; ConfigInvalid for any malformed list, an empty one,
    trailing bytes, or two configurations with one id."""
    if len(data) < 2 or int.from_bytes(data[:2], "big") != len(data) - 2:
        raise ConfigInvalid("not an HpkeConfigList: its length prefix does not match its size")
    if len(data) - 2 < _MIN_LIST_BYTES:
        raise ConfigInvalid("an empty HpkeConfigList")
    configs, at = [], 2
    while at < len(data):
        if len(data) - at < _HEADER_BYTES + 2:
            raise ConfigInvalid("a truncated HpkeConfig")
        config_id = data[at]
        kem_id, kdf_id, aead_id = (int.from_bytes(data[at + i : at + i + 2], "big") for i in (1, 3, 5))
        size = int.from_bytes(data[at + _HEADER_BYTES : at + _HEADER_BYTES + 2], "big")
        start = at + _HEADER_BYTES + 2
        if size == 0 or start + size > len(data):
            raise ConfigInvalid("an HpkeConfig whose public key is empty or truncated")
        configs.append(HpkeConfig(config_id, kem_id, kdf_id, aead_id, data[start : start + size]))
        at = start + size
    if len({config.id for config in configs}) != len(configs):
        raise ConfigInvalid("two HpkeConfigs with one id")
    return configs


def supported_config(configs: list[HpkeConfig]) -> HpkeConfig:
    """The first configuration of this project's suite (the list is in order of preference), with a
    key of the suite's size; ConfigInvalid when there is none."""
    for config in configs:
        if config.suite == SUITE and len(config.public_key) == 32:
            return config
    raise ConfigInvalid("no HpkeConfig of the suite DHKEM(X25519, HKDF-SHA256), HKDF-SHA256, ChaCha20Poly1305")
