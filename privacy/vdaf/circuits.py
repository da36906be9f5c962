"""Validity circuits of draft-irtf-cfrg-vdaf-20, Section 7.4: Count, Sum, SumVec, Histogram, MultihotCountVec.

SumVec, Histogram and MultihotCountVec share one range check (Section 7.4.3): every entry x of the
encoded measurement must be a bit, and a random linear combination of x * (x - 1) over all entries
is zero with high probability only if each is. The combination's weights are powers of one joint
randomness element per ``ParallelSum`` call, folded into the gadget's first input: the gadget sums
``chunk_length`` products (r**j x) * (x - 1).
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence

import numpy as np

from privacy.vdaf.errors import MeasurementError
from privacy.vdaf.field import Field, Field64, Field128, Vec
from privacy.vdaf.flp import Gadget, Mul, ParallelSum, PolyEval, Valid


def encode_range_checked_int(field: type[Field], value: int, max_measurement: int) -> Vec:
    """Bits of ``value`` with weights 1, 2, ..., 2**(bits-2) and a last weight that makes the total max_measurement.

    With these weights only integers in [0, max_measurement] have a bit representation (Section 7.4.2).
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise MeasurementError(f"measurement {value!r} is not an integer")
    if not 0 <= value <= max_measurement:
        raise MeasurementError(f"measurement {value} is outside [0, {max_measurement}]")
    value = int(value)
    bits = max_measurement.bit_length()
    rest_all_ones_value = 2 ** (bits - 1) - 1
    last_weight = max_measurement - rest_all_ones_value
    if value <= rest_all_ones_value:
        rest, last = value, 0
    else:
        rest, last = value - last_weight, 1
    return [(rest >> bit) & 1 for bit in range(bits - 1)] + [last]


def range_checked_weights(max_measurement: int) -> list[int]:
    """The weights of encode_range_checked_int's bits: decoding is the dot product with them."""
    bits = max_measurement.bit_length()
    return [1 << bit for bit in range(bits - 1)] + [max_measurement - (2 ** (bits - 1) - 1)]


def decode_range_checked_int(field: type[Field], encoded: Sequence[int], max_measurement: int) -> int:
    """Inverse of encode_range_checked_int; linear, so it also maps shares to shares."""
    p = field.MODULUS
    return sum(w * b for w, b in zip(range_checked_weights(max_measurement), encoded, strict=True)) % p


def _require_bit(value: object) -> int:
    # Booleans and integers (Python's or numpy's); not floats or strings that happen to compare equal.
    if isinstance(value, numbers.Integral | np.bool_) and value in (0, 1):
        return int(value)
    raise MeasurementError(f"entry {value!r} is not a bit")


class Count(Valid):
    """0 or 1; the circuit is x * x - x with one Mul (Section 7.4.1)."""

    GADGET_CALLS = [1]
    MEAS_LEN = 1
    JOINT_RAND_LEN = 0
    OUTPUT_LEN = 1
    EVAL_OUTPUT_LEN = 1

    def __init__(self, field: type[Field] = Field64) -> None:
        self.field = field
        self.GADGETS: list[Gadget] = [Mul()]

    def encode(self, measurement: int) -> Vec:
        return [_require_bit(measurement)]

    def eval(self, meas: Sequence[int], joint_rand: Sequence[int], num_shares: int) -> Vec:
        squared = self.GADGETS[0].eval(self.field, [meas[0], meas[0]])
        return [(squared - meas[0]) % self.field.MODULUS]

    def truncate(self, meas: Sequence[int]) -> Vec:
        return list(meas)

    def decode(self, output: Sequence[int], num_measurements: int) -> int:
        return output[0]


