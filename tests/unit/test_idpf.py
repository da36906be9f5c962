"""The IDPF of BBCGGI21 (privacy.vdaf.idpf, draft-irtf-cfrg-vdaf-20 Section 8.3): the draft's IdpfBBCGGI21_0.json
reproduced through gen, its public share decoded and evaluated, the batched tree walk checked against the point
function it must share (every prefix of a level, in any order), and malformed public shares refused."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from privacy.vdaf.errors import DecodeError, VdafError
from privacy.vdaf.field import Field, Field64, Field255
from privacy.vdaf.idpf import IdpfBBCGGI21, _Hashing
from privacy.vdaf.xof import XofFixedKeyAes128, XofTurboShake128
from tests.vectors import VDAF_VECTORS, vdaf_vectors_required

CTX = b"pfs studio tests"
NONCE = bytes(range(16))


def _vector() -> dict:
    vdaf_vectors_required()
    return json.loads((VDAF_VECTORS / "IdpfBBCGGI21_0.json").read_text())


def _betas(data: dict) -> tuple[list[list[int]], list[int]]:
    return [[int(x) for x in beta] for beta in data["beta_inner"]], [int(x) for x in data["beta_leaf"]]


def _all_prefixes(length: int) -> list[tuple[bool, ...]]:
    return [tuple(bool(n >> (length - 1 - i) & 1) for i in range(length)) for n in range(2**length)]


def _values(idpf: IdpfBBCGGI21, public_share, keys, level: int, prefixes, nonce: bytes = NONCE) -> list[list[int]]:  # noqa: ANN001
    """The two aggregators' shares added: the value the IDPF shares at each prefix."""
    p = idpf.current_field(level).MODULUS
    shares = [idpf.eval(j, public_share, keys[j], level, prefixes, CTX, nonce) for j in range(2)]
    return [[(x + y) % p for x, y in zip(a, b, strict=True)] for a, b in zip(*shares, strict=True)]


def test_gen_reproduces_the_drafts_public_share_and_keys() -> None:
    data = _vector()
    beta_inner, beta_leaf = _betas(data)
    idpf = IdpfBBCGGI21(data["bits"], len(beta_leaf))
    rand = bytes.fromhex("".join(data["keys"]))
    public_share, keys = idpf.gen(
        data["alpha"], beta_inner, beta_leaf, bytes.fromhex(data["ctx"]), bytes.fromhex(data["nonce"]), rand
    )
    assert idpf.encode_public_share(public_share).hex() == data["public_share"]
    assert [key.hex() for key in keys] == data["keys"]


def test_the_drafts_public_share_decodes_and_encodes_back_to_the_same_bytes() -> None:
    data = _vector()
    idpf = IdpfBBCGGI21(data["bits"], 2)
    encoded = bytes.fromhex(data["public_share"])
    assert idpf.encode_public_share(idpf.decode_public_share(encoded)) == encoded


def test_a_decoded_public_share_reads_as_the_list_of_correction_words_it_encodes() -> None:
    """decode_public_share keeps arrays and builds a level's word when read: every way of reading it
    (a level, a negative index, a slice, iteration) gives the words gen made, values as field elements."""
    idpf = IdpfBBCGGI21(bits=10, value_len=2)
    rng = random.Random(3)
    alpha = tuple(rng.random() < 0.5 for _ in range(10))
    beta_inner = [[rng.randrange(Field64.MODULUS) for _ in range(2)] for _ in range(9)]
    beta_leaf = [rng.randrange(Field255.MODULUS) for _ in range(2)]
    public, _ = idpf.gen(alpha, beta_inner, beta_leaf, b"ctx", bytes(16), bytes(idpf.RAND_SIZE))
    decoded = idpf.decode_public_share(idpf.encode_public_share(public))
    assert decoded == public and list(decoded) == public and len(decoded) == 10
    assert decoded[3] == public[3] and decoded[-1] == public[-1] and decoded[2:5] == public[2:5]
    assert all(type(v) is int for _, _, values in decoded for v in values)
    with pytest.raises(IndexError):
        decoded[10]


