"""pfs_device.bhttp: Binary HTTP (RFC 9292) known-length messages, variable-length integers, and the
refusal of everything else with a clear error."""

from __future__ import annotations

import pytest

from pfs_device import bhttp

POST = bhttp.Request(
    method=b"POST",
    scheme=b"https",
    authority=b"leader.example",
    path=b"/api/device/reports/",
    headers=((b"content-type", b"application/json"), (b"x-repeat", b"1"), (b"x-repeat", b"2")),
    content=b'{"report": 1}',
    trailers=((b"x-trailer", b"t"),),
)


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        # RFC 9000 Appendix A.1's examples, and each length's bounds
        (37, "25"),
        (15293, "7bbd"),
        (494878333, "9d7f3e7d"),
        (151288809941952652, "c2197c5eff14e88c"),
        (0, "00"),
        (63, "3f"),
        (64, "4040"),
        (16383, "7fff"),
        (16384, "80004000"),
        (2**62 - 1, "ffffffffffffffff"),
    ],
)
def test_varints_encode_and_decode_as_rfc_9000(value: int, encoded: str) -> None:
    assert bhttp.varint_encode(value).hex() == encoded
    assert bhttp.varint_decode(bytes.fromhex(encoded)) == (value, len(encoded) // 2)


@pytest.mark.parametrize("value", [-1, 2**62])
def test_varints_out_of_range_are_refused(value: int) -> None:
    with pytest.raises(ValueError, match="variable-length"):
        bhttp.varint_encode(value)


def test_a_truncated_varint_is_refused() -> None:
    with pytest.raises(bhttp.MalformedMessage, match="truncated"):
        bhttp.varint_decode(bytes.fromhex("c2197c"))


def test_a_request_with_every_section_round_trips() -> None:
    assert bhttp.request_decode(bhttp.request_encode(POST)) == POST


def test_a_request_without_headers_content_or_trailers_is_its_control_data() -> None:
    # RFC 9458 Appendix A's GET: the empty sections at the end are left out (RFC 9292 Section 3.8)
    get = bhttp.Request(method=b"GET", scheme=b"https", authority=b"example.com", path=b"/")
    assert bhttp.request_encode(get).hex() == "00034745540568747470730b6578616d706c652e636f6d012f"
    assert bhttp.request_decode(bytes.fromhex("00034745540568747470730b6578616d706c652e636f6d012f")) == get


def test_an_empty_section_before_a_non_empty_one_is_kept() -> None:
    only_content = bhttp.Request(method=b"POST", scheme=b"https", authority=b"a", path=b"/", content=b"x")
    encoded = bhttp.request_encode(only_content)
    assert encoded.endswith(b"\x00\x01x")  # empty header section, then the content
    assert bhttp.request_decode(encoded) == only_content


def test_zero_padding_is_accepted_and_non_zero_padding_refused() -> None:
    encoded = bhttp.request_encode(POST)
    assert bhttp.request_decode(encoded + bytes(10)) == POST
    with pytest.raises(bhttp.MalformedMessage, match="non-zero bytes after the message"):
        bhttp.request_decode(encoded + b"\x00\x01")


def test_a_response_round_trips_with_its_informational_responses_kept() -> None:
    response = bhttp.Response(
        status=202,
        headers=((b"content-type", b"application/json"),),
        content=b'{"status": "accepted"}',
        informational=(bhttp.InformationalResponse(103, ((b"link", b"</x>"),)), bhttp.InformationalResponse(100)),
    )
    decoded = bhttp.response_decode(bhttp.response_encode(response))
    assert decoded == response
    assert [interim.status for interim in decoded.informational] == [103, 100]


def test_a_bare_200_is_three_bytes() -> None:
    assert bhttp.response_encode(bhttp.Response(status=200)).hex() == "0140c8"
    assert bhttp.response_decode(bytes.fromhex("0140c8")) == bhttp.Response(status=200)


@pytest.mark.parametrize("cut", range(1, 40))
def test_a_request_cut_inside_a_section_is_refused_as_truncated(cut: int) -> None:
    encoded = bhttp.request_encode(POST)
    if len(encoded) - cut in _section_ends(encoded):
        # a cut at a section's end is a valid message whose later sections are empty (Section 3.8)
        assert bhttp.request_decode(encoded[:-cut]).trailers == ()
        return
    with pytest.raises(bhttp.MalformedMessage, match="truncated"):
        bhttp.request_decode(encoded[:-cut])


def _section_ends(encoded: bytes) -> set[int]:
    """Where POST's control data, header section, content and trailers end."""
    headers_start = encoded.index(b"/api/device/reports/") + len(b"/api/device/reports/")
    header_length, used = bhttp.varint_decode(encoded[headers_start:])
    content_start = headers_start + used + header_length
    content_length, used = bhttp.varint_decode(encoded[content_start:])
    return {headers_start, content_start, content_start + used + content_length, len(encoded)}


def test_a_truncated_response_names_what_is_missing() -> None:
    with pytest.raises(bhttp.MalformedMessage, match="status code"):
        bhttp.response_decode(b"\x01")
    with pytest.raises(bhttp.MalformedMessage, match="informational headers"):
        bhttp.response_decode(bhttp.varint_encode(1) + bhttp.varint_encode(103))


@pytest.mark.parametrize("framing", [2, 3])
def test_indeterminate_length_messages_are_refused_clearly(framing: int) -> None:
    decode = bhttp.request_decode if framing == 2 else bhttp.response_decode
    with pytest.raises(bhttp.IndeterminateLength, match="indeterminate-length"):
        decode(bytes([framing]) + b"\x00" * 8)


def test_a_request_is_not_read_as_a_response_nor_the_reverse() -> None:
    with pytest.raises(bhttp.MalformedMessage, match="framing indicator 1, expected 0"):
        bhttp.request_decode(bytes.fromhex("0140c8"))
    with pytest.raises(bhttp.MalformedMessage, match="framing indicator 0, expected 1"):
        bhttp.response_decode(bhttp.request_encode(POST))


def test_unknown_framing_and_bad_status_codes_are_refused() -> None:
    with pytest.raises(bhttp.MalformedMessage, match="framing indicator 7"):
        bhttp.request_decode(b"\x07")
    with pytest.raises(bhttp.MalformedMessage, match="neither informational nor final"):
        bhttp.response_decode(bhttp.varint_encode(1) + bhttp.varint_encode(99))
    with pytest.raises(bhttp.BinaryHttpError, match="not 200 to 599"):
        bhttp.response_encode(bhttp.Response(status=600))
    with pytest.raises(bhttp.BinaryHttpError, match="not 1xx"):
        bhttp.response_encode(bhttp.Response(status=200, informational=(bhttp.InformationalResponse(200),)))


def test_an_empty_field_name_is_refused_both_ways() -> None:
    with pytest.raises(bhttp.BinaryHttpError, match="field name is empty"):
        bhttp.request_encode(bhttp.Request(b"GET", b"https", b"a", b"/", headers=((b"", b"v"),)))
    # header section of 2 bytes: name length 0, value length 0
    encoded = bytes.fromhex("00") + b"".join(bytes([1]) + part for part in (b"G", b"h", b"a", b"/")) + b"\x02\x00\x00"
    with pytest.raises(bhttp.MalformedMessage, match="field name is empty"):
        bhttp.request_decode(encoded)
