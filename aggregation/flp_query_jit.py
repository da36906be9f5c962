"""The Prio3 FLP query (privacy.vdaf.batch.FlpQuery), compiled: the aggregators' hot loop.

Verifying a 1,024-bucket report costs each aggregator about 4,000 Field128 multiplications: the
powers of each call's joint randomness and two dot products over the measurement share (the wire
sums), then the Lagrange basis at the query point (two small NTTs), the gadget check and the
circuit's outputs. In numpy (privacy.vdaf.limbs) each multiplication is some 100 passes over arrays
of limbs; compiled with numba, each runs in registers, a product's 16 limb products summed into
columns as they come. On a chunk of 128 such reports the query takes 6–7.5 ms against 19 ms for
numpy's with its wire sums compiled, and 29–48 ms for numpy's alone (bench/results/upload_prio3.md).

The arithmetic is limbs.mul_wide's, limbs.reduce's and limbs._normalize's, element by element: four
32-bit limbs in uint64, products split into 32-bit columns, the columns folded with
2**128 = 28 * 2**64 - 1 (mod p). The steps are privacy.vdaf.batch.flp_query's, one report at a
time with the reports as the inner loop, so that LLVM can vectorise along them. It lives here, not
in privacy/, because the device SDK ships privacy/ and has no use for a compiler.
tests/unit/test_flp_query_jit.py holds it to the numpy query, extreme limbs and a refused query
point included; the batch path, and so this, agrees byte for byte with the per-report reference
path.

Compiled on first use, about 15 s (`make` does it once, before any service or test starts), and kept
on disk (``cache=True``: in __pycache__ beside this file, or else in the user's cache folder or
NUMBA_CACHE_DIR) so that the next processes load it in about 0.7 s. Where no folder is writable,
each process compiles it once.
"""

from __future__ import annotations

import functools

import numba
import numpy as np
import numpy.typing as npt

from privacy.vdaf import limbs
from privacy.vdaf.batch import QueryCircuit
from privacy.vdaf.field import Field128

_MASK = np.uint64(0xFFFFFFFF)
_SHIFT = np.uint64(32)
_P = [np.uint64((Field128.MODULUS >> (32 * k)) & 0xFFFFFFFF) for k in range(limbs.LIMBS)]
_P0, _P1, _P2, _P3 = _P


@numba.njit(inline="always")
def _columns(a, b):  # numba infers the uint64 types
    """The 8 columns (each below 2**35) of the exact product of a and b (4 limbs each), as limbs.mul_wide."""
    a0, a1, a2, a3 = a
    b0, b1, b2, b3 = b
    p00, p01, p02, p03 = a0 * b0, a0 * b1, a0 * b2, a0 * b3
    p10, p11, p12, p13 = a1 * b0, a1 * b1, a1 * b2, a1 * b3
    p20, p21, p22, p23 = a2 * b0, a2 * b1, a2 * b2, a2 * b3
    p30, p31, p32, p33 = a3 * b0, a3 * b1, a3 * b2, a3 * b3
    return (
        p00 & _MASK,
        (p00 >> _SHIFT) + (p01 & _MASK) + (p10 & _MASK),
        (p01 >> _SHIFT) + (p10 >> _SHIFT) + (p02 & _MASK) + (p11 & _MASK) + (p20 & _MASK),
        (p02 >> _SHIFT)
        + (p11 >> _SHIFT)
        + (p20 >> _SHIFT)
        + (p03 & _MASK)
        + (p12 & _MASK)
        + (p21 & _MASK)
        + (p30 & _MASK),
        (p03 >> _SHIFT)
        + (p12 >> _SHIFT)
        + (p21 >> _SHIFT)
        + (p30 >> _SHIFT)
        + (p13 & _MASK)
        + (p22 & _MASK)
        + (p31 & _MASK),
        (p13 >> _SHIFT) + (p22 >> _SHIFT) + (p31 >> _SHIFT) + (p23 & _MASK) + (p32 & _MASK),
        (p23 >> _SHIFT) + (p32 >> _SHIFT) + (p33 & _MASK),
        p33 >> _SHIFT,
    )


