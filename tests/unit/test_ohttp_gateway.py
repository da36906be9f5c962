"""The leader's Oblivious Gateway (aggregation.gateway, RFC 9458) through HTTP: an upload sealed in a
capsule is stored as a direct one; tampered, misdirected or replayed capsules are refused."""

from __future__ import annotations

import io
import json

import pytest
from rest_framework.test import APIClient

from aggregation.aggregators import LEADER
from aggregation.gateway import GATEWAY_KEY_INFO, gateway_key_of
from aggregation.models import LeaderShare, PendingReport
from aggregation.reports import rejections
from pfs_device import bhttp, ohttp, wire
from tests.unit import test_device_http
from tests.unit.test_device_http import verify

pytestmark = pytest.mark.django_db

GATEWAY = "/api/ohttp/"
# The real devices' fixtures: registered phones and an open collection of theirs.
phones = test_device_http.phones
phones_analysis = test_device_http.phones_analysis
central_round = test_device_http.central_round


def key_config() -> ohttp.KeyConfig:
    response = APIClient().get("/api/ohttp/keys")
    assert response.status_code == 200
    assert response["Content-Type"] == ohttp.KEYS_MEDIA_TYPE
    (config,) = ohttp.key_configs_decode(response.content)
    return config


def inner_request(body: bytes, *, method: bytes = b"POST", path: bytes = b"/api/device/reports/") -> bytes:
    return bhttp.request_encode(
        bhttp.Request(
            method=method,
            scheme=b"https",
            authority=b"leader.example",
            path=path,
            headers=((b"content-type", b"application/json"),),
            content=body,
        )
    )


def send(capsule: bytes, content_type: str = ohttp.REQUEST_MEDIA_TYPE):
    return APIClient().post(GATEWAY, data=capsule, content_type=content_type)


def through_gateway(inner: bytes, **choose) -> tuple[bhttp.Response, bytes]:
    """The inner response to ``inner`` sent through the gateway, and the capsule that carried it."""
    capsule, keying = ohttp.request_encapsulate(key_config(), inner, **choose)
    response = send(capsule)
    assert response.status_code == 200, response.content
    assert response["Content-Type"] == ohttp.RESPONSE_MEDIA_TYPE
    assert response["Cache-Control"] == "private, no-store"
    return bhttp.response_decode(ohttp.response_decapsulate(keying, response.content)), capsule


def test_the_key_configuration_is_the_leaders_derived_gateway_key() -> None:
    config = key_config()
    assert config == gateway_key_of(LEADER.private_key()).config
    assert (ohttp.KDF_HKDF_SHA256, ohttp.AEAD_CHACHA20_POLY1305) in config.algorithms
    # not the leader's share key itself: one X25519 key is never used by two protocols
    assert config.public_key != LEADER.public_key()
    assert GATEWAY_KEY_INFO.startswith(b"pfs-studio ohttp")


@pytest.mark.parametrize("aead_id", [ohttp.AEAD_CHACHA20_POLY1305, ohttp.AEAD_AES_128_GCM])
def test_an_upload_through_the_gateway_is_stored_like_a_direct_one(phones, central_round, aead_id: int) -> None:
    _, (device, *_) = phones
    body = wire.report_bytes(device.report(central_round.task_key, 2))
    response, _ = through_gateway(inner_request(body), aead_id=aead_id)
    assert response.status == 202
    assert json.loads(response.content) == {"received": True}
    assert (b"content-type", b"application/json") in response.headers
    assert bytes(PendingReport.objects.get().body) == body
    assert verify(central_round.task_key) == 1
    assert LeaderShare.objects.count() == 1


