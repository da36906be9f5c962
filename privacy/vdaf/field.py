"""Field64, Field128 and Field255 of draft-irtf-cfrg-vdaf-20, Section 6.1, with the polynomial tools of Section 6.1.3.

A field element is a plain ``int`` in ``[0, MODULUS)`` and a vector is a ``list[int]``; the field is a
class whose class methods do the arithmetic that needs the modulus. Python's integers make this the
simplest exact representation, and it is several times faster than wrapping each element in an
object. ``privacy.vdaf.limbs`` holds the numpy form of Field128 used to verify many reports at once,
``privacy.vdaf.field64_arrays`` that of Field64 used by Poplar1 over many prefixes at once.

Polynomials are kept in the Lagrange basis over the first ``n`` powers of the principal ``n``-th root of
unity (Section 6.1.3.2), as the FLP of Section 7.3 sends them.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import ClassVar

import numpy as np

from privacy.vdaf.errors import DecodeError

Vec = list[int]


def next_power_of_2(x: int) -> int:
    """The smallest power of two >= x (Section 2)."""
    return 1 << (x - 1).bit_length() if x > 1 else 1


def assert_power_of_2(x: int) -> int:
    """log2(x) for a positive power of two; ValueError otherwise (Section 2)."""
    if x <= 0 or x & (x - 1):
        raise ValueError(f"{x} is not a positive power of two")
    return x.bit_length() - 1


class Field:
    """A prime field; the NTT-friendly ones have a multiplicative subgroup of order ``GEN_ORDER`` (Section 6.1.2)."""

    MODULUS: ClassVar[int]
    ENCODED_SIZE: ClassVar[int]
    GEN_ORDER: ClassVar[int]
    # The generator of the subgroup of order GEN_ORDER, as an integer ("Generator" in Section 6.1.4).
    GENERATOR: ClassVar[int]

    @classmethod
    def zeros(cls, length: int) -> Vec:
        return [0] * length

    @classmethod
    def element(cls, integer: int) -> int:
        """``Field(integer)`` of Section 6.1: integers in (-MODULUS, MODULUS), negatives as negations."""
        if not -cls.MODULUS < integer < cls.MODULUS:
            raise ValueError("integer out of range for the field")
        return integer % cls.MODULUS

    @classmethod
    def inv(cls, x: int) -> int:
        if x % cls.MODULUS == 0:
            raise ZeroDivisionError("zero has no inverse")
        return pow(x, cls.MODULUS - 2, cls.MODULUS)

    @classmethod
    def encode_vec(cls, vec: Sequence[int]) -> bytes:
        """Little-endian, ENCODED_SIZE bytes per element (Section 6.1.1)."""
        size = cls.ENCODED_SIZE
        return b"".join(x.to_bytes(size, "little") for x in vec)

    @classmethod
    def decode_vec(cls, encoded: bytes) -> Vec:
        """Inverse of encode_vec; refuses a length that is not a multiple of ENCODED_SIZE or an element >= MODULUS."""
        size = cls.ENCODED_SIZE
        if len(encoded) % size:
            raise DecodeError("input length must be a multiple of the size of an encoded field element")
        if size == 8:  # Field64: one numpy pass (a public share of Poplar1 holds 126 of them)
            words = np.frombuffer(encoded, dtype="<u8")
            if (words >= np.uint64(cls.MODULUS)).any():
                raise DecodeError("modulus overflow")
            return words.tolist()
        vec = [int.from_bytes(encoded[i : i + size], "little") for i in range(0, len(encoded), size)]
        if any(x >= cls.MODULUS for x in vec):
            raise DecodeError("modulus overflow")
        return vec

    @classmethod
    def nth_root(cls, n: int) -> int:
        """Wn = gen ** (GEN_ORDER // n), the principal n-th root of unity fixed by the spec for interoperability."""
        if n > cls.GEN_ORDER:
            raise ValueError("n exceeds the order of the NTT subgroup")
        assert_power_of_2(n)
        return pow(cls.GENERATOR, cls.GEN_ORDER // n, cls.MODULUS)

    @classmethod
    def nth_root_powers(cls, n: int) -> Vec:
        """[Wn**0, ..., Wn**(n-1)] (a fresh list: the cached tuple behind it is shared)."""
        return list(_root_powers(cls, n))

    @classmethod
    def ntt(cls, coeffs: Sequence[int], n: int, set_s: bool = False) -> Vec:
        """Evaluations of the polynomial ``coeffs`` (len <= n) at Wn**i, or at s * Wn**i with s = W2n if set_s."""
        if len(coeffs) > n:
            raise ValueError("more coefficients than evaluation points")
        p = cls.MODULUS
        values = list(coeffs) + [0] * (n - len(coeffs))
        if set_s:
            # p(s x) has coefficients c_k s**k: evaluating it at Wn**i gives p(s Wn**i).
            s, s_k = cls.nth_root(2 * n), 1
            for k in range(n):
                values[k] = values[k] * s_k % p
                s_k = s_k * s % p
        return _ntt_in_place(values, _root_powers(cls, n), p)

    @classmethod
    def inv_ntt(cls, values: Sequence[int], n: int) -> Vec:
        """Coefficients of the polynomial of degree < n whose evaluations at Wn**i are ``values``."""
        if len(values) != n:
            raise ValueError("inv_ntt needs exactly n evaluations")
        p = cls.MODULUS
        # The inverse transform is the forward one with W**-1, scaled by 1/n.
        roots = _root_powers(cls, n)
        inverse_roots = (roots[0], *roots[:0:-1])
        n_inv = _inverse(cls, n)
        return [c * n_inv % p for c in _ntt_in_place(list(values), inverse_roots, p)]


@functools.cache
def _root_powers(field: type[Field], n: int) -> tuple[int, ...]:
    # Cached: the FLP asks for the same few sizes for every report.
    w, p = field.nth_root(n), field.MODULUS
    powers = [1] * n
    for i in range(1, n):
        powers[i] = powers[i - 1] * w % p
    return tuple(powers)


@functools.cache
def _inverse(field: type[Field], n: int) -> int:
    # Cached: 1/n for the few NTT sizes in use (a modular exponentiation each time otherwise).
    return field.inv(n)


@functools.cache
def _bit_reversal(n: int) -> tuple[int, ...]:
    log_n = assert_power_of_2(n)
    return tuple(int(f"{i:0{log_n}b}"[::-1], 2) if log_n else 0 for i in range(n))


def _ntt_in_place(values: Vec, roots: Sequence[int], p: int) -> Vec:
    """Iterative radix-2 Cooley-Tukey over len(values) points; ``roots`` are the powers of the root used."""
    n = len(values)
    values[:] = [values[j] for j in _bit_reversal(n)]
    half = 1
    while half < n:
        stride = n // (2 * half)
        twiddles = roots[::stride][:half]
        for start in range(0, n, 2 * half):
            for k in range(half):
                even = values[start + k]
                odd = values[start + k + half] * twiddles[k] % p
                values[start + k] = (even + odd) % p
                values[start + k + half] = (even - odd) % p
        half *= 2
    return values


class Field64(Field):
    """p = 2**32 * 4294967295 + 1 (Section 6.1.4)."""

    MODULUS = 2**32 * 4294967295 + 1
    ENCODED_SIZE = 8
    GEN_ORDER = 2**32
    GENERATOR = pow(7, 4294967295, MODULUS)


class Field128(Field):
    """p = 2**66 * 4611686018427387897 + 1 (Section 6.1.4)."""

    MODULUS = 2**66 * 4611686018427387897 + 1
    ENCODED_SIZE = 16
    GEN_ORDER = 2**66
    GENERATOR = pow(7, 4611686018427387897, MODULUS)


class Field255(Field):
    """p = 2**255 - 19 (Section 6.1.4): the leaves of Poplar1's IDPF, large so that the IDPF is extractable there.

    Not NTT-friendly (the draft gives it no generator): nothing polynomial runs over it.
    """

    MODULUS = 2**255 - 19
    ENCODED_SIZE = 32


def vec_add(field: type[Field], left: Sequence[int], right: Sequence[int]) -> Vec:
    if len(left) != len(right):
        raise ValueError("mismatched vector sizes")
    p = field.MODULUS
    return [(a + b) % p for a, b in zip(left, right, strict=True)]


def vec_sub(field: type[Field], left: Sequence[int], right: Sequence[int]) -> Vec:
    if len(left) != len(right):
        raise ValueError("mismatched vector sizes")
    p = field.MODULUS
    return [(a - b) % p for a, b in zip(left, right, strict=True)]


def poly_eval(field: type[Field], coeffs: Sequence[int], x: int) -> int:
    """Horner evaluation of a polynomial in the monomial basis (Section 6.1.3.1)."""
    p, result = field.MODULUS, 0
    for c in reversed(coeffs):
        result = (result * x + c) % p
    return result


def lagrange_basis_at(field: type[Field], n: int, t: int) -> Vec:
    """The n Lagrange basis polynomials of the n-th roots of unity, evaluated at t.

    l_k(t) = prod_{m != k} (t - W**m) / prod_{m != k} (W**k - W**m), and the denominator is the
    derivative of x**n - 1 at W**k, n W**-k. The numerators come from prefix and suffix products, so
    no inversion is needed and t may be a node (then l_k(t) is 1 at that node and 0 elsewhere).
    """
    p = field.MODULUS
    nodes = _root_powers(field, n)
    prefix = [1] * n
    for k in range(1, n):
        prefix[k] = prefix[k - 1] * (t - nodes[k - 1]) % p
    n_inv = _inverse(field, n)
    basis = [0] * n
    suffix = 1
    for k in range(n - 1, -1, -1):
        basis[k] = prefix[k] * suffix % p * nodes[k] % p * n_inv % p
        suffix = suffix * (t - nodes[k]) % p
    return basis


def poly_eval_batched(field: type[Field], polys: Sequence[Sequence[int]], t: int) -> Vec:
    """Evaluate each polynomial, given by its n values in the Lagrange basis, at t (Section 6.1.3.2).

    A polynomial shorter than n has zeros for its missing values, as in the spec's listing.
    """
    n = len(polys[0])
    assert_power_of_2(n)
    basis = lagrange_basis_at(field, n, t)
    p = field.MODULUS
    return [sum(v * b for v, b in zip(poly, basis, strict=False)) % p for poly in polys]


def extend_values_to_power_of_2(field: type[Field], values: Sequence[int], n: int) -> Vec:
    """Values at all n n-th roots of unity of the polynomial of degree < len(values) given at the first ones.

    The missing values v_m..v_{n-1} are those that make the top n - m monomial coefficients zero:
    c_j = (1/n) sum_i v_i W**(-ij) = 0 for j in [m, n). That is a small linear system, solved here by
    Gaussian elimination (for the degree-2 gadgets of this draft exactly one value is missing).
    """
    assert_power_of_2(n)
    m = len(values)
    if m > n:
        raise ValueError("more values than points")
    p = field.MODULUS
    roots = _root_powers(field, n)
    missing = n - m
    # Row j - m: sum_{i >= m} v_i W**(-ij) = -sum_{i < m} v_i W**(-ij); W**(-ij) = roots[(-i * j) % n].
    rows = []
    for j in range(m, n):
        rhs = -sum(v * roots[(-i * j) % n] for i, v in enumerate(values)) % p
        rows.append([roots[(-i * j) % n] for i in range(m, n)] + [rhs])
    for col in range(missing):
        pivot = next(r for r in range(col, missing) if rows[r][col])
        rows[col], rows[pivot] = rows[pivot], rows[col]
        scale = field.inv(rows[col][col])
        rows[col] = [x * scale % p for x in rows[col]]
        for r in range(missing):
            if r != col and rows[r][col]:
                factor = rows[r][col]
                rows[r] = [(x - factor * y) % p for x, y in zip(rows[r], rows[col], strict=True)]
    return list(values) + [rows[k][missing] for k in range(missing)]


def double_evaluations(field: type[Field], values: Sequence[int]) -> Vec:
    """2n values of a polynomial from its n Lagrange values: the new points W2n**(2i+1) interleave the old."""
    n = len(values)
    assert_power_of_2(n)
    odd = field.ntt(field.inv_ntt(values, n), n, set_s=True)
    return [v for pair in zip(values, odd, strict=True) for v in pair]


def poly_mul(field: type[Field], left: Sequence[int], right: Sequence[int]) -> Vec:
    """Product of two polynomials of n Lagrange values each, as 2n Lagrange values (Lagrange.poly_mul)."""
    if len(left) != len(right):
        raise ValueError("mismatched polynomial sizes")
    p = field.MODULUS
    return [a * b % p for a, b in zip(double_evaluations(field, left), double_evaluations(field, right), strict=True)]