@numba.njit(inline="always")
def _plus(c, d):
    """The sum of two products' columns (or of columns and a value's limbs, zero-padded)."""
    return (c[0] + d[0], c[1] + d[1], c[2] + d[2], c[3] + d[3], c[4] + d[4], c[5] + d[5], c[6] + d[6], c[7] + d[7])


@numba.njit(inline="always")
def _fold(v0, v1, v2, v3, passes):
    """Signed limbs (int64, |v| < 2**62) -> (uint64 limbs below 2**32 of a value below 2**128
    congruent mod p, as limbs._normalize; whether ``passes`` came short, when the value is wrong).

    A carry c out of the top limb stands for c * 2**128 = c * (28 * 2**64 - 1): subtracted at limb 0,
    28c added at limb 2. The flag makes a broken bound an error rather than a wrong verdict."""
    carry = np.int64(0)
    for _ in range(passes):
        carry = v0 >> 32
        v0 &= 0xFFFFFFFF
        v1 += carry
        carry = v1 >> 32
        v1 &= 0xFFFFFFFF
        v2 += carry
        carry = v2 >> 32
        v2 &= 0xFFFFFFFF
        v3 += carry
        carry = v3 >> 32
        v3 &= 0xFFFFFFFF
        v0 -= carry
        v2 += 28 * carry
    return (np.uint64(v0), np.uint64(v1), np.uint64(v2), np.uint64(v3)), carry != 0


@numba.njit(inline="always")
def _reduce(c, passes=4):
    """Columns (uint64, each below 2**62) -> lazily reduced limbs, as limbs.reduce: the part above
    2**128 folded in with 2**128 = 28 * 2**64 - 1 and 2**192 = 783 * 2**64 - 28 (mod p)."""
    c0, c1, c2, c3 = np.int64(c[0]), np.int64(c[1]), np.int64(c[2]), np.int64(c[3])
    c4, c5, c6, c7 = np.int64(c[4]), np.int64(c[5]), np.int64(c[6]), np.int64(c[7])
    return _fold(c0 - c4 - 28 * c6, c1 - c5 - 28 * c7, c2 + 28 * c4 + 783 * c6, c3 + 28 * c5 + 783 * c7, passes)


@numba.njit(inline="always")
def _mul(a, b):
    """a * b lazily reduced (below 2**128), as limbs.mul, and whether the reduction came short.
    Three folds always suffice for the columns of one product (limbs._normalize's bounds)."""
    return _reduce(_columns(a, b), 3)


@numba.njit(inline="always")
def _add(a, b):
    return _fold(
        np.int64(a[0]) + np.int64(b[0]), np.int64(a[1]) + np.int64(b[1]),
        np.int64(a[2]) + np.int64(b[2]), np.int64(a[3]) + np.int64(b[3]), 4,
    )  # fmt: skip


@numba.njit(inline="always")
def _sub(a, b):
    return _fold(
        np.int64(a[0]) - np.int64(b[0]), np.int64(a[1]) - np.int64(b[1]),
        np.int64(a[2]) - np.int64(b[2]), np.int64(a[3]) - np.int64(b[3]), 4,
    )  # fmt: skip


@numba.njit(inline="always")
def _canonical(a):
    """The representative below p of a value below 2**128 (< 2p): one subtraction of p, as limbs.canonical."""
    a0, a1, a2, a3 = a
    above = a3 > _P3 or (a3 == _P3 and (a2 > _P2 or (a2 == _P2 and (a1 > _P1 or (a1 == _P1 and a0 >= _P0)))))
    if not above:
        return a
    v0, v1 = np.int64(a0) - np.int64(_P0), np.int64(a1) - np.int64(_P1)
    v2, v3 = np.int64(a2) - np.int64(_P2), np.int64(a3) - np.int64(_P3)
    v1 += v0 >> 32
    v0 &= 0xFFFFFFFF
    v2 += v1 >> 32
    v1 &= 0xFFFFFFFF
    v3 += v2 >> 32
    v2 &= 0xFFFFFFFF
    return np.uint64(v0), np.uint64(v1), np.uint64(v2), np.uint64(v3)


@numba.njit(inline="always")
def _at(a, i, s):
    """The element at (i, s) of limbs shaped (4, ..., n), as a tuple."""
    return a[0, i, s], a[1, i, s], a[2, i, s], a[3, i, s]


