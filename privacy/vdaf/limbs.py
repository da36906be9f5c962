"""Field128 (draft-irtf-cfrg-vdaf-20, Section 6.1) as numpy arrays of four 32-bit limbs.

An element x is stored as limbs[k] = (x >> 32k) & 0xFFFFFFFF, k = 0..3, in uint64 arrays of shape
(4, ...). Results of the arithmetic are *lazily reduced*: below 2**128 and congruent to the true
value mod p, not necessarily below p; ``canonical`` finishes the reduction before anything is compared
or encoded.

Products use 32 x 32 -> 64-bit limb products, exact in uint64. Reduction uses the shape of the modulus,
p = 2**128 - 28 * 2**64 + 1, so 2**128 = 28 * 2**64 - 1 (mod p): the high half of a 256-bit product
folds into the low half with small multipliers, and a final carry folds the same way. A sum of
products (a dot product) is accumulated exactly before one reduction.

On the benchmark machine a vectorised multiplication costs about 30 ns an element, against about
170-250 ns for Python integers, which is what makes batch verification fast.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from privacy.vdaf.field import Field128

P = Field128.MODULUS
LIMBS = 4
_MASK = 0xFFFFFFFF
_U_MASK = np.uint64(_MASK)
_U_SHIFT = np.uint64(32)
_P_LIMBS = [(P >> (32 * k)) & _MASK for k in range(LIMBS)]
# Each pass folds the carry out of the top limb back in; three always suffice from the bounds below.
_MAX_FOLDS = 4

Limbs = npt.NDArray[np.uint64]  # shape (4, ...): an element per trailing index, lazily reduced
Columns = npt.NDArray[np.int64]  # shape (8, ...): the exact integer sum_k col[k] * 2**(32k)


def from_bytes(data: bytes, shape: tuple[int, ...]) -> Limbs:
    """Elements encoded as by Field128.encode_vec (16 bytes little-endian each), not checked against p."""
    words = np.frombuffer(data, dtype="<u4").reshape(*shape, LIMBS)
    return np.moveaxis(words, -1, 0).astype(np.uint64)


def to_bytes(a: Limbs) -> bytes:
    """Field128.encode_vec of the canonical values, in C order of the trailing shape."""
    return np.ascontiguousarray(np.moveaxis(canonical(a), 0, -1)).astype("<u4").tobytes()


def from_ints(values: Sequence[int]) -> Limbs:
    """A 1-D array of field elements (integers in [0, 2**128)), shape (4, len(values))."""
    return from_bytes(b"".join(v.to_bytes(16, "little") for v in values), (len(values),))


def to_ints(a: Limbs) -> list[int]:
    """The canonical values as Python integers, flattened in C order."""
    c = canonical(a).reshape(LIMBS, -1).tolist()
    return [x0 | x1 << 32 | x2 << 64 | x3 << 96 for x0, x1, x2, x3 in zip(*c, strict=True)]


def constant(values: int | Sequence[int], ndim: int, axis: int = -1) -> Limbs:
    """Field constants (reduced mod p) shaped to broadcast against arrays with ``ndim`` element axes.

    A scalar gives shape (4, 1, ..., 1); a sequence of n values lies along element axis ``axis``.
    """
    shape = [1] * ndim
    if isinstance(values, int):
        return from_ints([values % P]).reshape(LIMBS, *shape)
    shape[axis] = len(values)
    return from_ints([v % P for v in values]).reshape(LIMBS, *shape)


def _normalize(v: npt.NDArray[np.int64]) -> Limbs:
    """Signed limbs (|v[k]| < 2**62) -> limbs in [0, 2**32) of a value in [0, 2**128) congruent mod p.

    Carries propagate with floor semantics (arithmetic shifts), so negative limbs work. A carry c out of
    the top limb stands for c * 2**128 = c * (28 * 2**64 - 1): subtract it at limb 0, add 28c at limb 2.
    Each fold replaces V by V - c p with c = floor(V / 2**128), which brings V into [0, 2**128) within
    three passes.
    """
    for _ in range(_MAX_FOLDS):
        carry = v[0] >> 32
        v[0] &= _MASK
        v[1] += carry
        carry = v[1] >> 32
        v[1] &= _MASK
        v[2] += carry
        carry = v[2] >> 32
        v[2] &= _MASK
        v[3] += carry
        carry = v[3] >> 32
        v[3] &= _MASK
        if not carry.any():
            return v.view(np.uint64)
        v[0] -= carry
        v[2] += 28 * carry
    raise AssertionError("limb reduction did not converge")


def mul_wide(a: Limbs, b: Limbs) -> Columns:
    """The exact products a * b (broadcast), as 8 columns each below 2**35.

    Columns of several products may be added (summed over an axis) before ``reduce``: up to 2**17
    terms keep every intermediate of the reduction within int64.
    """
    shape = np.broadcast_shapes(a.shape[1:], b.shape[1:])
    cols = np.zeros((2 * LIMBS, *shape), dtype=np.uint64)
    # Two scratch arrays reused by all 16 limb products: this is the hot loop of batch verification.
    product = np.empty(shape, dtype=np.uint64)
    low = np.empty(shape, dtype=np.uint64)
    for k in range(LIMBS):
        for m in range(LIMBS):
            np.multiply(a[k], b[m], out=product)
            np.bitwise_and(product, _U_MASK, out=low)
            cols[k + m] += low
            np.right_shift(product, _U_SHIFT, out=product)
            cols[k + m + 1] += product
    return cols.view(np.int64)


def reduce(cols: Columns) -> Limbs:
    """Columns (of a product or a sum of products) -> lazily reduced limbs.

    With H = c4 + c5 2**32 + c6 2**64 + c7 2**96 the part above 2**128, x = L - H + 28 H 2**64 (mod p),
    and the terms 28 c6 2**128 and 28 c7 2**160 fold once more; collected by limb:
    """
    c = cols
    v = np.empty((LIMBS, *cols.shape[1:]), dtype=np.int64)
    v[0] = c[0] - c[4] - 28 * c[6]
    v[1] = c[1] - c[5] - 28 * c[7]
    v[2] = c[2] + 28 * c[4] + 783 * c[6]
    v[3] = c[3] + 28 * c[5] + 783 * c[7]
    return _normalize(v)


def mul(a: Limbs, b: Limbs) -> Limbs:
    return reduce(mul_wide(a, b))


def add(a: Limbs, b: Limbs) -> Limbs:
    return _normalize(a.view(np.int64) + b.view(np.int64))


def sub(a: Limbs, b: Limbs) -> Limbs:
    return _normalize(a.view(np.int64) - b.view(np.int64))


def limb_sum(a: Limbs, axis: int) -> Limbs:
    """The sum of the elements along a (negative) element axis."""
    if axis >= 0:
        raise ValueError("pass a negative axis: axis 0 holds the limbs")
    return _normalize(a.view(np.int64).sum(axis=axis))


def dot(a: Limbs, b: Limbs, axis: int = -1) -> Limbs:
    """sum(a * b) along a (negative) element axis, with one reduction."""
    if axis >= 0:
        raise ValueError("pass a negative axis: axis 0 holds the limbs")
    return reduce(mul_wide(a, b).sum(axis=axis))


def is_canonical(a: Limbs) -> npt.NDArray[np.bool_]:
    """a < p, element-wise (for values read from the wire)."""
    less = np.zeros(a.shape[1:], dtype=bool)
    equal = np.ones(a.shape[1:], dtype=bool)
    for k in reversed(range(LIMBS)):
        limb = np.uint64(_P_LIMBS[k])
        less |= equal & (a[k] < limb)
        equal &= a[k] == limb
    return less


def canonical(a: Limbs) -> Limbs:
    """The representative in [0, p): one subtraction of p suffices since a < 2**128 < 2p."""
    return np.where(is_canonical(a), a, _minus_p(a))


def _minus_p(a: Limbs) -> Limbs:
    v = a.astype(np.int64)
    for k in range(LIMBS):
        v[k] -= _P_LIMBS[k]
    for k in range(LIMBS - 1):
        carry = v[k] >> 32
        v[k] &= _MASK
        v[k + 1] += carry
    return v.view(np.uint64)


def equal(a: Limbs, b: Limbs) -> npt.NDArray[np.bool_]:
    """a == b as field elements, element-wise."""
    return np.all(canonical(a) == canonical(b), axis=0)


def geometric(first: Limbs, ratio: Limbs, count: int) -> Limbs:
    """first * ratio**j for j < count, along a new first element axis: shape (4, count, ...).

    Built by doubling (the known block times ratio**size), so it takes log2(count) vectorised
    multiplications rather than count; the new axis comes first so that each block is contiguous.
    """
    shape = np.broadcast_shapes(first.shape, ratio.shape)
    out = np.empty((LIMBS, count, *shape[1:]), dtype=np.uint64)
    out[:, 0] = first
    step = ratio[:, None]  # ratio**size: the next block is the known one times this
    size = 1
    while size < count:
        take = min(size, count - size)
        out[:, size : size + take] = mul(out[:, :take], step)
        size += take
        if size < count:
            step = mul(step, step)
    return out


def ntt(values: Limbs, roots: Sequence[int]) -> Limbs:
    """The NTT along the first element axis (length n, a power of two): out[k] = sum_j values[j] roots[1]**(jk).

    ``roots`` are the n powers of the root. Radix-2, decimation in time, every butterfly of a stage in
    one vectorised step over all the other axes.
    """
    n = values.shape[1]
    log_n = n.bit_length() - 1
    if n != 1 << log_n or len(roots) != n:
        raise ValueError("the NTT length must be a power of two and match the roots")
    order = [int(f"{i:0{log_n}b}"[::-1], 2) if log_n else 0 for i in range(n)]
    a = values[:, order]
    rest = a.shape[2:]
    half = 1
    while half < n:
        blocks = a.reshape(LIMBS, n // (2 * half), 2, half, *rest)
        even, odd = blocks[:, :, 0], blocks[:, :, 1]
        twiddles = constant([roots[(n // (2 * half)) * j] for j in range(half)], 2 + len(rest), axis=1)
        odd = mul(odd, twiddles)
        a = np.stack([add(even, odd), sub(even, odd)], axis=2).reshape(LIMBS, n, *rest)
        half *= 2
    return a