class Sum(Valid):
    """An integer in [0, max_measurement], bit-encoded; each bit checked with PolyEval(x**2 - x) (Section 7.4.2)."""

    JOINT_RAND_LEN = 0
    OUTPUT_LEN = 1

    def __init__(self, max_measurement: int, field: type[Field] = Field64) -> None:
        if not 0 < max_measurement < field.MODULUS:
            raise ValueError("max_measurement must be positive and below the modulus")
        self.field = field
        self.max_measurement = max_measurement
        self.bits = max_measurement.bit_length()
        self.GADGET_CALLS = [self.bits]
        self.GADGETS: list[Gadget] = [PolyEval([0, -1, 1], self.bits)]
        self.MEAS_LEN = self.bits
        self.EVAL_OUTPUT_LEN = self.bits

    def encode(self, measurement: int) -> Vec:
        return encode_range_checked_int(self.field, measurement, self.max_measurement)

    def eval(self, meas: Sequence[int], joint_rand: Sequence[int], num_shares: int) -> Vec:
        return [self.GADGETS[0].eval(self.field, [b]) for b in meas]

    def truncate(self, meas: Sequence[int]) -> Vec:
        return [decode_range_checked_int(self.field, meas, self.max_measurement)]

    def decode(self, output: Sequence[int], num_measurements: int) -> int:
        return output[0]


