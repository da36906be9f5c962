"""A relay or a leader that attacks the way between them (issue 33): the device SDK's uploads, live.

The leader is this test's live server (its gateway, its upload path, the token issuer); the honest
relay is pfs_relay's own application in a thread; each attacker is a hop that forwards, and alters
what it forwards (tests.relays.Forwarder). The device is the SDK's own code (keys_fetch, DeviceClient)
in this process, with reports of registered, attested devices.

- A relay that alters a capsule gets it refused by the gateway: nothing stored, and the device keeps
  its report for a later pass (the capsule left it whole), which the honest relay then delivers once.
- A relay that replays a capsule gets the copy stored and refused when verified (its token is used):
  the round counts the report once.
- A relay that alters the leader's answer is not believed: the device seals again, and the copies
  the leader stored meanwhile are refused as used.
- A gateway key served by the relay, or one the leader serves one device alone, is refused by the
  SDK before anything is sealed (key consistency); a pinned key id that comes with another key too.
"""

from __future__ import annotations

import json

import pytest

from aggregation.models import LeaderShare, PendingReport
from aggregation.reports import rejections
from pfs_device import hpke, ohttp
from pfs_device.hpke_config import MEDIA_TYPE, config_list_encode, config_of
from pfs_device.sdk.client import TRANSIENT_CODES, ClientError, Credential, DeviceClient
from pfs_device.sdk.keys import KEY_CHANGED, KEY_INCONSISTENT, KeyPins, keys_fetch
from pfs_device.sdk.relay import RelayRoute
from tests.relays import Forwarder, relay_in_thread
from tests.unit import test_device_http
from tests.unit.test_device_http import verify

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

phones = test_device_http.phones
phones_analysis = test_device_http.phones_analysis
central_round = test_device_http.central_round


@pytest.fixture
def relay(live_server):
    url, stop = relay_in_thread(live_server.url, key_ttl=60)
    yield url
    stop()


@pytest.fixture
def attackers():
    hops: list[Forwarder] = []

    def hop(**options) -> Forwarder:
        hops.append(Forwarder(**options))
        return hops[-1]

    yield hop
    for each in hops:
        each.stop()


def fetch(leader: str, relay: str, folder, **fetchers):
    # The helper's own key does not matter here: the leader's /hpke_config stands in for it.
    return keys_fetch(leader=leader, helper=leader, relay=relay, pins=KeyPins(folder), **fetchers)


def client(live_server) -> DeviceClient:
    # The upload carries no credential; a quick retry keeps the tests short.
    return DeviceClient(live_server.url, Credential("unused", "unused"), attempts=2, backoff=0.01)


