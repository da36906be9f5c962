"""The numpy Field64 arithmetic against Python integers, edge values included."""

from __future__ import annotations

import random

import numpy as np

from privacy.vdaf import field64_arrays
from privacy.vdaf.field import Field64
from privacy.vdaf.poplar1 import _next_array64
from privacy.vdaf.xof import _next_vec

P = Field64.MODULUS
EDGES = [0, 1, 2, 2**32 - 1, 2**32, 2**32 + 1, 2**63, P - 2**32, P - 2, P - 1]


def _operands() -> tuple[list[int], list[int]]:
    rng = random.Random(64)
    randoms = [rng.randrange(P) for _ in range(2000)]
    left = [a for a in EDGES for _ in EDGES] + randoms
    right = [b for _ in EDGES for b in EDGES] + randoms[::-1]
    return left, right


def test_add_neg_and_mul_match_python_integers_mod_p() -> None:
    left, right = _operands()
    a, b = np.array(left, dtype=np.uint64), np.array(right, dtype=np.uint64)
    assert field64_arrays.add(a, b).tolist() == [(x + y) % P for x, y in zip(left, right, strict=True)]
    assert field64_arrays.neg(a).tolist() == [-x % P for x in left]
    assert field64_arrays.mul(a, b).tolist() == [x * y % P for x, y in zip(left, right, strict=True)]


def test_total_is_the_sum_mod_p() -> None:
    left, _ = _operands()
    assert field64_arrays.total(np.array(left, dtype=np.uint64)) == sum(left) % P
    assert field64_arrays.total(np.zeros(0, dtype=np.uint64)) == 0


class _Stream:
    """A byte stream read in order, with the XOF's next / next_vec."""

    def __init__(self, data: bytes) -> None:
        self._data, self._read = data, 0

    def next(self, length: int) -> bytes:
        self._read += length
        return self._data[self._read - length : self._read]

    def next_vec(self, field: type[Field64], length: int) -> list[int]:
        return _next_vec(self, field, length)


def test_verify_rand_read_in_one_piece_skips_rejected_draws_as_the_spec_does() -> None:
    rng = random.Random(7)
    elements = [rng.randrange(P) for _ in range(12)]
    elements[3] = elements[9] = 2**64 - 1  # two draws >= p: rejected, the stream read on
    data = b"".join(x.to_bytes(8, "little") for x in elements)
    expected = _next_vec(_Stream(data), Field64, 10)
    assert _next_array64(_Stream(data), 10).tolist() == expected
    assert len(expected) == 10 and 2**64 - 1 not in expected


def test_column_totals_are_the_sums_mod_p() -> None:
    left, right = _operands()
    rows = [left, right, [P - 1] * len(left)]
    expected = [sum(column) % P for column in zip(*rows, strict=True)]
    assert field64_arrays.column_totals(np.array(rows, dtype=np.uint64)).tolist() == expected