def test_a_replayed_capsule_is_stored_twice_and_its_token_counted_as_reused(phones, central_round) -> None:
    # The gateway keeps no record of capsules (RFC 9458 Section 6.5 leaves replay to the target): the
    # report's token is the replay protection, as for a direct upload replayed.
    _, (device, *_) = phones
    key = central_round.task_key
    _, capsule = through_gateway(inner_request(wire.report_bytes(device.report(key, 1))))
    replayed = send(capsule)
    assert replayed.status_code == 200  # sealed to the original client's keying: the replayer reads nothing
    assert PendingReport.objects.count() == 2
    assert verify(key) == 2
    assert rejections(key) == {"leader": {"token_reused": 1}}
    assert LeaderShare.objects.get().reports == 1


def test_a_tampered_capsule_is_refused_in_the_clear_and_nothing_is_stored(phones, central_round) -> None:
    _, (device, *_) = phones
    capsule, _ = ohttp.request_encapsulate(
        key_config(), inner_request(wire.report_bytes(device.report(central_round.task_key, 1)))
    )
    for position in (10, len(capsule) // 2, len(capsule) - 1):  # the enc, the ciphertext, the tag
        tampered = bytearray(capsule)
        tampered[position] ^= 0x01
        response = send(bytes(tampered))
        assert response.status_code == 400
        assert response.json()["code"] == "ohttp_invalid"
    truncated = send(capsule[:20])
    assert truncated.status_code == 400 and "truncated" in truncated.json()["detail"]
    assert not PendingReport.objects.exists()


def test_a_capsule_for_another_key_id_is_refused_as_an_ohttp_key_problem() -> None:
    config = key_config()
    other = ohttp.KeyConfig((config.key_id + 1) % 256, config.kem_id, config.public_key, config.algorithms)
    capsule, _ = ohttp.request_encapsulate(other, inner_request(b"{}"))
    response = send(capsule)
    assert response.status_code == 400
    assert response["Content-Type"] == "application/problem+json"
    assert response.json()["type"] == "https://iana.org/assignments/http-problem-types#ohttp-key"


def test_a_suite_the_gateway_does_not_offer_is_an_ohttp_key_problem() -> None:
    config = key_config()
    widened = ohttp.KeyConfig(config.key_id, config.kem_id, config.public_key, ((1, ohttp.AEAD_AES_256_GCM),))
    capsule, _ = ohttp.request_encapsulate(widened, inner_request(b"{}"))
    response = send(capsule)
    assert response.status_code == 400 and "AEAD 0x0002" in response.json()["title"]


@pytest.mark.parametrize(
    ("method", "path"),
    [
        (b"POST", b"/api/device/tokens/"),
        (b"GET", b"/api/device/tasks/"),
        (b"GET", b"/api/device/reports/"),
        (b"POST", b"/api/ohttp/"),
    ],
)
def test_a_request_to_another_path_inside_the_capsule_is_refused_sealed(phones, central_round, method, path) -> None:
    response, _ = through_gateway(inner_request(b"{}", method=method, path=path))
    assert response.status == 404
    assert json.loads(response.content)["code"] == "not_found"
    assert not PendingReport.objects.exists()


def test_a_capsule_that_is_not_binary_http_inside_is_refused_sealed() -> None:
    response, _ = through_gateway(b"\x02not a known-length message")
    assert response.status == 400 and "indeterminate-length" in json.loads(response.content)["detail"]


def test_an_expect_100_continue_is_refused_sealed(phones, central_round) -> None:
    inner = bhttp.request_encode(
        bhttp.Request(b"POST", b"https", b"leader", b"/api/device/reports/", headers=((b"Expect", b"100-continue"),))
    )
    response, _ = through_gateway(inner)
    assert response.status == 400


def test_a_refused_upload_is_answered_sealed_with_the_uploads_own_answer(phones, central_round) -> None:
    response, _ = through_gateway(inner_request(b"not json"))
    assert response.status == 400
    assert json.loads(response.content)["fields"] == {"non_field_errors": ["The body is not JSON."]}


def test_another_content_type_is_refused() -> None:
    response = send(b"\x00" * 60, content_type="application/octet-stream")
    assert response.status_code == 415
    assert APIClient().get(GATEWAY).status_code == 405


def test_a_crash_in_the_upload_path_is_answered_sealed(phones, central_round, monkeypatch) -> None:
    def crash(meta, read):
        raise RuntimeError("boom")

    monkeypatch.setattr("aggregation.intake.upload_answer", crash)
    response, _ = through_gateway(inner_request(b"{}"))
    assert response.status == 500


def test_the_gateway_reads_its_keys_once_a_second_and_at_once_after_a_rotation(
    phones, central_round, monkeypatch
) -> None:
    # Reading the key store for every capsule was most of the gateway's cost (bench/results/upload_relay.md).
    from aggregation import gateway
    from aggregation.key_rotation import keys_rotate

    _, devices = phones  # one report each: the issuer signs one token per device and collection
    key = central_round.task_key
    reads = []
    monkeypatch.setattr(gateway, "gateway_keys", lambda real=gateway.gateway_keys: reads.append(1) or real())
    monkeypatch.setattr(gateway, "_kept", (float("-inf"), []))
    before = key_config()
    for device in devices[:3]:
        response, _ = through_gateway(inner_request(wire.report_bytes(device.report(key, 1))))
        assert response.status == 202
    assert len(reads) == 1
    # A rotation: the first capsule sealed to the new key reads the keys again and opens; one sealed
    # to the retired key still opens (a device with the configuration of an hour ago).
    keys_rotate(role="leader")
    after = key_config()
    assert after != before
    for config, device in ((after, devices[3]), (before, devices[4])):
        capsule, keying = ohttp.request_encapsulate(config, inner_request(wire.report_bytes(device.report(key, 4))))
        answer = send(capsule)
        assert answer.status_code == 200
        assert bhttp.response_decode(ohttp.response_decapsulate(keying, answer.content)).status == 202
    assert len(reads) == 2


@pytest.mark.django_db(transaction=True)  # the fast path checks the connection as a request would
def test_the_wsgi_fast_path_answers_a_capsule_without_django(phones, central_round) -> None:
    # As the direct upload (test_device_http): pfs_web.wsgi serves POST /api/ohttp/ before Django's middleware.
    from pfs_web.wsgi import application

    _, (device, *_) = phones
    body = wire.report_bytes(device.report(central_round.task_key, 2))
    capsule, keying = ohttp.request_encapsulate(key_config(), inner_request(body))
    answered = {}

    def call(payload: bytes, length: int, content_type: str = ohttp.REQUEST_MEDIA_TYPE) -> bytes:
        environ = {
            "REQUEST_METHOD": "POST",
            "PATH_INFO": GATEWAY,
            "CONTENT_TYPE": content_type,
            "CONTENT_LENGTH": str(length),
            "REMOTE_ADDR": "192.0.2.7",
            "wsgi.input": io.BytesIO(payload),
        }
        chunks = application(environ, lambda status, headers: answered.update(status=status, headers=dict(headers)))
        return b"".join(chunks)

    sealed = call(capsule, len(capsule))
    assert answered["status"] == "200 OK" and answered["headers"]["Content-Type"] == ohttp.RESPONSE_MEDIA_TYPE
    assert answered["headers"]["Cache-Control"] == "private, no-store"
    assert bhttp.response_decode(ohttp.response_decapsulate(keying, sealed)).status == 202
    assert bytes(PendingReport.objects.get().body) == body
    refused = json.loads(call(b"", 1_048_576 + 4_097))  # refused on its declared length: never read
    assert answered["status"] == "413 Request Entity Too Large" and refused["code"] == "payload_too_large"
    assert json.loads(call(capsule, len(capsule), "application/json"))["code"] == "unsupported_media_type"
    tampered = bytearray(capsule)
    tampered[-1] ^= 1
    assert json.loads(call(bytes(tampered), len(capsule)))["code"] == "ohttp_invalid"
    assert PendingReport.objects.count() == 1
