"""Binary HTTP messages (RFC 9292): the inner requests and responses of Oblivious HTTP (RFC 9458).

Known-length messages only (framing indicators 0 and 1, RFC 9292 Section 3.2): Oblivious HTTP
carries whole messages, and RFC 9458's worked example uses them. Indeterminate-length messages
(indicators 2 and 3) are refused with ``IndeterminateLength``, not guessed at.

Encoding, as RFC 9292 Section 3.8 allows, leaves out the trailing sections that are empty (header
fields, content, trailers): a GET with no header fields is its control data alone, a bare 200 is
``01 40c8`` — the forms of RFC 9458 Appendix A. Decoding treats sections missing at the end as
empty, and accepts padding after the message if it is all zero bytes (Section 3.8); anything else
after the message, or a section cut short, is a ``MalformedMessage``.

Field names and values are kept as bytes, in order, repeats included: this module frames messages,
it does not interpret HTTP.
"""

from __future__ import annotations

from dataclasses import dataclass, field

REQUEST_KNOWN_LENGTH = 0
RESPONSE_KNOWN_LENGTH = 1
REQUEST_INDETERMINATE_LENGTH = 2
RESPONSE_INDETERMINATE_LENGTH = 3
# QUIC variable-length integers (RFC 9000 Section 16): two high bits give the length (1, 2, 4 or 8
# bytes), the rest the value, so the largest is 2^62 - 1.
VARINT_MAX = (1 << 62) - 1

Fields = tuple[tuple[bytes, bytes], ...]


class BinaryHttpError(ValueError):
    """Not a Binary HTTP message this module reads or writes."""


class MalformedMessage(BinaryHttpError):
    """The bytes are not a valid known-length message: truncated, bad framing, non-zero padding."""


class IndeterminateLength(BinaryHttpError):
    """An indeterminate-length message (framing indicator 2 or 3): valid RFC 9292, not supported."""


@dataclass(frozen=True)
class Request:
    """A request's control data (RFC 9292 Section 3.4), header fields, content and trailers."""

    method: bytes
    scheme: bytes
    authority: bytes
    path: bytes
    headers: Fields = ()
    content: bytes = b""
    trailers: Fields = ()


@dataclass(frozen=True)
class InformationalResponse:
    """An interim 1xx response and its header fields (RFC 9292 Section 3.5.1)."""

    status: int
    headers: Fields = ()


@dataclass(frozen=True)
class Response:
    """A final response (status 200–599), with the informational responses before it, kept in order."""

    status: int
    headers: Fields = ()
    content: bytes = b""
    trailers: Fields = ()
    informational: tuple[InformationalResponse, ...] = field(default=())


# ---- variable-length integers (RFC 9000 Section 16) ----


def varint_encode(value: int) -> bytes:
    """The shortest QUIC variable-length encoding of ``value``; ValueError outside 0 .. 2^62 - 1."""
    if not 0 <= value <= VARINT_MAX:
        raise ValueError(f"{value} does not fit a variable-length integer (0 to 2^62 - 1)")
    for length, prefix in ((1, 0x00), (2, 0x40), (4, 0x80), (8, 0xC0)):
        if value < 1 << (8 * length - 2):
            encoded = bytearray(value.to_bytes(length, "big"))
            encoded[0] |= prefix
            return bytes(encoded)
    raise AssertionError("unreachable: VARINT_MAX fits 8 bytes")


class _Reader:
    """A cursor over a message; every read past its end is a MalformedMessage naming what was cut."""

    def __init__(self, data: bytes):
        self.data = data
        self.offset = 0

    def at_end(self) -> bool:
        return self.offset >= len(self.data)

    def varint(self, what: str) -> int:
        if self.at_end():
            raise MalformedMessage(f"truncated: {what} missing at byte {self.offset}")
        length = 1 << (self.data[self.offset] >> 6)
        raw = self.take(length, what)
        return int.from_bytes(bytes([raw[0] & 0x3F]) + raw[1:], "big")

    def take(self, length: int, what: str) -> bytes:
        end = self.offset + length
        if end > len(self.data):
            raise MalformedMessage(
                f"truncated: {what} needs {length} bytes at byte {self.offset}, {len(self.data) - self.offset} left"
            )
        chunk = self.data[self.offset : end]
        self.offset = end
        return chunk

    def prefixed(self, what: str) -> bytes:
        return self.take(self.varint(f"{what} length"), what)


def varint_decode(data: bytes) -> tuple[int, int]:
    """(value, bytes used) of the variable-length integer at the start of ``data``."""
    reader = _Reader(data)
    return reader.varint("integer"), reader.offset


# ---- encoding ----


def _prefixed(value: bytes) -> bytes:
    return varint_encode(len(value)) + value