class ChunkedRangeCheck(Valid):
    """The bit check shared by SumVec, Histogram and MultihotCountVec (their identical eval loops).

    Subclasses set MEAS_LEN and add their own second output, if any.
    """

    chunk_length: int

    def _init_range_check(self, field: type[Field], meas_len: int, chunk_length: int) -> None:
        if chunk_length < 1:
            raise ValueError("chunk_length must be positive")
        self.field = field
        self.chunk_length = chunk_length
        self.MEAS_LEN = meas_len
        self.GADGETS: list[Gadget] = [ParallelSum(Mul(), chunk_length)]
        self.GADGET_CALLS = [(meas_len + chunk_length - 1) // chunk_length]
        self.JOINT_RAND_LEN = self.GADGET_CALLS[0]

    def range_check(self, meas: Sequence[int], joint_rand: Sequence[int], num_shares: int) -> int:
        """sum over calls i of ParallelSum over j of (r_i**(j+1) x) * (x - 1/num_shares), x = meas[i*chunk + j]."""
        p = self.field.MODULUS
        shares_inv = self.field.inv(num_shares)
        out = 0
        for i in range(self.GADGET_CALLS[0]):
            r = joint_rand[i]
            r_power = r
            inputs: list[int] = []
            for j in range(self.chunk_length):
                index = i * self.chunk_length + j
                # Past the end the circuit sees zeros, so the padding contributes 0 * (0 - 1/s).
                meas_elem = meas[index] if index < len(meas) else 0
                inputs += [r_power * meas_elem % p, (meas_elem - shares_inv) % p]
                r_power = r_power * r % p
            out += self.GADGETS[0].eval(self.field, inputs)
        return out % p

    def affine_check(self) -> tuple[list[int], int] | None:
        """The circuit's second output as (a, b): sum_k a_k x_k + b / num_shares; None if there is none.

        The batch verifier (privacy.vdaf.batch) evaluates the circuit from this description; the tests
        hold it to eval() on random shares.
        """
        return None


class SumVec(ChunkedRangeCheck):
    """``length`` integers in [0, max_measurement], each bit-encoded as in Sum (Section 7.4.3)."""

    EVAL_OUTPUT_LEN = 1

    def __init__(self, length: int, max_measurement: int, chunk_length: int, field: type[Field] = Field128) -> None:
        if length < 1 or not 0 < max_measurement < field.MODULUS:
            raise ValueError("length and max_measurement must be positive (and the latter below the modulus)")
        self.length = length
        self.max_measurement = max_measurement
        self.bits = max_measurement.bit_length()
        self._init_range_check(field, length * self.bits, chunk_length)
        self.OUTPUT_LEN = length

    def encode(self, measurement: Sequence[int]) -> Vec:
        if len(measurement) != self.length:
            raise MeasurementError(f"measurement has {len(measurement)} entries, not {self.length}")
        encoded: Vec = []
        for value in measurement:
            encoded += encode_range_checked_int(self.field, value, self.max_measurement)
        return encoded

    def eval(self, meas: Sequence[int], joint_rand: Sequence[int], num_shares: int) -> Vec:
        return [self.range_check(meas, joint_rand, num_shares)]

    def truncate(self, meas: Sequence[int]) -> Vec:
        bits = self.bits
        return [
            decode_range_checked_int(self.field, meas[i * bits : (i + 1) * bits], self.max_measurement)
            for i in range(self.length)
        ]

    def decode(self, output: Sequence[int], num_measurements: int) -> list[int]:
        return list(output)


class Histogram(ChunkedRangeCheck):
    """One-hot vector of ``length`` buckets: each entry a bit, and the entries sum to 1 (Section 7.4.4)."""

    EVAL_OUTPUT_LEN = 2

    def __init__(self, length: int, chunk_length: int, field: type[Field] = Field128) -> None:
        if length < 1:
            raise ValueError("length must be positive")
        self.length = length
        self._init_range_check(field, length, chunk_length)
        self.OUTPUT_LEN = length

    def encode(self, measurement: int) -> Vec:
        if isinstance(measurement, bool) or not isinstance(measurement, numbers.Integral):
            raise MeasurementError(f"bucket {measurement!r} is not an integer")
        if not 0 <= measurement < self.length:
            raise MeasurementError(f"bucket {measurement} is outside [0, {self.length})")
        encoded = [0] * self.length
        encoded[int(measurement)] = 1
        return encoded

    def eval(self, meas: Sequence[int], joint_rand: Sequence[int], num_shares: int) -> Vec:
        range_check = self.range_check(meas, joint_rand, num_shares)
        p = self.field.MODULUS
        sum_check = (sum(meas) - self.field.inv(num_shares)) % p
        return [range_check, sum_check]

    def affine_check(self) -> tuple[list[int], int] | None:
        return [1] * self.length, -1

    def truncate(self, meas: Sequence[int]) -> Vec:
        return list(meas)

    def decode(self, output: Sequence[int], num_measurements: int) -> list[int]:
        return list(output)


class MultihotCountVec(ChunkedRangeCheck):
    """``length`` bits with at most ``max_weight`` ones (Section 7.4.5).

    The encoding appends the claimed weight in the range-checked bit encoding of Sum; the circuit checks
    every entry is a bit and that the count bits sum to the claimed weight.
    """

    EVAL_OUTPUT_LEN = 2

    def __init__(self, length: int, max_weight: int, chunk_length: int, field: type[Field] = Field128) -> None:
        if length < 1:
            raise ValueError("length must be positive")
        if not 0 < max_weight <= length:
            raise ValueError("max_weight must be in [1, length]")
        if field.MODULUS <= length:
            raise ValueError("length is too large for the current field size")
        self.length = length
        self.max_weight = max_weight
        self.bits_for_weight = max_weight.bit_length()
        self._init_range_check(field, length + self.bits_for_weight, chunk_length)
        self.OUTPUT_LEN = length

    def encode(self, measurement: Sequence[bool]) -> Vec:
        if len(measurement) != self.length:
            raise MeasurementError(f"measurement has {len(measurement)} entries, not {self.length}")
        count_vec = [_require_bit(x) for x in measurement]
        weight = sum(count_vec)
        if weight > self.max_weight:
            raise MeasurementError(f"weight {weight} exceeds max_weight {self.max_weight}")
        return count_vec + encode_range_checked_int(self.field, weight, self.max_weight)

    def eval(self, meas: Sequence[int], joint_rand: Sequence[int], num_shares: int) -> Vec:
        range_check = self.range_check(meas, joint_rand, num_shares)
        p = self.field.MODULUS
        weight = sum(meas[: self.length])
        weight_reported = decode_range_checked_int(self.field, meas[self.length :], self.max_weight)
        return [range_check, (weight - weight_reported) % p]

    def affine_check(self) -> tuple[list[int], int] | None:
        return [1] * self.length + [-w for w in range_checked_weights(self.max_weight)], 0

    def truncate(self, meas: Sequence[int]) -> Vec:
        return list(meas[: self.length])

    def decode(self, output: Sequence[int], num_measurements: int) -> list[int]:
        return list(output)