@numba.njit(inline="always")
def _put(a, i, s, v):
    a[0, i, s], a[1, i, s], a[2, i, s], a[3, i, s] = v[0], v[1], v[2], v[3]


@numba.njit(inline="always")
def _element(a, k):
    """Element k of a 1-D run of limbs (4, count), as a tuple."""
    return a[0, k], a[1, k], a[2, k], a[3, k]


@numba.njit(inline="always")
def _columns_at(c, j, s):
    """The 8 columns at (j, s) of sums shaped (8, ..., n), as a tuple."""
    return c[0, j, s], c[1, j, s], c[2, j, s], c[3, j, s], c[4, j, s], c[5, j, s], c[6, j, s], c[7, j, s]


@numba.njit(inline="always")
def _columns_of(c, s):
    """The 8 columns of report s in sums shaped (8, n), as a tuple."""
    return c[0, s], c[1, s], c[2, s], c[3, s], c[4, s], c[5, s], c[6, s], c[7, s]


@numba.njit(inline="always")
def _padded(v):
    """A value's limbs as columns, to add to a product's."""
    zero = np.uint64(0)
    return v[0], v[1], v[2], v[3], zero, zero, zero, zero


@numba.njit(inline="always")
def _add_columns(acc, s, columns):
    """Adds 8 columns to acc[:, s]."""
    for k in range(8):
        acc[k, s] += columns[k]


def _compiled(function):
    try:
        return numba.njit(cache=True)(function)
    except RuntimeError:  # numba found no writable folder to cache it in: compile in each process
        return numba.njit(function)


@_compiled
def _wire_sums(x, inner, r, chunk, calls):
    """batch._wire_sums: x (4, length, n), inner and r (4, calls, n), the reports last; (even, odd)
    columns (8, chunk, n) and whether a reduction came short."""
    length, n = x.shape[1], x.shape[2]
    even = np.zeros((8, chunk, n), np.uint64)
    odd = np.zeros((8, chunk, n), np.uint64)
    k = np.empty((4, 1, n), np.uint64)  # l_i r_i**(j+1) of each report, for the current call and slot
    short = False
    for i in range(calls):
        for s in range(n):
            value, bad = _mul(_at(inner, i, s), _at(r, i, s))
            _put(k, 0, s, value)
            short |= bad
        for j in range(min(chunk, length - i * chunk)):
            e = i * chunk + j
            for s in range(n):  # the innermost loop: two products' columns into even and odd
                xe = _at(x, e, s)
                _add_columns(even[:, j], s, _columns(_at(k, 0, s), xe))
                _add_columns(odd[:, j], s, _columns(_at(inner, i, s), xe))
                value, bad = _mul(_at(k, 0, s), _at(r, i, s))
                _put(k, 0, s, value)
                short |= bad
    return even, odd, short


@_compiled
def _lagrange(powers, roots, scale):
    """batch._lagrange: l_k(t) at [:, k] (4, size, n) for the size-th roots of unity, from the powers
    of t (4, >= size, n): the NTT of u_j = t**(size-1-j) (radix 2, as limbs.ntt), times W**k / size."""
    size, n = roots.shape[1], powers.shape[2]
    bits = 0
    while (1 << bits) < size:
        bits += 1
    a = np.empty((4, size, n), np.uint64)
    for i in range(size):
        reversed_i = 0
        for b in range(bits):
            reversed_i |= ((i >> b) & 1) << (bits - 1 - b)
        for s in range(n):
            _put(a, i, s, _at(powers, size - 1 - reversed_i, s))
    short = False
    half = 1
    while half < size:
        step = size // (2 * half)
        for block in range(0, size, 2 * half):
            for j in range(half):
                w = _element(roots, step * j)
                e, o = block + j, block + j + half
                for s in range(n):
                    odd, bad = _mul(_at(a, o, s), w)
                    even = _at(a, e, s)
                    total, bad_total = _add(even, odd)
                    difference, bad_difference = _sub(even, odd)
                    _put(a, e, s, total)
                    _put(a, o, s, difference)
                    short |= bad | bad_total | bad_difference
        half *= 2
    for k in range(size):
        for s in range(n):
            value, bad = _mul(_at(a, k, s), _element(scale, k))
            _put(a, k, s, value)
            short |= bad
    return a, short


