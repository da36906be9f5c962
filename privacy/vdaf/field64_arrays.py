"""Field64 (draft-irtf-cfrg-vdaf-20, Section 6.1.4) as numpy uint64 arrays: one element per entry, always canonical.

p = 2**64 - 2**32 + 1, so 2**64 = 2**32 - 1 (mod p) and 2**96 = -1 (mod p). A sum of two elements
that carries out of 64 bits folds the carry back as 2**32 - 1; a 128-bit product hi * 2**64 + lo,
hi = h1 * 2**32 + h0, reduces as lo - h1 + h0 * (2**32 - 1) with one correction for each borrow and
carry (the usual reduction for this prime, e.g. Plonky2's ``reduce128``). Products of the 32-bit
halves are exact in uint64.

Poplar1's IDPF evaluates tens of thousands of candidate prefixes per report at its inner levels, and
the sketch sums over all of them: these arrays replace one Python integer operation per prefix.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from privacy.vdaf.field import Field64

Elements = npt.NDArray[np.uint64]

P = Field64.MODULUS
_P = np.uint64(P)
_EPSILON = np.uint64(2**32 - 1)  # 2**64 mod p
_LOW = np.uint64(0xFFFFFFFF)
_SHIFT = np.uint64(32)


def add(a: Elements, b: Elements) -> Elements:
    """(a + b) mod p, element-wise, for canonical a and b."""
    s = a + b
    # A carry out of 64 bits stands for 2**64 = 2**32 - 1 (mod p); the sum is then already below p.
    s = np.where(s < a, s + _EPSILON, s)
    return np.where(s >= _P, s - _P, s)


def neg(a: Elements) -> Elements:
    """(-a) mod p, element-wise, for canonical a."""
    return np.where(a == 0, a, _P - a)


def mul(a: Elements, b: Elements) -> Elements:
    """(a * b) mod p, element-wise (broadcast), for canonical a and b.

    In place on its own temporaries: at tens of thousands of elements per call (Poplar1's sketch),
    each allocation and pass costs as much as the arithmetic.
    """
    a0, a1 = a & _LOW, a >> _SHIFT
    b0, b1 = b & _LOW, b >> _SHIFT
    lo = a0 * b0
    middle = a0 * b1
    cross = a1 * b0
    middle += cross
    middle_carry = middle < cross  # worth 2**96
    hi = a1 * b1
    hi += middle >> _SHIFT
    hi += middle_carry.astype(np.uint64) << _SHIFT
    middle <<= _SHIFT
    lo += middle
    hi += lo < middle  # the carry out of the low word
    return _reduce128(hi, lo)


def _reduce128(hi: Elements, lo: Elements) -> Elements:
    """hi * 2**64 + lo mod p = lo - h1 + h0 * (2**32 - 1), hi = h1 * 2**32 + h0; overwrites hi and lo."""
    h1 = hi >> _SHIFT
    hi &= _LOW
    # A borrow wraps lo - h1 by 2**64; adding p instead means subtracting 2**64 - p = 2**32 - 1.
    borrow = lo < h1
    lo -= h1
    lo -= borrow * _EPSILON
    hi *= _EPSILON  # h0 * (2**32 - 1) < 2**64
    lo += hi
    lo += (lo < hi) * _EPSILON  # a carry out of 64 bits stands for 2**32 - 1
    lo -= (lo >= _P) * _P
    return lo


def total(a: Elements) -> int:
    """sum(a) mod p as a Python integer: the 32-bit halves summed apart are exact below 2**32 terms."""
    if a.size >= 2**32:
        raise ValueError("too many elements to sum exactly")
    low = int((a & _LOW).sum(dtype=np.uint64))
    high = int((a >> _SHIFT).sum(dtype=np.uint64))
    return (low + (high << 32)) % P


def column_totals(a: Elements) -> Elements:
    """sum(a, axis=0) mod p: the 32-bit halves summed apart, exact below 2**32 rows, then combined mod p."""
    if a.shape[0] >= 2**32:
        raise ValueError("too many rows to sum exactly")
    low = (a & _LOW).sum(axis=0, dtype=np.uint64) % _P
    high = (a >> _SHIFT).sum(axis=0, dtype=np.uint64) % _P
    return add(low, mul(high, np.uint64(2**32)))


def row_totals(a: Elements) -> Elements:
    """sum(a, axis=-1) mod p: one sum per row (per report in Poplar1's batched sketch), exact as column_totals."""
    if a.shape[-1] >= 2**32:
        raise ValueError("too many columns to sum exactly")
    low = (a & _LOW).sum(axis=-1, dtype=np.uint64) % _P
    high = (a >> _SHIFT).sum(axis=-1, dtype=np.uint64) % _P
    return add(low, mul(high, np.uint64(2**32)))


# Products of 16-bit limbs are below 2**32, and 2**21 of them sum below 2**53: exact in float64.
_MAX_DOT_LENGTH = 2**21
_DOT_CHUNK = 4096
_LIMB_WEIGHTS = [np.uint64(pow(2, 16 * shift, P)) for shift in range(7)]


def row_dots(lefts: list[Elements], rights: list[Elements]) -> Elements:
    """sum(x * y, axis=-1) mod p for every x in ``lefts`` and y in ``rights`` (each rows × n): rows × len(lefts) × len(rights).

    Poplar1's sketch is three such sums per report over tens of thousands of prefixes. A modular
    product per element costs a score of numpy passes; here each element is split into its four
    16-bit limbs (a view, no arithmetic), the limb products are summed exactly by one float64 matrix
    product per row (BLAS), and only the few sums are reduced mod p.
    """
    rows, n = lefts[0].shape
    if n >= _MAX_DOT_LENGTH:
        raise ValueError("too many columns to sum exactly")

    def limbs(elements: list[Elements]) -> npt.NDArray[np.float64]:
        """rows × n × 4·len(elements): the 16-bit limbs of each, lowest first."""
        stacked = np.stack([np.asarray(x, dtype="<u8") for x in elements], axis=2)
        return stacked.view("<u2").reshape(rows, stacked.shape[1], 4 * len(elements)).astype(np.float64)

    sums = np.zeros((rows, 4 * len(lefts), 4 * len(rights)))
    for start in range(0, n, _DOT_CHUNK):  # a slice of the columns at a time, to stay in the core's cache
        part = slice(start, start + _DOT_CHUNK)
        sums += np.matmul(limbs([x[:, part] for x in lefts]).transpose(0, 2, 1), limbs([y[:, part] for y in rights]))
    sums = sums.astype(np.uint64).reshape(rows, len(lefts), 4, len(rights), 4)  # integers below 2**53: exact
    out = np.zeros((rows, len(lefts), len(rights)), dtype=np.uint64)
    for shift, weight in enumerate(_LIMB_WEIGHTS):
        # The limb products of weight 2**(16 * shift): at most four sums below 2**53, so no overflow.
        same = sum(sums[:, :, a, :, shift - a] for a in range(max(0, shift - 3), min(shift, 3) + 1))
        out = add(out, mul(same % _P, weight))
    return out