def _field_section(fields: Fields) -> bytes:
    """A known-length field section (RFC 9292 Section 3.6): its length, then name/value pairs."""
    lines = []
    for name, value in fields:
        if not name:
            raise BinaryHttpError("a field name is empty")
        lines.append(_prefixed(name) + _prefixed(value))
    return _prefixed(b"".join(lines))


def _body(headers: Fields, content: bytes, trailers: Fields) -> bytes:
    """Header fields, content and trailers, the trailing empty ones left out (RFC 9292 Section 3.8)."""
    sections = [_field_section(headers), _prefixed(content), _field_section(trailers)]
    while sections and sections[-1] == b"\x00":
        sections.pop()
    return b"".join(sections)


def request_encode(request: Request) -> bytes:
    """The known-length Binary HTTP encoding of ``request`` (RFC 9292 Sections 3.2 and 3.4)."""
    control = b"".join(_prefixed(part) for part in (request.method, request.scheme, request.authority, request.path))
    return varint_encode(REQUEST_KNOWN_LENGTH) + control + _body(request.headers, request.content, request.trailers)


def response_encode(response: Response) -> bytes:
    """The known-length Binary HTTP encoding of ``response`` (RFC 9292 Sections 3.2 and 3.5)."""
    parts = [varint_encode(RESPONSE_KNOWN_LENGTH)]
    for interim in response.informational:
        if not 100 <= interim.status <= 199:
            raise BinaryHttpError(f"informational status {interim.status} is not 1xx")
        parts.append(varint_encode(interim.status) + _field_section(interim.headers))
    if not 200 <= response.status <= 599:
        raise BinaryHttpError(f"final status {response.status} is not 200 to 599")
    parts.append(varint_encode(response.status))
    parts.append(_body(response.headers, response.content, response.trailers))
    return b"".join(parts)


# ---- decoding ----


def _read_fields(reader: _Reader, what: str) -> Fields:
    """A known-length field section; absent at the message's end, it is empty (Section 3.8)."""
    if reader.at_end():
        return ()
    section = _Reader(reader.prefixed(what))
    fields = []
    while not section.at_end():
        name = section.prefixed(f"{what} field name")
        if not name:
            raise MalformedMessage(f"{what}: a field name is empty")
        fields.append((name, section.prefixed(f"{what} field value")))
    return tuple(fields)


def _read_content(reader: _Reader) -> bytes:
    return b"" if reader.at_end() else reader.prefixed("content")


def _check_padding(reader: _Reader) -> None:
    """After the message only zero bytes may follow (RFC 9292 Section 3.8)."""
    rest = reader.data[reader.offset :]
    if rest.strip(b"\x00"):
        raise MalformedMessage(f"non-zero bytes after the message at byte {reader.offset}")


def _read_framing(reader: _Reader, expected: int, indeterminate: int) -> None:
    framing = reader.varint("framing indicator")
    if framing == indeterminate:
        raise IndeterminateLength(f"framing indicator {framing}: indeterminate-length messages are not supported")
    if framing != expected:
        raise MalformedMessage(f"framing indicator {framing}, expected {expected}")


def request_decode(data: bytes) -> Request:
    """The request of a known-length Binary HTTP message; MalformedMessage or IndeterminateLength."""
    reader = _Reader(data)
    _read_framing(reader, REQUEST_KNOWN_LENGTH, REQUEST_INDETERMINATE_LENGTH)
    method, scheme, authority, path = (reader.prefixed(part) for part in ("method", "scheme", "authority", "path"))
    request = Request(
        method=method,
        scheme=scheme,
        authority=authority,
        path=path,
        headers=_read_fields(reader, "header section"),
        content=_read_content(reader),
        trailers=_read_fields(reader, "trailer section"),
    )
    _check_padding(reader)
    return request


def response_decode(data: bytes) -> Response:
    """The final response of a known-length Binary HTTP message, with its informational responses."""
    reader = _Reader(data)
    _read_framing(reader, RESPONSE_KNOWN_LENGTH, RESPONSE_INDETERMINATE_LENGTH)
    informational = []
    while True:
        status = reader.varint("status code")
        if 200 <= status <= 599:
            break
        if not 100 <= status <= 199:
            raise MalformedMessage(f"status code {status} is neither informational nor final")
        informational.append(InformationalResponse(status, _read_required_fields(reader, "informational headers")))
    response = Response(
        status=status,
        headers=_read_fields(reader, "header section"),
        content=_read_content(reader),
        trailers=_read_fields(reader, "trailer section"),
        informational=tuple(informational),
    )
    _check_padding(reader)
    return response


def _read_required_fields(reader: _Reader, what: str) -> Fields:
    """An informational response's header section: a final response must follow, so it cannot be
    the truncated end of the message."""
    if reader.at_end():
        raise MalformedMessage(f"truncated: {what} missing at byte {reader.offset}")
    return _read_fields(reader, what)