@_compiled
def _query(x, proof, r, q, chunk, calls, roots, scale, roots2, scale2, fold, neg_shares_inv, ones, weights, affine_constant, outputs):  # fmt: skip  # noqa: E501
    """batch.flp_query with the reports last: x (4, MEAS_LEN, n), proof (4, PROOF_LEN, n), r and q
    likewise; the constants from _constants. (verifier shares (4, VERIFIER_LEN, n) below p, refused
    (n,), whether a reduction came short)."""
    n, points = x.shape[2], roots.shape[1]
    short = False

    # The powers of t (the query randomness's last element), and the test point refused: t**p == 1.
    last = q.shape[1] - 1
    powers = np.empty((4, 2 * points, n), np.uint64)
    for s in range(n):
        _put(powers, 0, s, (np.uint64(1), np.uint64(0), np.uint64(0), np.uint64(0)))
    for k in range(1, 2 * points):
        for s in range(n):
            value, bad = _mul(_at(powers, k - 1, s), _at(q, last, s))
            _put(powers, k, s, value)
            short |= bad
    refused = np.zeros(n, np.bool_)
    for s in range(n):
        c0, c1, c2, c3 = _canonical(_at(powers, points, s))
        refused[s] = c0 == 1 and c1 == 0 and c2 == 0 and c3 == 0
    basis, bad = _lagrange(powers, roots, scale)
    short |= bad
    basis2, bad = _lagrange(powers, roots2, scale2)
    short |= bad

    # The wire polynomials at t: l_{i+1}(t) is call i's basis value, l_0(t) the seed's (in the proof).
    inner = np.ascontiguousarray(basis[:, 1 : calls + 1, :])
    even, odd, bad = _wire_sums(x, inner, r, chunk, calls)
    short |= bad
    # Every call's x - 1/SHARES, padding included, contributes -l_{i+1}(t) / SHARES to the odd wires.
    constant = np.empty((4, 1, n), np.uint64)
    for s in range(n):
        v0, v1, v2, v3 = np.int64(0), np.int64(0), np.int64(0), np.int64(0)
        for i in range(calls):
            v0 += np.int64(inner[0, i, s])
            v1 += np.int64(inner[1, i, s])
            v2 += np.int64(inner[2, i, s])
            v3 += np.int64(inner[3, i, s])
        total, bad = _fold(v0, v1, v2, v3, 4)
        value, bad_product = _mul(total, _element(neg_shares_inv, 0))
        _put(constant, 0, s, value)
        short |= bad | bad_product
    verifiers = np.empty((4, 2 * chunk + 2, n), np.uint64)
    for j in range(chunk):
        for s in range(n):
            seed = _at(basis, 0, s)
            wire_even, bad_even = _reduce(_plus(_columns_at(even, j, s), _columns(_at(proof, 2 * j, s), seed)))
            odd_columns = _plus(_columns_at(odd, j, s), _columns(_at(proof, 2 * j + 1, s), seed))
            wire_odd, bad_odd = _reduce(_plus(odd_columns, _padded(_at(constant, 0, s))))
            _put(verifiers, 1 + 2 * j, s, _canonical(wire_even))
            _put(verifiers, 2 + 2 * j, s, _canonical(wire_odd))
            short |= bad_even | bad_odd

    # The gadget polynomial's 2p - 1 values at the 2p-th roots, its missing one folded into the basis.
    gadget = 2 * chunk
    check = np.zeros((8, n), np.uint64)
    for m in range(2 * points - 1):
        f = _element(fold, m)
        for s in range(n):
            folded, bad = _mul(_at(basis2, 2 * points - 1, s), f)
            basis_value, bad_difference = _sub(_at(basis2, m, s), folded)
            _add_columns(check, s, _columns(_at(proof, gadget + m, s), basis_value))
            short |= bad | bad_difference
    for s in range(n):
        value, bad = _reduce(_columns_of(check, s))
        _put(verifiers, 2 * chunk + 1, s, _canonical(value))
        short |= bad

    # The circuit's outputs: the range check (the gadget at the p-th roots, W_2p**(2k)), and the affine
    # check's sum_k a_k x_k + b / SHARES, the weights' run of ones a plain sum; v = sum_k q_k output_k.
    ranges = np.zeros((4, n), np.int64)
    for k in range(1, calls + 1):
        for s in range(n):
            for limb in range(4):
                ranges[limb, s] += np.int64(proof[limb, gadget + 2 * k, s])
    affine = np.zeros((8, n), np.uint64)
    if outputs > 1:
        for e in range(ones):
            for s in range(n):
                for limb in range(4):
                    affine[limb, s] += x[limb, e, s]
        for w in range(weights.shape[1]):
            for s in range(n):
                _add_columns(affine, s, _columns(_at(x, ones + w, s), _element(weights, w)))
    for s in range(n):
        range_check, bad = _fold(ranges[0, s], ranges[1, s], ranges[2, s], ranges[3, s], 4)
        short |= bad
        v = range_check
        if outputs > 1:
            second, bad = _reduce(_plus(_columns_of(affine, s), _padded(_element(affine_constant, 0))))
            first_columns = _columns(_at(q, 0, s), range_check)
            v, bad_sum = _reduce(_plus(first_columns, _columns(_at(q, 1, s), second)))
            short |= bad | bad_sum
        _put(verifiers, 0, s, _canonical(v))
    return verifiers, refused, short