def flip(path: str, body: bytes) -> list[bytes]:
    altered = bytearray(body)
    altered[len(body) // 2] ^= 0x01
    return [bytes(altered)]


def test_the_honest_relay_delivers_an_upload_the_leader_verifies(live_server, relay, phones, central_round, tmp_path):
    _, (device, *_) = phones
    fetched = fetch(live_server.url, relay, tmp_path)
    assert fetched.keys is not None and fetched.relay.url == relay, fetched
    key = central_round.task_key
    assert client(live_server).upload(device.report(key, 3), relay=fetched.relay) == "accepted"
    assert verify(key) == 1 and rejections(key) == {}


def test_a_capsule_the_relay_alters_is_refused_and_the_device_keeps_its_report(
    live_server, relay, attackers, phones, central_round, tmp_path
) -> None:
    _, (device, *_) = phones
    fetched = fetch(live_server.url, relay, tmp_path)
    tamperer = attackers(target=live_server.url, alter=flip)
    report = device.report(central_round.task_key, 3)
    with pytest.raises(ClientError) as refused:
        client(live_server).upload(report, relay=RelayRoute(f"{tamperer.url}/api/ohttp/", fetched.relay.gateway))
    assert refused.value.code == "relay_refused" and refused.value.code in TRANSIENT_CODES  # kept for a later pass
    assert not PendingReport.objects.exists()
    # The next pass, through the honest relay: delivered once.
    assert client(live_server).upload(report, relay=fetched.relay) == "accepted"
    assert verify(central_round.task_key) == 1 and rejections(central_round.task_key) == {}


def test_a_capsule_the_relay_replays_is_counted_once(
    live_server, relay, attackers, phones, central_round, tmp_path
) -> None:
    _, (device, *_) = phones
    fetched = fetch(live_server.url, relay, tmp_path)
    replayer = attackers(target=live_server.url, alter=lambda path, body: [body, body])
    key = central_round.task_key
    route = RelayRoute(f"{replayer.url}/api/ohttp/", fetched.relay.gateway)
    assert client(live_server).upload(device.report(key, 5), relay=route) == "accepted"
    assert PendingReport.objects.count() == 2  # the gateway keeps no record of capsules ...
    assert verify(key) == 2
    assert rejections(key) == {"leader": {"token_reused": 1}}  # ... the report's token is the replay guard
    assert LeaderShare.objects.get().reports == 1


def test_an_answer_the_relay_alters_is_not_believed(live_server, relay, attackers, phones, central_round, tmp_path):
    _, (device, *_) = phones
    fetched = fetch(live_server.url, relay, tmp_path)
    liar = attackers(target=live_server.url, alter_answer=lambda path, content: content[:-1] + bytes([content[-1] ^ 1]))
    key = central_round.task_key
    with pytest.raises(ClientError) as refused:
        client(live_server).upload(
            device.report(key, 2), relay=RelayRoute(f"{liar.url}/api/ohttp/", fetched.relay.gateway)
        )
    assert refused.value.code == "relay_answer_invalid" and refused.value.code in TRANSIENT_CODES
    # Each attempt was sealed afresh and reached the leader; one report counts.
    posted = [seen.body for seen in liar.seen if seen.method == "POST"]
    assert len(posted) == 2 and posted[0] != posted[1]
    assert verify(key) == 2 and rejections(key) == {"leader": {"token_reused": 1}}
    assert LeaderShare.objects.get().reports == 1


def _own_gateway_key() -> bytes:
    private, _ = hpke.key_pair_generate()
    config = ohttp.key_config_for(
        private, key_id=7, algorithms=((ohttp.KDF_HKDF_SHA256, ohttp.AEAD_CHACHA20_POLY1305),)
    )
    return ohttp.key_configs_encode([config])


def test_a_gateway_key_the_relay_serves_is_refused(live_server, relay, attackers, tmp_path) -> None:
    own = (200, ohttp.KEYS_MEDIA_TYPE, _own_gateway_key())
    mallory = attackers(target=relay, replace={"/leader/api/ohttp/keys": own})
    fetched = fetch(live_server.url, mallory.url, tmp_path)
    assert fetched.keys is None and fetched.relay is None and fetched.reason == KEY_INCONSISTENT
    assert "gateway" in fetched.detail
    assert not (tmp_path / "aggregator-keys.json").exists()  # nothing pinned either


@pytest.mark.parametrize(
    ("path", "answer", "named"),
    [
        ("/api/ohttp/keys", lambda: (200, ohttp.KEYS_MEDIA_TYPE, _own_gateway_key()), "gateway"),
        (
            "/hpke_config",
            lambda: (200, MEDIA_TYPE, config_list_encode([config_of(hpke.key_pair_generate()[1])])),
            "leader",
        ),
    ],
)
def test_a_key_the_leader_serves_one_device_alone_is_refused(
    live_server, relay, attackers, tmp_path, path, answer, named
) -> None:
    # The leader's operator answers this device's own requests (its address) with a key of its own,
    # to know its uploads when they arrive through the relay; the relay's copy is everyone's.
    singled_out = attackers(target=live_server.url, replace={path: answer()})
    fetched = fetch(singled_out.url, relay, tmp_path)
    assert fetched.keys is None and fetched.reason == KEY_INCONSISTENT
    assert f"{named} keys" in fetched.detail


def test_a_pinned_gateway_key_id_that_comes_with_another_key_is_refused(live_server, relay, tmp_path) -> None:
    assert fetch(live_server.url, relay, tmp_path).keys is not None
    pins = json.loads((tmp_path / "aggregator-keys.json").read_text())
    (key_id,) = pins["aggregators"]["gateway"]
    pins["aggregators"]["gateway"][key_id] = "AAAA" + pins["aggregators"]["gateway"][key_id][4:]
    (tmp_path / "aggregator-keys.json").write_text(json.dumps(pins))
    fetched = fetch(live_server.url, relay, tmp_path)
    assert fetched.keys is None and fetched.reason == KEY_CHANGED and "gateway" in fetched.detail
