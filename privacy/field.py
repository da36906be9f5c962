"""Additive secret sharing over the 64-bit prime field of the VDAF draft (Field64).

A report vector ``x`` in Z_p^k is split into a uniformly random ``leader`` share and
``helper = x - leader (mod p)``. Each share alone is uniform on Z_p^k, so an aggregator holding one
share learns nothing about ``x``; only the sum of the two aggregate shares reveals the aggregate.
"""

from __future__ import annotations

import os

import numpy as np
import numpy.typing as npt

# p = 2^64 - 2^32 + 1, the Field64 modulus of draft-irtf-cfrg-vdaf. p > 2^63, so the sum of two
# residues can overflow uint64: ``add`` avoids the overflow instead of relying on wraparound.
MODULUS: int = 2**64 - 2**32 + 1
_P = np.uint64(MODULUS)

FieldVector = npt.NDArray[np.uint64]


def to_field(values: npt.ArrayLike) -> FieldVector:
    """Embed non-negative integers smaller than p (counts, bits) in the field."""
    array = np.asarray(values)
    if array.size and (array.min() < 0 or int(array.max()) >= MODULUS):
        raise ValueError("field elements must lie in [0, p)")
    return array.astype(np.uint64)


def from_signed(values: npt.NDArray[np.int64]) -> FieldVector:
    """Embed signed integers (e.g. noise) in the field: -v is stored as p - v."""
    values = np.asarray(values, dtype=np.int64)
    magnitude = np.abs(values).astype(np.uint64)
    return np.where(values < 0, _P - magnitude, magnitude)


def add(a: FieldVector, b: FieldVector) -> FieldVector:
    """(a + b) mod p, element-wise, for residues a, b in [0, p)."""
    gap = _P - b  # in [1, p]: a + b >= p exactly when a >= p - b
    return np.where(a >= gap, a - gap, a + b)


def subtract(a: FieldVector, b: FieldVector) -> FieldVector:
    """(a - b) mod p, element-wise, for residues a, b in [0, p)."""
    return np.where(a >= b, a - b, a + (_P - b))


def random_vector(length: int, rng: np.random.Generator) -> FieldVector:
    """A uniform element of Z_p^length."""
    return rng.integers(0, MODULUS, size=length, dtype=np.uint64)


def random_vector_secure(length: int) -> FieldVector:
    """A uniform element of Z_p^length from the operating system's CSPRNG, for real devices' shares.

    64 random bits are uniform on [0, 2^64); the 2^32 - 1 values >= p are redrawn (probability
    2^-32 each), which leaves the rest uniform on [0, p).
    """
    vector = np.frombuffer(os.urandom(8 * length), dtype="<u8").astype(np.uint64)
    while (redraw := vector >= _P).any():
        vector[redraw] = np.frombuffer(os.urandom(8 * int(redraw.sum())), dtype="<u8")
    return vector


def split(values: FieldVector, rng: np.random.Generator | None = None) -> tuple[FieldVector, FieldVector]:
    """Split ``values`` into (leader, helper) additive shares modulo p.

    A real device passes no ``rng``: its mask then comes from the OS CSPRNG. The simulator passes
    its seeded generator so a round can be replayed.
    """
    length = values.shape[-1] if values.ndim else 1
    mask = random_vector_secure(length) if rng is None else random_vector(length, rng)
    leader = mask.reshape(values.shape)
    return leader, subtract(values, leader)


def combine(leader: FieldVector, helper: FieldVector) -> FieldVector:
    """Reconstruct a vector (or an aggregate) from its two shares."""
    return add(leader, helper)


def field_sum(vectors: list[FieldVector], length: int) -> FieldVector:
    """Sum field vectors modulo p; an empty list sums to zero."""
    total = np.zeros(length, dtype=np.uint64)
    for vector in vectors:
        total = add(total, vector)
    return total


def total(values: FieldVector) -> int:
    """The sum of the residues of a vector, mod p, without overflow (halves of 32 bits summed apart)."""
    low = int((values & np.uint64(0xFFFFFFFF)).sum(dtype=np.uint64))
    high = int((values >> np.uint64(32)).sum(dtype=np.uint64))
    return ((high << 32) + low) % MODULUS


def to_counts(values: FieldVector, *, bound: int) -> npt.NDArray[np.int64]:
    """Read reconstructed field elements back as integer counts in [0, bound].

    A value above ``bound`` means the shares were not of honest reports (or were mixed up),
    so it is an error, never silently wrapped.
    """
    if values.size and int(values.max()) > bound:
        raise ValueError(f"reconstructed count exceeds the number of reports ({bound})")
    return values.astype(np.int64)


def to_signed(values: FieldVector, *, low: int, high: int) -> npt.NDArray[np.int64]:
    """Read reconstructed field elements as signed integers in [low, high] (low < 0 < high << p).

    Residues above p/2 stand for negative numbers: aggregator noise can push a count below zero.
    A value outside the range means the shares were not honest or were mixed up: an error.
    """
    signed = np.where(values > _P // 2, -(_P - values).astype(np.int64), values.astype(np.int64))
    if signed.size and (int(signed.min()) < low or int(signed.max()) > high):
        raise ValueError(f"a reconstructed value lies outside [{low}, {high}]")
    return signed
