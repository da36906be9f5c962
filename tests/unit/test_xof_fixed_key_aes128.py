"""XofFixedKeyAes128 (privacy.vdaf.xof, draft-irtf-cfrg-vdaf-20 Section 6.2.2): the draft's vector, and the
stream read in pieces equal to the draft's block-by-block listing, written out here one AES call per block."""

from __future__ import annotations

import json

import pytest
from Crypto.Hash import TurboSHAKE128
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from privacy.vdaf.field import Field64, Field128, Field255
from privacy.vdaf.xof import XofFixedKeyAes128
from tests.vectors import VDAF_VECTORS, vdaf_vectors_required

SEED = bytes(range(16))
DST = b"domain separation tag"
BINDER = b"binder string"


def _listing_next(seed: bytes, dst: bytes, binder: bytes, consumed: int, length: int) -> bytes:
    """The draft's XofFixedKeyAes128.next, transcribed: one hash_block per block in the range it names."""
    derive = TurboSHAKE128.new(domain=2)
    derive.update(len(dst).to_bytes(2, "little") + dst + binder)
    key = derive.read(16)
    blocks = []
    for i in range(consumed // 16, (consumed + length) // 16 + 1):
        block = bytes(a ^ b for a, b in zip(seed, i.to_bytes(16, "little"), strict=True))
        lo, hi = block[:8], block[8:]
        sigma = hi + bytes(a ^ b for a, b in zip(hi, lo, strict=True))
        encrypted = Cipher(algorithms.AES128(key), modes.ECB()).encryptor().update(sigma)  # noqa: S305 - the listing
        blocks.append(bytes(a ^ b for a, b in zip(encrypted, sigma, strict=True)))
    offset = consumed % 16
    return b"".join(blocks)[offset : offset + length]


def test_xof_fixed_key_aes128_reproduces_the_drafts_vector() -> None:
    vdaf_vectors_required()
    data = json.loads((VDAF_VECTORS / "XofFixedKeyAes128.json").read_text())
    seed, dst, binder = (bytes.fromhex(data[key]) for key in ("seed", "dst", "binder"))
    assert XofFixedKeyAes128.derive_seed(seed, dst, binder).hex() == data["derived_seed"]
    vec = XofFixedKeyAes128.expand_into_vec(Field128, seed, dst, binder, data["length"])
    assert Field128.encode_vec(vec).hex() == data["expanded_vec_field128"]


def test_reads_in_pieces_continue_one_stream_as_the_drafts_listing_does() -> None:
    xof = XofFixedKeyAes128(SEED, DST, BINDER)
    consumed = 0
    for length in (3, 13, 16, 1, 40, 0, 7, 33):
        assert xof.next(length) == _listing_next(SEED, DST, BINDER, consumed, length), (consumed, length)
        consumed += length


def test_the_key_depends_on_the_binder_and_the_dst() -> None:
    out = XofFixedKeyAes128(SEED, DST, BINDER).next(32)
    assert XofFixedKeyAes128(SEED, DST, BINDER + b"!").next(32) != out
    assert XofFixedKeyAes128(SEED, DST + b"!", BINDER).next(32) != out


def test_seeds_other_than_16_bytes_are_refused() -> None:
    with pytest.raises(ValueError, match="16 bytes"):
        XofFixedKeyAes128(bytes(32), DST, BINDER)


@pytest.mark.parametrize("field", [Field64, Field255])
def test_field_vectors_are_below_the_modulus(field: type) -> None:
    vec = XofFixedKeyAes128.expand_into_vec(field, SEED, DST, BINDER, 50)
    assert len(vec) == 50
    assert all(0 <= x < field.MODULUS for x in vec)
