"""Poplar1's batched preparation (privacy.vdaf.poplar1_batch, idpf_batch, turboshake_arrays): report for report what
the per-report verify_init returns, honest and malformed reports alike, at inner (Field64) and leaf (Field255) levels."""

from __future__ import annotations

import random

import numpy as np
import pytest
from Crypto.Hash import TurboSHAKE128

from privacy.vdaf import field64_arrays, idpf_batch
from privacy.vdaf.errors import VdafError
from privacy.vdaf.field import Field, Field64
from privacy.vdaf.idpf import IdpfBBCGGI21
from privacy.vdaf.idpf_batch import eval_batch
from privacy.vdaf.poplar1 import Poplar1
from privacy.vdaf.poplar1_batch import _next_arrays, verify_init_batch
from privacy.vdaf.turboshake_arrays import turboshake128
from privacy.vdaf.xof import XofTurboShake128

CTX = b"pfs studio tests"
BITS = 12


@pytest.mark.parametrize("size", [0, 1, 59, 166, 167, 168, 300])
def test_turboshake_arrays_match_pycryptodome(size: int) -> None:
    """One block and several, absorbed and squeezed, across the rate's edges."""
    rng = random.Random(size)
    messages = np.frombuffer(rng.randbytes(7 * size), dtype=np.uint8).reshape(7, size)
    for domain, length in [(1, 32), (1, 80), (2, 168), (1, 400)]:
        out = turboshake128(messages, domain, length)
        for message, row in zip(messages, out, strict=True):
            assert row.tobytes() == TurboSHAKE128.new(domain=domain, data=message.tobytes()).read(length)


def test_row_totals_are_the_sums_mod_p() -> None:
    rng = np.random.default_rng(1)
    a = rng.integers(0, Field64.MODULUS, size=(5, 333), dtype=np.uint64, endpoint=False)
    assert field64_arrays.row_totals(a).tolist() == [sum(row) % Field64.MODULUS for row in a.tolist()]


def test_row_dots_are_the_dot_products_mod_p_even_at_the_largest_elements() -> None:
    rng = np.random.default_rng(2)
    p = Field64.MODULUS
    a = rng.integers(0, p, size=(3, 500), dtype=np.uint64)
    b = rng.integers(0, p, size=(3, 500), dtype=np.uint64)
    top = np.full((3, 500), p - 1, dtype=np.uint64)
    out = field64_arrays.row_dots([a, top], [b, top, a])
    for r in range(3):
        for i, x in enumerate([a, top]):
            for j, y in enumerate([b, top, a]):
                assert int(out[r, i, j]) == sum(u * v for u, v in zip(x[r].tolist(), y[r].tolist(), strict=True)) % p


def test_an_empty_batch_gives_no_results() -> None:
    vdaf = Poplar1(BITS)
    for level in (3, BITS - 1):
        prefixes = _prefixes(level, 4, random.Random(level))
        assert verify_init_batch(vdaf, bytes(32), CTX, 0, (level, prefixes), [], [], []) == []


def _reports(vdaf: Poplar1, count: int, rng: random.Random) -> list:
    reports = []
    for _ in range(count):
        nonce = rng.randbytes(vdaf.NONCE_SIZE)
        measurement = tuple(rng.random() < 0.5 for _ in range(vdaf.BITS))
        public_share, input_shares = vdaf.shard(CTX, measurement, nonce, rng.randbytes(vdaf.RAND_SIZE))
        reports.append((nonce, public_share, input_shares))
    # A malformed report: a client's wrong seed correction word at every level (the sketch must fail it later).
    nonce, public_share, input_shares = reports[0]
    tampered = [(bytes(16 - len(cw[0])) + bytes(b ^ 1 for b in cw[0]), cw[1], cw[2]) for cw in public_share]
    return [*reports, (nonce, tampered, input_shares)]


def _prefixes(level: int, count: int, rng: random.Random) -> tuple:
    return tuple(sorted({tuple(rng.random() < 0.5 for _ in range(level + 1)) for _ in range(count)}))


@pytest.mark.parametrize("level", [0, 5, BITS - 2, BITS - 1], ids=["root", "inner", "last inner", "leaf"])
@pytest.mark.parametrize("agg_id", [0, 1])
def test_the_batch_returns_what_verify_init_returns_report_by_report(level: int, agg_id: int) -> None:
    rng = random.Random(level * 2 + agg_id)
    vdaf = Poplar1(BITS)
    verify_key = rng.randbytes(vdaf.VERIFY_KEY_SIZE)
    reports = _reports(vdaf, 6, rng)
    for agg_param in [(level, _prefixes(level, 30, rng)), (level, ())]:
        got = verify_init_batch(
            vdaf,
            verify_key,
            CTX,
            agg_id,
            agg_param,
            [nonce for nonce, _, _ in reports],
            [public_share for _, public_share, _ in reports],
            [input_shares[agg_id] for _, _, input_shares in reports],
        )
        expected = [
            vdaf.verify_init(verify_key, CTX, agg_id, agg_param, nonce, public_share, input_shares[agg_id])
            for nonce, public_share, input_shares in reports
        ]
        assert got == expected


