"""The server decodes a report's base64 with pybase64 (pfs_device.wire, aggregation.dap): 50 times
the standard library's speed on a 25 KB share. It must never take what the standard library
refuses, and must give the same bytes for what both take."""

from __future__ import annotations

import base64
import binascii

import pybase64
import pytest

from aggregation import dap

CASES = [
    b"",
    b"QQ==",
    b"QUI=",
    b"QUJD",
    b"QUJDRA==",
    b"QUJDRQ==",  # unused bits set in the last character: both take it, alike
    b"QUJDRA",
    b"QUJDRA=",
    b"QUJDRA===",
    b"QUJDRA====",
    b"=QUJDRA=",
    b"QUJD\nRA==",
    b"QUJD RA==",
    b" QUJDRA==",
    b"QUJDRA== ",
    b"QU-_RA==",
    b"QUJDRA==QUJD",
    b"QUJ\x00RA==",
    b"\xc3\x84QUJD",
    bytes(range(256)),
]


def _decode(decoder, data: bytes) -> bytes | None:
    try:
        return decoder(data, validate=True)
    except (binascii.Error, ValueError):
        return None


@pytest.mark.parametrize("data", CASES)
def test_pybase64_takes_only_what_the_standard_library_takes_and_decodes_it_alike(data) -> None:
    standard, fast = _decode(base64.b64decode, data), _decode(pybase64.b64decode, data)
    assert fast is None or fast == standard
    # The one difference: excess padding, which the standard library lets pass.
    if fast is None and standard is not None:
        assert data.rstrip(b"=") != data and len(data.rstrip(b"=")) % 4 in (0, 2, 3)


def test_pybase64_round_trips_a_share_as_the_standard_library_encodes_it() -> None:
    share = bytes(range(256)) * 73
    assert dap.b64(share) == base64.b64encode(share).decode("ascii")
    assert dap.unb64(base64.b64encode(share).decode("ascii"), "share") == share


@pytest.mark.parametrize("value", ["QUJDRA====", "QUJD RA==", "QU-_RA==", "QUJDRÄ==", 7])
def test_a_job_message_refuses_what_is_not_strict_base64(value) -> None:
    with pytest.raises(dap.MessageError, match="share"):
        dap.unb64(value, "share")