@functools.lru_cache(maxsize=32)
def _constants(circuit: QueryCircuit) -> tuple:
    """The query's field constants for a circuit, as limbs: the p-th and 2p-th roots of unity with
    their Lagrange scales W**k / size, the gadget basis's fold, -1/SHARES, and the affine check's
    run of ones, remaining weights and constant / SHARES."""
    p, modulus = circuit.points, Field128.MODULUS
    roots, roots2 = Field128.nth_root_powers(p), Field128.nth_root_powers(2 * p)
    shares_inv = Field128.inv(circuit.shares)
    weights, constant = circuit.affine if circuit.affine is not None else ((), 0)
    ones = circuit.ones
    constants = (
        limbs.from_ints(roots),
        limbs.from_ints([w * Field128.inv(p) % modulus for w in roots]),
        limbs.from_ints(roots2),
        limbs.from_ints([w * Field128.inv(2 * p) % modulus for w in roots2]),
        limbs.from_ints([roots2[(m + 1) % (2 * p)] for m in range(2 * p - 1)]),
        limbs.from_ints([-shares_inv % modulus]),
        ones,
        limbs.from_ints([w % modulus for w in weights[ones:]]).reshape(limbs.LIMBS, -1),
        limbs.from_ints([constant * shares_inv % modulus]),
    )
    # C-ordered, as the compiled query was compiled for (numba compiles again for another layout).
    return (*(np.ascontiguousarray(a) if isinstance(a, np.ndarray) else a for a in constants), circuit.outputs)


def flp_query(
    circuit: QueryCircuit, x: limbs.Limbs, proof: limbs.Limbs, r: limbs.Limbs, q: limbs.Limbs
) -> tuple[limbs.Limbs, npt.NDArray[np.bool_]]:
    """privacy.vdaf.batch.flp_query, compiled: the same verifier shares and refusals for the same arguments."""
    # Columns of up to 2**26 products stay below 2**62, as _reduce needs.
    if not 0 < circuit.calls < 2**26 or x.shape[2] > circuit.calls * circuit.chunk:
        raise ValueError("the measurement share must fit in calls * chunk slots")
    verifiers, refused, short = _query(
        *(np.ascontiguousarray(a.transpose(0, 2, 1)) for a in (x, proof, r, q)),
        circuit.chunk,
        circuit.calls,
        *_constants(circuit),
    )
    if short:
        raise AssertionError("limb reduction did not converge")
    return np.ascontiguousarray(verifiers.transpose(0, 2, 1)), refused


def warm() -> None:
    """Loads (or compiles) the query now, on one tiny report, rather than in the next verification."""
    circuit = QueryCircuit(chunk=1, calls=1, shares=2, outputs=2, affine=((1,), 0))
    x = np.zeros((limbs.LIMBS, 1, 1), dtype=np.uint64)
    proof = np.zeros((limbs.LIMBS, 1, 2 + 2 * circuit.points - 1), dtype=np.uint64)
    q = np.zeros((limbs.LIMBS, 1, 3), dtype=np.uint64)
    flp_query(circuit, x, proof, x, q)