def test_the_batch_prepares_to_the_right_counts_and_the_malformed_report_fails_its_sketch() -> None:
    rng = random.Random(7)
    vdaf = Poplar1(BITS)
    verify_key = rng.randbytes(vdaf.VERIFY_KEY_SIZE)
    reports = _reports(vdaf, 5, rng)
    for level in (4, BITS - 1):
        agg_param = (level, _prefixes(level, 50, rng))
        batches = [
            verify_init_batch(
                vdaf,
                verify_key,
                CTX,
                agg_id,
                agg_param,
                [r[0] for r in reports],
                [r[1] for r in reports],
                [r[2][agg_id] for r in reports],
            )
            for agg_id in range(2)
        ]
        outcomes = []
        for pair in zip(*batches, strict=True):
            message = vdaf.verifier_shares_to_message(CTX, agg_param, [share for _, share in pair])
            round_two = [vdaf.verify_next(CTX, state, message) for state, _ in pair]
            try:
                vdaf.verifier_shares_to_message(CTX, agg_param, [share for _, share in round_two])
                outcomes.append(True)
            except VdafError:
                outcomes.append(False)
        assert outcomes == [True] * 5 + [False]


def test_the_batch_refuses_what_verify_init_refuses() -> None:
    rng = random.Random(8)
    vdaf = Poplar1(BITS)
    verify_key = rng.randbytes(vdaf.VERIFY_KEY_SIZE)
    (nonce, public_share, input_shares), *_ = _reports(vdaf, 1, rng)
    agg_param = (3, _prefixes(3, 5, rng))
    for nonces, public_shares, shares, key in [
        ([nonce[:-1]], [public_share], [input_shares[0]], verify_key),
        ([nonce], [public_share[:-1]], [input_shares[0]], verify_key),
        ([nonce], [public_share], [(input_shares[0][0][:-1], *input_shares[0][1:])], verify_key),
        ([nonce], [public_share], [input_shares[0]], verify_key[:-1]),
        ([nonce, nonce], [public_share], [input_shares[0]], verify_key),
    ]:
        with pytest.raises(VdafError):
            verify_init_batch(vdaf, key, CTX, 0, agg_param, nonces, public_shares, shares)
    with pytest.raises(VdafError):
        verify_init_batch(
            vdaf, verify_key, CTX, 0, (3, _prefixes(2, 5, rng)), [nonce], [public_share], [input_shares[0]]
        )