def test_the_drafts_keys_share_beta_on_alphas_path_and_zero_beside_it() -> None:
    data = _vector()
    beta_inner, beta_leaf = _betas(data)
    idpf = IdpfBBCGGI21(data["bits"], 2)
    ctx, nonce = bytes.fromhex(data["ctx"]), bytes.fromhex(data["nonce"])
    public_share = idpf.decode_public_share(bytes.fromhex(data["public_share"]))
    keys = [bytes.fromhex(key) for key in data["keys"]]
    alpha = tuple(data["alpha"])
    for level in range(idpf.BITS):
        prefixes = [alpha[: level + 1], (*alpha[:level], not alpha[level])]
        shares = [idpf.eval(j, public_share, keys[j], level, prefixes, ctx, nonce) for j in range(2)]
        p = idpf.current_field(level).MODULUS
        on_path, off_path = ([(x + y) % p for x, y in zip(a, b, strict=True)] for a, b in zip(*shares, strict=True))
        assert on_path == (beta_inner[level] if level < idpf.BITS - 1 else beta_leaf)
        assert off_path == [0, 0]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_every_prefix_of_every_level_evaluates_to_the_point_function(seed: int) -> None:
    """All 2**(level+1) prefixes of a level in one batched walk: beta at alpha's prefix, zero at all the others."""
    rng = random.Random(seed)
    bits = 7
    idpf = IdpfBBCGGI21(bits, 2)
    alpha = tuple(rng.random() < 0.5 for _ in range(bits))
    beta_inner = [[rng.randrange(Field64.MODULUS) for _ in range(2)] for _ in range(bits - 1)]
    beta_leaf = [rng.randrange(Field255.MODULUS) for _ in range(2)]
    public_share, keys = idpf.gen(alpha, beta_inner, beta_leaf, CTX, NONCE, rng.randbytes(32))
    for level in range(bits):
        prefixes = _all_prefixes(level + 1)
        rng.shuffle(prefixes)  # the walk sorts nodes; the answer must come back in the caller's order
        beta = beta_inner[level] if level < bits - 1 else beta_leaf
        expected = [beta if prefix == alpha[: level + 1] else [0, 0] for prefix in prefixes]
        assert _values(idpf, public_share, keys, level, prefixes) == expected, level


def test_a_batched_walk_gives_each_prefix_what_a_walk_of_that_prefix_alone_gives() -> None:
    rng = random.Random(7)
    idpf = IdpfBBCGGI21(16, 2)
    alpha = tuple(rng.random() < 0.5 for _ in range(16))
    public_share, keys = idpf.gen(alpha, [[1, 5]] * 15, [1, 9], CTX, NONCE, rng.randbytes(32))
    level = 11
    prefixes = [alpha[: level + 1]] + list({tuple(rng.random() < 0.5 for _ in range(level + 1)) for _ in range(40)})
    prefixes = list(dict.fromkeys(prefixes))
    for agg_id in range(2):
        batched = idpf.eval(agg_id, public_share, keys[agg_id], level, prefixes, CTX, NONCE)
        alone = [idpf.eval(agg_id, public_share, keys[agg_id], level, [prefix], CTX, NONCE)[0] for prefix in prefixes]
        assert batched == alone


def test_a_tuple_of_prefixes_walked_again_for_another_report_gives_what_a_fresh_walk_gives() -> None:
    """The walk's plan of a tuple of prefixes is kept for the next report: it must not leak one report's values."""
    rng = random.Random(11)
    idpf, fresh = IdpfBBCGGI21(16, 2), IdpfBBCGGI21(16, 2)
    level = 9
    prefixes = tuple(dict.fromkeys(tuple(rng.random() < 0.5 for _ in range(level + 1)) for _ in range(60)))
    for nonce in (NONCE, bytes(16)):
        alpha = tuple(rng.random() < 0.5 for _ in range(16))
        public_share, keys = idpf.gen(alpha, [[1, 5]] * 15, [1, 9], CTX, nonce, rng.randbytes(32))
        for agg_id in range(2):
            again = idpf.eval(agg_id, public_share, keys[agg_id], level, prefixes, CTX, nonce)
            assert again == fresh.eval(agg_id, public_share, keys[agg_id], level, list(prefixes), CTX, nonce)
        assert idpf._last_plan is not None and idpf._last_plan[0] is prefixes


