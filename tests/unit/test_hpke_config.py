"""An aggregator's HPKE configuration (DAP's HpkeConfigList, pfs_device.hpke_config) and the leader's
GET /hpke_config. The helper's own service serves the helper's: tests/integration/test_helper_service.py."""

from __future__ import annotations

import pytest

from aggregation.aggregators import HELPER, LEADER
from pfs_device import hpke
from pfs_device.hpke_config import (
    MEDIA_TYPE,
    SUITE,
    ConfigInvalid,
    HpkeConfig,
    config_id_of,
    config_list_decode,
    config_list_encode,
    config_of,
    supported_config,
)


def test_a_list_is_encoded_as_dap_lays_it_out_and_read_back() -> None:
    key = bytes(range(32))
    other = HpkeConfig(194, 0x0010, 0x0001, 0x0001, b"\x01\x02\x03\x04")  # DAP's example: P-256, AES-128-GCM
    data = config_list_encode([other, config_of(key)])
    # length<2>, then per config: id<1> kem<2> kdf<2> aead<2> public_key<2 + n>
    assert data[:2] == (len(data) - 2).to_bytes(2, "big")
    assert (
        data[2:13] == bytes([194, 0x00, 0x10, 0x00, 0x01, 0x00, 0x01, 0x00, 0x04, 1, 2]) and data[13:15] == b"\x03\x04"
    )
    assert data[15:22] == bytes([config_id_of(key), 0x00, 0x20, 0x00, 0x01, 0x00, 0x03])
    assert config_list_decode(data) == [other, config_of(key)]
    # In order of preference: the first of this project's suite is taken, the P-256 one passed over.
    assert supported_config(config_list_decode(data)) == config_of(key)
    assert config_of(key).suite == SUITE


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "length prefix"),
        (b"\x00\x00", "empty"),
        (b"\x00\x0b" + bytes([1, 0, 0x20, 0, 1, 0, 3, 0, 2, 9]), "length prefix"),  # claims one byte more
        (b"\x00\x0a" + bytes([1, 0, 0x20, 0, 1, 0, 3, 0, 0, 0]), "empty or truncated"),  # a zero-length key + 1
        (b"\x00\x0a" + bytes([1, 0, 0x20, 0, 1, 0, 3, 0, 5, 9]), "empty or truncated"),  # a key cut short
    ],
)
def test_a_malformed_list_is_refused(data: bytes, reason: str) -> None:
    with pytest.raises(ConfigInvalid, match=reason):
        config_list_decode(data)


def test_two_configurations_with_one_id_and_lists_without_the_suite_are_refused() -> None:
    key = bytes(32)
    with pytest.raises(ConfigInvalid, match="one id"):
        config_list_decode(config_list_encode([config_of(key), config_of(key)]))
    with pytest.raises(ConfigInvalid, match="no HpkeConfig of the suite"):
        supported_config([HpkeConfig(1, 0x0010, 0x0001, 0x0001, b"\x04" * 65)])
    with pytest.raises(ConfigInvalid, match="no HpkeConfig of the suite"):
        supported_config([HpkeConfig(1, *SUITE, public_key=b"\x04" * 31)])  # not an X25519 key


def test_the_leader_serves_its_own_current_key_and_never_the_helpers(client, db) -> None:
    answer = client.get("/hpke_config")
    assert answer.status_code == 200 and answer["Content-Type"] == MEDIA_TYPE
    assert answer["Cache-Control"] == "max-age=3600"
    [config] = config_list_decode(answer.content)
    assert config == config_of(LEADER.public_key()) and config.public_key != HELPER.public_key()
    assert client.post("/hpke_config").status_code == 405
    # What it serves is what it opens with.
    info, aad = hpke.share_info("leader"), b"context"
    enc, sealed = hpke.seal(config.public_key, b"share", info, aad=aad)
    assert hpke.open_sealed(LEADER.private_key(), enc, sealed, info, aad=aad) == b"share"
