"""The building blocks of privacy.vdaf: fields and polynomials, the XOF, the FLP, and Field128 limbs in numpy."""

from __future__ import annotations

import random

import numpy as np
import pytest

from privacy.vdaf import limbs
from privacy.vdaf.circuits import Count, Histogram, MultihotCountVec, Sum, SumVec
from privacy.vdaf.errors import DecodeError, VerifyError
from privacy.vdaf.field import (
    Field,
    Field64,
    Field128,
    double_evaluations,
    extend_values_to_power_of_2,
    poly_eval,
    poly_eval_batched,
)
from privacy.vdaf.flp import Flp, Mul, ParallelSum, PolyEval
from privacy.vdaf.xof import XofTurboShake128

FIELDS = [Field64, Field128]


@pytest.mark.parametrize("field", FIELDS, ids=lambda f: f.__name__)
def test_field_parameters_match_section_6_1_4(field: type[Field]) -> None:
    g = field.GENERATOR
    assert pow(g, field.GEN_ORDER, field.MODULUS) == 1
    assert pow(g, field.GEN_ORDER // 2, field.MODULUS) != 1
    assert field.ENCODED_SIZE * 8 >= field.MODULUS.bit_length()


@pytest.mark.parametrize("field", FIELDS, ids=lambda f: f.__name__)
def test_ntt_and_its_inverse_round_trip_and_evaluate(field: type[Field]) -> None:
    rng = random.Random(1)
    p = field.MODULUS
    for n in (1, 2, 8, 32):
        coeffs = [rng.randrange(p) for _ in range(n)]
        values = field.ntt(coeffs, n)
        assert field.inv_ntt(values, n) == coeffs
        w = field.nth_root(n)
        assert values == [poly_eval(field, coeffs, pow(w, i, p)) for i in range(n)]
        s = field.nth_root(2 * n)
        shifted = field.ntt(coeffs, n, set_s=True)
        assert shifted == [poly_eval(field, coeffs, s * pow(w, i, p) % p) for i in range(n)]


def test_lagrange_evaluation_agrees_with_the_monomial_basis_anywhere_including_the_nodes() -> None:
    field, rng = Field128, random.Random(2)
    p, n = field.MODULUS, 16
    coeffs = [rng.randrange(p) for _ in range(n)]
    values = field.ntt(coeffs, n)
    points = [rng.randrange(p) for _ in range(5)] + [field.nth_root(n) ** 3 % p, 1]
    for t in points:
        assert poly_eval_batched(field, [values], t) == [poly_eval(field, coeffs, t)]


@pytest.mark.parametrize("known", [15, 13, 9, 16])
def test_extending_values_recovers_a_low_degree_polynomial(known: int) -> None:
    field, rng = Field64, random.Random(known)
    p, n = field.MODULUS, 16
    coeffs = [rng.randrange(p) for _ in range(known)]  # degree < known
    values = field.ntt(coeffs, n)
    assert extend_values_to_power_of_2(field, values[:known], n) == values


def test_doubling_evaluations_gives_the_values_at_the_2n_th_roots() -> None:
    field, rng = Field128, random.Random(3)
    p, n = field.MODULUS, 8
    coeffs = [rng.randrange(p) for _ in range(n)]
    assert double_evaluations(field, field.ntt(coeffs, n)) == field.ntt(coeffs, 2 * n)


@pytest.mark.parametrize("field", FIELDS, ids=lambda f: f.__name__)
def test_decode_vec_refuses_bad_lengths_and_values_at_or_above_the_modulus(field: type[Field]) -> None:
    with pytest.raises(DecodeError, match="multiple"):
        field.decode_vec(bytes(field.ENCODED_SIZE + 1))
    with pytest.raises(DecodeError, match="modulus"):
        field.decode_vec(field.MODULUS.to_bytes(field.ENCODED_SIZE, "little"))
    values = [0, 1, field.MODULUS - 1]
    assert field.decode_vec(field.encode_vec(values)) == values


class _QuarterRejected(Field):
    """A toy 'field' whose sampling rejects a quarter of all draws (next_vec only needs the modulus)."""

    MODULUS = 3 * 2**62
    ENCODED_SIZE = 8


def test_next_vec_consumes_the_stream_like_the_spec_element_by_element() -> None:
    seed, dst, binder = bytes(range(32)), b"dst", b"binder"
    got = XofTurboShake128(seed, dst, binder).next_vec(_QuarterRejected, 200)
    xof, expected = XofTurboShake128(seed, dst, binder), []
    while len(expected) < 200:
        x = int.from_bytes(xof.next(8), "little")
        if x < _QuarterRejected.MODULUS:
            expected.append(x)
    assert got == expected


def test_xof_next_continues_one_stream() -> None:
    whole = XofTurboShake128(bytes(32), b"d", b"b").next(100)
    xof = XofTurboShake128(bytes(32), b"d", b"b")
    assert xof.next(30) + xof.next(1) + xof.next(69) == whole


def test_xof_refuses_oversized_seeds_and_tags() -> None:
    with pytest.raises(ValueError):
        XofTurboShake128(bytes(256), b"", b"")
    with pytest.raises(ValueError):
        XofTurboShake128(bytes(32), bytes(65536), b"")


def test_poly_eval_gadget_polynomial_matches_its_values() -> None:
    # Appendix A.2: eval_poly applies p to the input polynomial at enough points for its degree.
    field, rng = Field64, random.Random(4)
    gadget = PolyEval([3, 0, -1, 2], num_calls=5)
    wire = [rng.randrange(field.MODULUS) for _ in range(8)]
    out = gadget.eval_poly(field, [wire])
    # The gadget polynomial at the wire's own points is the gadget of the wire values.
    step = len(out) // len(wire)
    assert [out[k * step] for k in range(len(wire))] == [gadget.eval(field, [v]) for v in wire]


def test_parallel_sum_adds_its_subcircuits() -> None:
    field = Field128
    gadget = ParallelSum(Mul(), 3)
    assert gadget.ARITY == 6
    assert gadget.eval(field, [2, 3, 4, 5, 6, 7]) == 2 * 3 + 4 * 5 + 6 * 7


VALID_AND_INVALID = [
    (Count(), [1], [2]),
    (Sum(10), Sum(10).encode(9), [1, 1, 1, 2]),
    (SumVec(3, 5, 2), SumVec(3, 5, 2).encode([5, 0, 3]), [1, 0, 0, 0, 0, 0, 0, 0, 2]),
    (Histogram(5, 2), Histogram(5, 2).encode(4), [0, 1, 0, 1, 0]),
    (MultihotCountVec(6, 2, 3), MultihotCountVec(6, 2, 3).encode([1, 0, 0, 1, 0, 0]), [1, 1, 1, 0, 0, 0, 1, 1]),
]


@pytest.mark.parametrize(("valid", "good", "bad"), VALID_AND_INVALID, ids=lambda v: type(v).__name__)
@pytest.mark.parametrize("num_shares", [1, 2, 3])
def test_flp_accepts_a_valid_measurement_and_rejects_an_invalid_one(valid, good, bad, num_shares: int) -> None:  # noqa: ANN001
    # run_flp of Section 7.1 on additive shares of the measurement and the proof.
    flp, rng = Flp(valid), random.Random(num_shares)
    p = flp.field.MODULUS

    def run(meas: list[int]) -> bool:
        joint_rand = [rng.randrange(p) for _ in range(flp.JOINT_RAND_LEN)]
        prove_rand = [rng.randrange(p) for _ in range(flp.PROVE_RAND_LEN)]
        query_rand = [rng.randrange(p) for _ in range(flp.QUERY_RAND_LEN)]
        proof = flp.prove(meas, prove_rand, joint_rand)
        meas_shares = [[rng.randrange(p) for _ in meas] for _ in range(num_shares - 1)]
        proof_shares = [[rng.randrange(p) for _ in proof] for _ in range(num_shares - 1)]
        meas_shares.append([(m - sum(col)) % p for m, *col in zip(meas, *meas_shares, strict=True)])
        proof_shares.append([(x - sum(col)) % p for x, *col in zip(proof, *proof_shares, strict=True)])
        verifier_shares = [
            flp.query(m, pr, query_rand, joint_rand, num_shares)
            for m, pr in zip(meas_shares, proof_shares, strict=True)
        ]
        return flp.decide([sum(col) % p for col in zip(*verifier_shares, strict=True)])

    assert run(good)
    assert not run(bad)


def test_flp_query_refuses_a_root_of_unity_as_test_point() -> None:
    flp = Flp(Count())
    proof = flp.prove([1], [3, 4], [])
    with pytest.raises(VerifyError, match="root of unity"):
        flp.query([1], proof, [Field64.nth_root(2)], [], 1)


# -- Field128 limbs against Python integers ---------------------------------------------------------

P = Field128.MODULUS
EDGES = [0, 1, 2, P - 1, P - 2, P, P + 1, 2**128 - 1, 2**64, 2**64 - 1, 28 * 2**64 - 1, 2**127]


def _operands(seed: int, count: int) -> tuple[list[int], list[int]]:
    rng = random.Random(seed)
    xs = EDGES + [rng.randrange(2**128) for _ in range(count)]
    ys = [rng.choice(EDGES) if rng.random() < 0.3 else rng.randrange(2**128) for _ in xs]
    return xs, ys


def _check(result: np.ndarray, expected: list[int]) -> None:
    assert int(result.max()) < 2**32  # every limb normalised, the value below 2**128
    assert limbs.to_ints(result) == [e % P for e in expected]


def test_limb_arithmetic_matches_python_integers_on_edge_and_random_values() -> None:
    xs, ys = _operands(1, 3000)
    a, b = limbs.from_ints(xs), limbs.from_ints(ys)
    _check(limbs.mul(a, b), [x * y for x, y in zip(xs, ys, strict=True)])
    _check(limbs.add(a, b), [x + y for x, y in zip(xs, ys, strict=True)])
    _check(limbs.sub(a, b), [x - y for x, y in zip(xs, ys, strict=True)])
    chained = a
    for _ in range(6):
        chained = limbs.mul(chained, b)
    _check(chained, [x * y**6 for x, y in zip(xs, ys, strict=True)])
    assert limbs.is_canonical(a).tolist() == [x < P for x in xs]
    assert limbs.to_bytes(a) == Field128.encode_vec([x % P for x in xs])


def test_limb_dot_products_and_sums_match_python_integers() -> None:
    xs, ys = _operands(2, 3000)
    rows, width = 30, 100
    a = limbs.from_ints(xs[: rows * width]).reshape(4, rows, width)
    b = limbs.from_ints(ys[: rows * width]).reshape(4, rows, width)
    x_rows = [xs[r * width : (r + 1) * width] for r in range(rows)]
    y_rows = [ys[r * width : (r + 1) * width] for r in range(rows)]
    _check(
        limbs.dot(a, b),
        [sum(x * y for x, y in zip(xr, yr, strict=True)) for xr, yr in zip(x_rows, y_rows, strict=True)],
    )
    _check(limbs.limb_sum(a, -1), [sum(xr) for xr in x_rows])


def test_limb_geometric_sequences_and_ntt_match_python_integers() -> None:
    xs, ys = _operands(3, 20)
    first, ratio = limbs.from_ints(xs[:12]), limbs.from_ints(ys[:12])
    # The new axis comes first: element [j, i] is first_i * ratio_i**j.
    expected = [x * y**j for j in range(13) for x, y in zip(xs[:12], ys[:12], strict=True)]
    _check(limbs.geometric(first, ratio, 13), expected)
    rng = random.Random(4)
    for n in (1, 2, 16, 128):
        rows = [[rng.randrange(P) for _ in range(n)] for _ in range(3)]
        # The transform runs along the first element axis: one column per row here.
        columns = limbs.from_ints(sum(rows, [])).reshape(4, 3, n).transpose(0, 2, 1)
        got = limbs.ntt(columns, Field128.nth_root_powers(n)).transpose(0, 2, 1)
        _check(got, sum((Field128.ntt(row, n) for row in rows), []))
