"""pfs_device.ohttp: RFC 9458 Appendix A reproduced byte for byte, and the attacks the encapsulation
must refuse (altered bits, another key id, another request's response, truncation).

The vector (tests/vectors/ohttp/rfc9458_appendix_a.json) fixes the client's ephemeral key and the
gateway's response nonce, so every value of the worked example can be recomputed here.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pfs_device import bhttp, hpke, ohttp

VECTOR = json.loads((Path(__file__).parents[1] / "vectors" / "ohttp" / "rfc9458_appendix_a.json").read_text())


def _hex(name: str) -> bytes:
    return bytes.fromhex(VECTOR[name])


SERVER_KEY = _hex("server_private_key")
CONFIG = ohttp.key_config_for(
    SERVER_KEY, key_id=VECTOR["suite"]["key_id"], algorithms=tuple(map(tuple, VECTOR["suite"]["offered"]))
)


def _vector_request() -> tuple[bytes, ohttp.ResponseKeying]:
    return ohttp.request_encapsulate(
        CONFIG,
        _hex("bhttp_request"),
        kdf_id=VECTOR["suite"]["kdf_id"],
        aead_id=VECTOR["suite"]["aead_id"],
        ephemeral_private_key=_hex("ephemeral_private_key"),
    )


# ---- RFC 9458 Appendix A, value by value ----


def test_the_vector_names_its_source() -> None:
    assert "RFC 9458" in VECTOR["source"] and "Appendix A" in VECTOR["source"]


def test_the_key_configuration_encodes_and_decodes_as_the_rfc_prints_it() -> None:
    assert ohttp.key_config_encode(CONFIG) == _hex("key_config")
    assert ohttp.key_config_decode(_hex("key_config")) == CONFIG
    assert CONFIG.kem_id == VECTOR["suite"]["kem_id"]


def test_the_ohttp_keys_list_prefixes_the_configuration_with_its_length() -> None:
    body = ohttp.key_configs_encode([CONFIG])
    assert body == len(_hex("key_config")).to_bytes(2, "big") + _hex("key_config")
    assert ohttp.key_configs_decode(body) == [CONFIG]


def test_the_binary_http_request_and_response_encode_as_the_rfc_prints_them() -> None:
    request = bhttp.Request(**{part: value.encode() for part, value in VECTOR["request"].items()})
    assert bhttp.request_encode(request) == _hex("bhttp_request")
    assert bhttp.request_decode(_hex("bhttp_request")) == request
    assert bhttp.response_encode(bhttp.Response(status=VECTOR["response"]["status"])) == _hex("bhttp_response")
    assert bhttp.response_decode(_hex("bhttp_response")).status == 200


def test_the_info_is_the_label_and_the_header() -> None:
    header = _hex("encapsulated_request")[: ohttp.HEADER_BYTES]
    assert ohttp.request_info(header) == _hex("info")


def test_the_encapsulated_request_from_the_given_ephemeral_key() -> None:
    encapsulated, keying = _vector_request()
    assert encapsulated == _hex("encapsulated_request")
    assert keying.enc == _hex("ephemeral_public_key")
    assert keying.secret == _hex("exported_secret")


def test_the_gateway_decapsulates_the_request_to_the_same_message_and_secret() -> None:
    message, keying = ohttp.request_decapsulate(_hex("encapsulated_request"), config=CONFIG, private_key=SERVER_KEY)
    assert message == _hex("bhttp_request")
    assert keying.enc == _hex("ephemeral_public_key")
    assert keying.secret == _hex("exported_secret")


def test_the_response_keys_match_the_intermediate_values() -> None:
    _, keying = _vector_request()
    assert keying.enc + _hex("response_nonce") == _hex("salt")
    prk, key, nonce = ohttp.response_keys(keying, _hex("response_nonce"))
    assert (prk, key, nonce) == (_hex("prk"), _hex("aead_key"), _hex("aead_nonce"))


def test_the_encapsulated_response_from_the_given_nonce_and_its_decapsulation() -> None:
    _, gateway_keying = ohttp.request_decapsulate(_hex("encapsulated_request"), config=CONFIG, private_key=SERVER_KEY)
    encapsulated = ohttp.response_encapsulate(
        gateway_keying, _hex("bhttp_response"), response_nonce=_hex("response_nonce")
    )
    assert encapsulated == _hex("encapsulated_response")
    _, client_keying = _vector_request()
    assert ohttp.response_decapsulate(client_keying, _hex("encapsulated_response")) == _hex("bhttp_response")


# ---- attacks ----


@pytest.mark.parametrize("bit", range(len(VECTOR["encapsulated_request"]) * 4))
def test_a_flipped_bit_anywhere_in_the_request_is_refused(bit: int) -> None:
    altered = _flip(_hex("encapsulated_request"), bit)
    # the header's bits change the key id (UnknownKeyId), the suite (UnsupportedAlgorithm) or the
    # info; the rest the enc or the ciphertext: all refused, never a message
    with pytest.raises(ohttp.OhttpError):
        ohttp.request_decapsulate(altered, config=CONFIG, private_key=SERVER_KEY)


@pytest.mark.parametrize("bit", range(len(VECTOR["encapsulated_response"]) * 4))
def test_a_flipped_bit_anywhere_in_the_response_is_refused(bit: int) -> None:
    _, keying = _vector_request()
    with pytest.raises(ohttp.DecryptionFailed):
        ohttp.response_decapsulate(keying, _flip(_hex("encapsulated_response"), bit))


def _flip(data: bytes, bit: int) -> bytes:
    altered = bytearray(data)
    altered[bit // 8] ^= 1 << (bit % 8)
    return bytes(altered)


def test_a_request_to_another_key_id_is_refused() -> None:
    other = ohttp.KeyConfig(key_id=2, kem_id=CONFIG.kem_id, public_key=CONFIG.public_key, algorithms=CONFIG.algorithms)
    encapsulated, _ = ohttp.request_encapsulate(other, b"message")
    assert ohttp.request_key_id(encapsulated) == 2
    with pytest.raises(ohttp.UnknownKeyId, match="key id 2 is not this gateway's"):
        ohttp.request_decapsulate(encapsulated, config=CONFIG, private_key=SERVER_KEY)


def test_a_request_sealed_to_another_key_does_not_open() -> None:
    other_key, _ = _fresh_key()
    other = ohttp.key_config_for(other_key, key_id=CONFIG.key_id, algorithms=CONFIG.algorithms)
    encapsulated, _ = ohttp.request_encapsulate(other, b"message")
    with pytest.raises(ohttp.DecryptionFailed):
        ohttp.request_decapsulate(encapsulated, config=CONFIG, private_key=SERVER_KEY)


def test_a_suite_the_configuration_does_not_offer_is_refused() -> None:
    only_aes = ohttp.KeyConfig(
        key_id=CONFIG.key_id,
        kem_id=CONFIG.kem_id,
        public_key=CONFIG.public_key,
        algorithms=((ohttp.KDF_HKDF_SHA256, ohttp.AEAD_AES_128_GCM),),
    )
    encapsulated, _ = ohttp.request_encapsulate(CONFIG, b"message", aead_id=ohttp.AEAD_CHACHA20_POLY1305)
    with pytest.raises(ohttp.UnsupportedAlgorithm, match="AEAD 0x0003"):
        ohttp.request_decapsulate(encapsulated, config=only_aes, private_key=SERVER_KEY)
    with pytest.raises(ohttp.UnsupportedAlgorithm, match="no supported KDF/AEAD pair"):
        ohttp.request_encapsulate(only_aes, b"message", aead_id=ohttp.AEAD_CHACHA20_POLY1305)


def test_unknown_algorithms_are_refused_by_name() -> None:
    unknown_kdf = ohttp.KeyConfig(CONFIG.key_id, CONFIG.kem_id, CONFIG.public_key, ((0x0002, 0x0001),))
    with pytest.raises(ohttp.UnsupportedAlgorithm, match="no supported KDF/AEAD pair"):
        ohttp.request_encapsulate(unknown_kdf, b"message")
    header = bytes([CONFIG.key_id]) + bytes.fromhex("0020 0001 0009")
    with pytest.raises(ohttp.UnsupportedAlgorithm, match="AEAD 0x0009"):
        ohttp.request_decapsulate(header + bytes(64), config=CONFIG, private_key=SERVER_KEY)
    with pytest.raises(ohttp.UnsupportedAlgorithm, match="KEM 0x0010"):
        ohttp.key_config_decode(bytes.fromhex("01 0010") + bytes(65) + bytes.fromhex("0004 0001 0001"))


def test_a_response_opened_with_another_requests_keying_fails() -> None:
    first, _ = ohttp.request_encapsulate(CONFIG, b"first")
    _, second_keying = ohttp.request_encapsulate(CONFIG, b"second")
    _, gateway_keying = ohttp.request_decapsulate(first, config=CONFIG, private_key=SERVER_KEY)
    response = ohttp.response_encapsulate(gateway_keying, b"answer to the first")
    with pytest.raises(ohttp.DecryptionFailed):
        ohttp.response_decapsulate(second_keying, response)


def test_an_empty_request_has_no_key_id() -> None:
    with pytest.raises(ohttp.MalformedMessage, match="empty"):
        ohttp.request_key_id(b"")


@pytest.mark.parametrize("length", [0, 1, 6, 7, 38, 39, 54])
def test_truncated_requests_fail_with_a_clear_error(length: int) -> None:
    with pytest.raises(ohttp.MalformedMessage, match="truncated"):
        ohttp.request_decapsulate(_hex("encapsulated_request")[:length], config=CONFIG, private_key=SERVER_KEY)


def test_a_request_truncated_inside_its_ciphertext_does_not_open() -> None:
    with pytest.raises(ohttp.DecryptionFailed):
        ohttp.request_decapsulate(_hex("encapsulated_request")[:-1], config=CONFIG, private_key=SERVER_KEY)


@pytest.mark.parametrize("length", [0, 16, 31])
def test_truncated_responses_fail_with_a_clear_error(length: int) -> None:
    _, keying = _vector_request()
    with pytest.raises(ohttp.MalformedMessage, match="truncated"):
        ohttp.response_decapsulate(keying, _hex("encapsulated_response")[:length])


@pytest.mark.parametrize(
    "body",
    [
        b"\x00",  # a length cut short
        b"\x00\x2e" + bytes.fromhex(VECTOR["key_config"]),  # a length one longer than the configuration
        b"\x00\x2c" + bytes.fromhex(VECTOR["key_config"])[:-1],  # a configuration cut inside its algorithms
        b"",  # no configuration
    ],
)
def test_malformed_key_configuration_lists_are_refused(body: bytes) -> None:
    with pytest.raises(ohttp.MalformedKeyConfig):
        ohttp.key_configs_decode(body)


def test_a_list_skips_configurations_it_does_not_support() -> None:
    unsupported = bytes.fromhex("02 0010") + bytes(65) + bytes.fromhex("0004 0001 0001")
    body = len(unsupported).to_bytes(2, "big") + unsupported + ohttp.key_configs_encode([CONFIG])
    assert ohttp.key_configs_decode(body) == [CONFIG]


# ---- round trips with fresh randomness ----


def _fresh_key() -> tuple[bytes, bytes]:
    return hpke.key_pair_generate()


@pytest.mark.parametrize("aead_id", [ohttp.AEAD_AES_128_GCM, ohttp.AEAD_AES_256_GCM, ohttp.AEAD_CHACHA20_POLY1305])
def test_a_round_trip_with_fresh_randomness(aead_id: int) -> None:
    private_key, _ = _fresh_key()
    config = ohttp.key_config_for(private_key, key_id=7, algorithms=((ohttp.KDF_HKDF_SHA256, aead_id),))
    config = ohttp.key_configs_decode(ohttp.key_configs_encode([config]))[0]  # as a client reads it
    request = bhttp.request_encode(bhttp.Request(b"POST", b"https", b"leader", b"/api/device/reports/", content=b"{}"))
    encapsulated, client_keying = ohttp.request_encapsulate(config, request)
    again, _ = ohttp.request_encapsulate(config, request)
    assert encapsulated != again  # a fresh ephemeral key each time: two requests are not linkable
    message, gateway_keying = ohttp.request_decapsulate(encapsulated, config=config, private_key=private_key)
    assert bhttp.request_decode(message).path == b"/api/device/reports/"
    response = bhttp.response_encode(bhttp.Response(status=202, content=b'{"status": "accepted"}'))
    sealed = ohttp.response_encapsulate(gateway_keying, response)
    assert len(sealed) == ohttp.response_nonce_bytes(aead_id) + len(response) + ohttp.TAG_BYTES
    assert ohttp.response_decapsulate(client_keying, sealed) == response
    assert ohttp.response_encapsulate(gateway_keying, response) != sealed  # a fresh response nonce


def test_a_response_nonce_of_the_wrong_length_is_refused() -> None:
    _, keying = _vector_request()
    with pytest.raises(ValueError, match="a response nonce is 16 bytes"):
        ohttp.response_encapsulate(keying, b"", response_nonce=bytes(12))
