"""The Prio3 FLP query's wire sums (privacy.vdaf.batch.WireSums), compiled: the aggregators' hot loop.

Verifying a 1,024-bucket report costs each aggregator about 3,000 Field128 multiplications: the
powers of each call's joint randomness and two dot products over the measurement share. In numpy
(privacy.vdaf.limbs) each multiplication is some 100 passes over arrays of limbs; compiled with
numba, each runs in registers, its 16 limb products summed into columns as they come. On a chunk of
128 such reports this takes 5.6 ms against 44 ms (bench/results/upload_prio3.md), which is most of
the difference between the two paths.

The arithmetic is limbs.mul_wide's and limbs.reduce's, element by element: four 32-bit limbs in
uint64, products split into 32-bit columns, the columns folded with 2**128 = 28 * 2**64 - 1 (mod p).
It lives here, not in privacy/, because the device SDK ships privacy/ and has no use for a compiler.
tests/unit/test_wire_sums_jit.py holds it to the numpy function, extreme limbs included;
the batch path, and so this, agrees byte for byte with the per-report reference path.

Compiled on first use, about 2 s, and kept on disk (``cache=True``: in __pycache__ beside this file,
or else in the user's cache folder or NUMBA_CACHE_DIR) so that the next processes load it in a
fraction of that. Where no folder is writable, each process compiles it once.
"""

from __future__ import annotations

import numba
import numpy as np

from privacy.vdaf import limbs

_MASK = np.uint64(0xFFFFFFFF)
_SHIFT = np.uint64(32)


@numba.njit(inline="always")
def _columns(a0, a1, a2, a3, b0, b1, b2, b3):  # numba infers the uint64 types
    """The 8 columns (each below 2**35) of the exact product of a and b, as limbs.mul_wide."""
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
def _mul(a0, a1, a2, a3, b0, b1, b2, b3):
    """a * b lazily reduced (below 2**128), as limbs.mul, and whether the reduction came short.

    Three folds always suffice for columns of one product (limbs._normalize's bounds); the flag
    makes a broken bound an error rather than a wrong verdict.
    """
    c0, c1, c2, c3, c4, c5, c6, c7 = _columns(a0, a1, a2, a3, b0, b1, b2, b3)
    v0 = np.int64(c0) - np.int64(c4) - 28 * np.int64(c6)
    v1 = np.int64(c1) - np.int64(c5) - 28 * np.int64(c7)
    v2 = np.int64(c2) + 28 * np.int64(c4) + 783 * np.int64(c6)
    v3 = np.int64(c3) + 28 * np.int64(c5) + 783 * np.int64(c7)
    carry = np.int64(0)
    for _ in range(3):
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
    return np.uint64(v0), np.uint64(v1), np.uint64(v2), np.uint64(v3), carry != 0


@numba.njit(inline="always")
def _accumulate(sums, j, s, columns):
    """Adds the 8 columns of a product to report s's sums at slot j."""
    for q in range(8):
        sums[q, j, s] += columns[q]


def _compiled(function):
    try:
        return numba.njit(cache=True)(function)
    except RuntimeError:  # numba found no writable folder to cache it in: compile in each process
        return numba.njit(function)


@_compiled
def _sums(x, inner, r, chunk, calls):
    """x (4, length, n), inner and r (4, calls, n): reports last, so the inner loop runs along them."""
    length, n = x.shape[1], x.shape[2]
    even = np.zeros((8, chunk, n), np.uint64)
    odd = np.zeros((8, chunk, n), np.uint64)
    k = np.empty((4, n), np.uint64)  # l_i r_i**(j+1) of each report, for the current call and slot
    short = False
    for i in range(calls):
        for s in range(n):
            k[0, s], k[1, s], k[2, s], k[3, s], bad = _mul(
                inner[0, i, s],
                inner[1, i, s],
                inner[2, i, s],
                inner[3, i, s],
                r[0, i, s],
                r[1, i, s],
                r[2, i, s],
                r[3, i, s],
            )
            short |= bad
        for j in range(min(chunk, length - i * chunk)):
            e = i * chunk + j
            for s in range(n):
                x0, x1, x2, x3 = x[0, e, s], x[1, e, s], x[2, e, s], x[3, e, s]
                _accumulate(even, j, s, _columns(k[0, s], k[1, s], k[2, s], k[3, s], x0, x1, x2, x3))
                a0, a1, a2, a3 = inner[0, i, s], inner[1, i, s], inner[2, i, s], inner[3, i, s]
                _accumulate(odd, j, s, _columns(a0, a1, a2, a3, x0, x1, x2, x3))
                k[0, s], k[1, s], k[2, s], k[3, s], bad = _mul(
                    k[0, s], k[1, s], k[2, s], k[3, s], r[0, i, s], r[1, i, s], r[2, i, s], r[3, i, s]
                )
                short |= bad
    return even, odd, short


def wire_sums(
    x: limbs.Limbs, inner: limbs.Limbs, r: limbs.Limbs, chunk: int, calls: int
) -> tuple[limbs.Columns, limbs.Columns]:
    """privacy.vdaf.batch.wire_sums, compiled: the same columns for the same arguments."""
    # Columns of up to 2**28 calls stay below 2**63, as limbs.reduce needs.
    if not 0 < calls < 2**28 or x.shape[2] > calls * chunk:
        raise ValueError("the measurement share must fit in calls * chunk slots")
    even, odd, short = _sums(
        np.ascontiguousarray(x.transpose(0, 2, 1)),
        np.ascontiguousarray(inner.transpose(0, 2, 1)),
        np.ascontiguousarray(r.transpose(0, 2, 1)),
        chunk,
        calls,
    )
    if short:
        raise AssertionError("limb reduction did not converge")
    return even.view(np.int64), odd.view(np.int64)


def warm() -> None:
    """Loads (or compiles) the loop now, on one tiny report, rather than in the next verification."""
    one = np.zeros((limbs.LIMBS, 1, 1), dtype=np.uint64)
    wire_sums(one, one, one, 1, 1)