def test_another_nonce_evaluates_to_garbage_not_to_beta() -> None:
    """The fixed AES keys depend on the nonce: the keys of one report do not evaluate under another's."""
    idpf = IdpfBBCGGI21(4, 2)
    alpha = (True, False, True, True)
    public_share, keys = idpf.gen(alpha, [[1, 2]] * 3, [1, 3], CTX, NONCE, bytes(range(32)))
    assert _values(idpf, public_share, keys, 2, [alpha[:3]]) == [[1, 2]]
    assert _values(idpf, public_share, keys, 2, [alpha[:3]], nonce=bytes(16)) != [[1, 2]]


def test_eval_refuses_repeated_or_wrongly_sized_prefixes_and_levels_outside_the_tree() -> None:
    idpf = IdpfBBCGGI21(4, 2)
    public_share, keys = idpf.gen((True,) * 4, [[1, 2]] * 3, [1, 3], CTX, NONCE, bytes(32))
    with pytest.raises(VdafError, match="unique"):
        idpf.eval(0, public_share, keys[0], 1, [(True, False), (True, False)], CTX, NONCE)
    with pytest.raises(VdafError, match="prefix length"):
        idpf.eval(0, public_share, keys[0], 1, [(True,)], CTX, NONCE)
    with pytest.raises(VdafError, match="level"):
        idpf.eval(0, public_share, keys[0], 4, [(True,) * 5], CTX, NONCE)


def test_malformed_public_shares_are_refused() -> None:
    data = _vector()
    idpf = IdpfBBCGGI21(data["bits"], 2)
    encoded = bytearray.fromhex(data["public_share"])
    with pytest.raises(DecodeError, match="length"):
        idpf.decode_public_share(bytes(encoded[:-1]))
    trailing = bytearray(encoded)
    trailing[2] |= 0x80  # 20 control bits fill 2.5 bytes: the last byte's top four bits must be zero
    with pytest.raises(DecodeError, match="trailing bits"):
        idpf.decode_public_share(bytes(trailing))
    overflow = bytearray(encoded)
    overflow[-32:] = (2**255 - 19).to_bytes(32, "little")  # the last leaf value, one past the field
    with pytest.raises(DecodeError, match="modulus"):
        idpf.decode_public_share(bytes(overflow))


class _HalfRejecting(Field):
    """A prime just above 2**63 in 8 bytes: about half of the 64-bit draws are rejected."""

    MODULUS = 2**63 + 29
    ENCODED_SIZE = 8


class _HalfRejectingIdpf(IdpfBBCGGI21):
    field_inner = _HalfRejecting
    field_leaf = _HalfRejecting


@pytest.mark.parametrize("level", [0, 3], ids=["AES level", "TurboSHAKE level"])
def test_batched_convert_reads_on_past_rejected_draws_as_the_xof_does(level: int) -> None:
    """The walk reads each node's values from one batch of blocks; a rejected draw must continue that node's stream."""
    idpf = _HalfRejectingIdpf(4, 2)
    hashing = _Hashing(CTX, NONCE)
    seeds = np.frombuffer(random.Random(3).randbytes(16 * 64), dtype=np.uint8).reshape(64, 16)
    next_seeds, values = idpf._convert(hashing, level, seeds, values=True)
    xof_class = XofFixedKeyAes128 if level < 3 else XofTurboShake128
    rejected = 0
    for seed, next_seed, vec in zip(seeds, next_seeds, values, strict=True):
        xof = xof_class(seed.tobytes(), hashing.convert_dst, NONCE)
        assert next_seed.tobytes() == xof.next(16)
        first_draws = xof_class(seed.tobytes(), hashing.convert_dst, NONCE).next(32)[16:]
        rejected += any(int.from_bytes(first_draws[i : i + 8], "little") >= _HalfRejecting.MODULUS for i in (0, 8))
        assert vec.tolist() == xof.next_vec(_HalfRejecting, 2)
    assert rejected > 10  # the fallback ran, not only the batched path