def test_reports_split_into_chunks_give_the_same_values(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(9)
    vdaf = Poplar1(BITS)
    reports = _reports(vdaf, 7, rng)
    prefixes = _prefixes(6, 20, rng)
    args = ([r[1] for r in reports], [r[2][1][0] for r in reports], 6, prefixes, CTX, [r[0] for r in reports])
    whole = eval_batch(vdaf.idpf, 1, *args)
    monkeypatch.setattr(idpf_batch, "ROWS_PER_CHUNK", 2 * len(prefixes))
    assert np.array_equal(eval_batch(vdaf.idpf, 1, *args), whole)


class _HalfRejecting(Field):
    """A prime just above 2**63 in 8 bytes: about half of the 64-bit draws are rejected."""

    MODULUS = 2**63 + 29
    ENCODED_SIZE = 8


class _HalfRejecting32(Field):
    """A modulus just above 2**255 in 32 bytes (nothing masked): about half of the draws are rejected, as
    Field255's almost never are."""

    MODULUS = 2**255 + 95
    ENCODED_SIZE = 32


class _HalfRejectingIdpf(IdpfBBCGGI21):
    field_inner = _HalfRejecting
    field_leaf = _HalfRejecting32


@pytest.mark.parametrize("level", [2, 3], ids=["AES level", "TurboSHAKE level"])
def test_the_batched_walk_reads_on_past_rejected_draws_as_the_per_report_walk_does(level: int) -> None:
    rng = random.Random(level)
    idpf = _HalfRejectingIdpf(4, 2)
    public_shares = [
        [
            (rng.randbytes(16), (rng.random() < 0.5, rng.random() < 0.5), [rng.randrange(p), rng.randrange(p)])
            for p in [_HalfRejecting.MODULUS] * 3 + [_HalfRejecting32.MODULUS]
        ]
        for _ in range(5)
    ]
    keys, nonces = [rng.randbytes(16) for _ in range(5)], [rng.randbytes(16) for _ in range(5)]
    prefixes = _prefixes(level, 16, rng)
    for agg_id in range(2):
        got = eval_batch(idpf, agg_id, public_shares, keys, level, prefixes, CTX, nonces)
        expected = [
            idpf.eval_array(agg_id, public_share, key, level, prefixes, CTX, nonce).tolist()
            for public_share, key, nonce in zip(public_shares, keys, nonces, strict=True)
        ]
        assert got.tolist() == expected


@pytest.mark.parametrize("field", [_HalfRejecting, _HalfRejecting32])
def test_reading_many_streams_at_once_reads_on_past_rejected_draws(field: type[Field]) -> None:
    seeds = [bytes([i]) * 32 for i in range(6)]

    def xofs() -> list[XofTurboShake128]:
        return [XofTurboShake128(seed, b"dst", b"binder") for seed in seeds]

    got = _next_arrays(xofs(), field, 20)
    assert got.tolist() == [xof.next_vec(field, 20) for xof in xofs()]


def test_the_batch_treats_the_attacks_as_verify_init_does_and_their_sketches_fail() -> None:
    """A double vote (two non-zero paths), a count of two, a report under another nonce, beside an honest report."""
    from tests.unit.test_poplar1_vectors import CTX as VECTORS_CTX
    from tests.unit.test_poplar1_vectors import NONCE, VERIFY_KEY, _authenticators, _double_vote_keys

    rng = random.Random(11)
    vdaf = Poplar1(4)
    rand = rng.randbytes(vdaf.RAND_SIZE)
    honest_public_share, input_shares = vdaf.shard(VECTORS_CTX, (False, True, True, False), NONCE, rand)
    double_public_share, keys = _double_vote_keys(vdaf, _authenticators(vdaf, rand)[1], rng)
    double_shares = [(keys[j], *input_shares[j][1:]) for j in range(2)]
    beta_inner = [[1, k] for k in _authenticators(vdaf, rand)]
    beta_inner[1] = [2, 2 * beta_inner[1][1] % Field64.MODULUS]
    twice_public_share, _ = vdaf.idpf.gen(
        (False, True, True, False), beta_inner, [1, 0], VECTORS_CTX, NONCE, rand[: vdaf.idpf.RAND_SIZE]
    )
    reports = [
        (NONCE, honest_public_share, input_shares),
        (NONCE, double_public_share, double_shares),
        (NONCE, twice_public_share, input_shares),
        (bytes(16), honest_public_share, input_shares),
    ]
    agg_param = (1, ((False, False), (False, True)))
    batches = []
    for agg_id in range(2):
        batch = verify_init_batch(
            vdaf,
            VERIFY_KEY,
            VECTORS_CTX,
            agg_id,
            agg_param,
            [nonce for nonce, _, _ in reports],
            [public_share for _, public_share, _ in reports],
            [shares[agg_id] for _, _, shares in reports],
        )
        assert batch == [
            vdaf.verify_init(VERIFY_KEY, VECTORS_CTX, agg_id, agg_param, nonce, public_share, shares[agg_id])
            for nonce, public_share, shares in reports
        ]
        batches.append(batch)
    passed = []
    for pair in zip(*batches, strict=True):
        message = vdaf.verifier_shares_to_message(VECTORS_CTX, agg_param, [share for _, share in pair])
        round_two = [vdaf.verify_next(VECTORS_CTX, state, message) for state, _ in pair]
        try:
            vdaf.verifier_shares_to_message(VECTORS_CTX, agg_param, [share for _, share in round_two])
            passed.append(True)
        except VdafError:
            passed.append(False)
    assert passed == [True, False, False, False]


def test_merging_leaf_shares_at_once_equals_adding_them_one_by_one() -> None:
    rng = random.Random(12)
    vdaf = Poplar1(BITS)
    agg_param = (BITS - 1, _prefixes(BITS - 1, 9, rng))
    p = vdaf.idpf.field_leaf.MODULUS
    shares = [[rng.randrange(p) for _ in agg_param[1]] for _ in range(7)]
    expected = vdaf.agg_init(agg_param)
    for share in shares:
        expected = vdaf.agg_update(agg_param, expected, share)
    assert vdaf.merge(agg_param, shares) == expected
    assert vdaf.merge(agg_param, []) == vdaf.agg_init(agg_param)
    with pytest.raises(ValueError, match="mismatched vector sizes"):
        vdaf.merge(agg_param, [*shares, shares[0][:-1]])
