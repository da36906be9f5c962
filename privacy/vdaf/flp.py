"""The fully linear proof of draft-irtf-cfrg-vdaf-20, Section 7.3 (from BBCGGI19, Section 4.2), and its gadgets.

A validity circuit (``Valid``, Section 7.3.2) is affine except for calls to gadgets (Appendix A: ``Mul``,
``PolyEval``, ``ParallelSum``). The prover records every gadget call's input wires, interpolates one
wire polynomial per input (its first value a random "wire seed"), and sends the wire seeds and the
gadget polynomial (the gadget applied to the wire polynomials). Each verifier runs the circuit on its
share, reading gadget outputs off its share of the gadget polynomial, and evaluates its shares of the
wire and gadget polynomials at a random point t; ``decide`` checks the circuit output is zero and that
the gadget applied to the wire evaluations equals the gadget polynomial's evaluation.
"""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

from privacy.vdaf.errors import DecodeError, VerifyError
from privacy.vdaf.field import (
    Field,
    Vec,
    assert_power_of_2,
    extend_values_to_power_of_2,
    next_power_of_2,
    poly_eval,
    poly_eval_batched,
    poly_mul,
)


def wire_poly_len(gadget_calls: int) -> int:
    """Values per wire polynomial: the seed plus one per call, rounded up to a power of two."""
    return next_power_of_2(1 + gadget_calls)


def gadget_poly_len(gadget_degree: int, wire_polynomial_len: int) -> int:
    """Values of the gadget polynomial sent in the proof: its degree plus one."""
    return gadget_degree * (wire_polynomial_len - 1) + 1


class Gadget(ABC):
    """A non-affine sub-circuit (Section 7.3.2)."""

    ARITY: int
    DEGREE: int

    @abstractmethod
    def eval(self, field: type[Field], inp: Sequence[int]) -> int: ...

    @abstractmethod
    def eval_poly(self, field: type[Field], inp_poly: Sequence[Sequence[int]]) -> Vec:
        """The gadget over polynomials in the Lagrange basis (all of one power-of-two length)."""


class Mul(Gadget):
    """x * y (Appendix A.1)."""

    ARITY = 2
    DEGREE = 2

    def eval(self, field: type[Field], inp: Sequence[int]) -> int:
        return inp[0] * inp[1] % field.MODULUS

    def eval_poly(self, field: type[Field], inp_poly: Sequence[Sequence[int]]) -> Vec:
        return poly_mul(field, inp_poly[0], inp_poly[1])


class PolyEval(Gadget):
    """p(x) for a fixed polynomial p given by its integer coefficients, lowest degree first (Appendix A.2)."""

    ARITY = 1

    def __init__(self, coeffs: Sequence[int], num_calls: int) -> None:
        coeffs = list(coeffs)
        while coeffs and coeffs[-1] == 0:
            coeffs.pop()
        if not coeffs:
            raise ValueError("invalid polynomial: zero length")
        self.coeffs = coeffs
        self.DEGREE = len(coeffs) - 1
        self.n = next_power_of_2(gadget_poly_len(self.DEGREE, wire_poly_len(num_calls)))

    def _field_coeffs(self, field: type[Field]) -> Vec:
        return [c % field.MODULUS for c in self.coeffs]

    def eval(self, field: type[Field], inp: Sequence[int]) -> int:
        return poly_eval(field, self._field_coeffs(field), inp[0])

    def eval_poly(self, field: type[Field], inp_poly: Sequence[Sequence[int]]) -> Vec:
        length = len(inp_poly[0])
        assert_power_of_2(length)
        # Lagrange -> monomial, then n evaluations of the input polynomial, then p at each.
        values = field.ntt(field.inv_ntt(inp_poly[0], length), self.n)
        coeffs = self._field_coeffs(field)
        return [poly_eval(field, coeffs, x) for x in values]


class ParallelSum(Gadget):
    """The sum of ``count`` calls of a sub-circuit on consecutive slices of the input (Appendix A.3)."""

    def __init__(self, subcircuit: Gadget, count: int) -> None:
        if count < 1:
            raise ValueError("ParallelSum needs a positive count")
        self.subcircuit = subcircuit
        self.count = count
        self.ARITY = subcircuit.ARITY * count
        self.DEGREE = subcircuit.DEGREE

    def eval(self, field: type[Field], inp: Sequence[int]) -> int:
        arity = self.subcircuit.ARITY
        total = 0
        for i in range(self.count):
            total += self.subcircuit.eval(field, inp[i * arity : (i + 1) * arity])
        return total % field.MODULUS

    def eval_poly(self, field: type[Field], inp_poly: Sequence[Sequence[int]]) -> Vec:
        p, arity = field.MODULUS, self.subcircuit.ARITY
        length = next_power_of_2(gadget_poly_len(self.DEGREE, len(inp_poly[0])))
        out_sum = [0] * length
        for i in range(self.count):
            out = self.subcircuit.eval_poly(field, inp_poly[i * arity : (i + 1) * arity])
            out_sum = [(a + b) % p for a, b in zip(out_sum, out[:length], strict=True)]
        return out_sum


class ProveGadget(Gadget):
    """Records each call's input wires after the wire seeds, and evaluates the inner gadget (Appendix A.4)."""

    def __init__(self, field: type[Field], wire_seeds: Sequence[int], inner: Gadget, calls: int) -> None:
        p = wire_poly_len(calls)
        self.inner = inner
        self.ARITY = inner.ARITY
        self.DEGREE = inner.DEGREE
        self.wires = [[seed] + [0] * (p - 1) for seed in wire_seeds]
        self.k = 0

    def eval(self, field: type[Field], inp: Sequence[int]) -> int:
        self.k += 1
        for j, value in enumerate(inp):
            self.wires[j][self.k] = value
        return self.inner.eval(field, inp)

    def eval_poly(self, field: type[Field], inp_poly: Sequence[Sequence[int]]) -> Vec:
        return self.inner.eval_poly(field, inp_poly)


class QueryGadget(Gadget):
    """Records each call's input wires and answers with the proof's gadget polynomial instead (Appendix A.4)."""

    def __init__(
        self, field: type[Field], wire_seeds: Sequence[int], gadget_poly: Sequence[int], inner: Gadget, calls: int
    ) -> None:
        p = wire_poly_len(calls)
        self.ARITY = inner.ARITY
        self.DEGREE = inner.DEGREE
        self.wires = [[seed] + [0] * (p - 1) for seed in wire_seeds]
        self.k = 0
        # All next_power_of_2(len) values of the gadget polynomial: the degree bound fixes the rest.
        # Its length is next_power_of_2(gadget_poly_len(DEGREE, p)), the spec's `size`, so the spec's
        # doubling loop never runs.
        size = next_power_of_2(len(gadget_poly))
        self.poly = extend_values_to_power_of_2(field, gadget_poly, size)
        self.step = size // p

    def eval(self, field: type[Field], inp: Sequence[int]) -> int:
        self.k += 1
        for j, value in enumerate(inp):
            self.wires[j][self.k] = value
        return self.poly[self.k * self.step]

    def eval_poly(self, field: type[Field], inp_poly: Sequence[Sequence[int]]) -> Vec:
        raise NotImplementedError("a query gadget only answers calls")


class Valid(ABC):
    """A validity circuit (Section 7.3.2): parameters, encoding, and the circuit itself."""

    GADGETS: list[Gadget]
    GADGET_CALLS: list[int]
    MEAS_LEN: int
    JOINT_RAND_LEN: int
    EVAL_OUTPUT_LEN: int
    OUTPUT_LEN: int
    field: type[Field]

    @abstractmethod
    def encode(self, measurement: Any) -> Vec: ...

    @abstractmethod
    def eval(self, meas: Sequence[int], joint_rand: Sequence[int], num_shares: int) -> Vec:
        """The circuit's outputs: all zero if and only if (with high probability) ``meas`` is valid.

        On a secret share of ``meas`` it returns a share of the outputs: constants are added as
        constant / num_shares by each share.
        """

    @abstractmethod
    def truncate(self, meas: Sequence[int]) -> Vec: ...

    @abstractmethod
    def decode(self, output: Sequence[int], num_measurements: int) -> Any: ...

    def prove_rand_len(self) -> int:
        return sum(g.ARITY for g in self.GADGETS)

    def query_rand_len(self) -> int:
        length = len(self.GADGETS)
        if self.EVAL_OUTPUT_LEN > 1:
            length += self.EVAL_OUTPUT_LEN
        return length

    def proof_len(self) -> int:
        return sum(
            g.ARITY + gadget_poly_len(g.DEGREE, wire_poly_len(calls))
            for g, calls in zip(self.GADGETS, self.GADGET_CALLS, strict=True)
        )

    def verifier_len(self) -> int:
        return 1 + sum(g.ARITY + 1 for g in self.GADGETS)

    def with_gadgets(self, gadgets: list[Gadget]) -> Valid:
        """A copy of the circuit calling ``gadgets`` (the spec's wrap(): the circuit code stays the same)."""
        wrapped = copy.copy(self)
        wrapped.GADGETS = gadgets
        return wrapped


class Flp:
    """The FLP of Section 7.3 for one validity circuit: prove, query, decide."""

    def __init__(self, valid: Valid) -> None:
        self.valid = valid
        self.field = valid.field
        self.PROVE_RAND_LEN = valid.prove_rand_len()
        self.QUERY_RAND_LEN = valid.query_rand_len()
        self.JOINT_RAND_LEN = valid.JOINT_RAND_LEN
        self.MEAS_LEN = valid.MEAS_LEN
        self.OUTPUT_LEN = valid.OUTPUT_LEN
        self.PROOF_LEN = valid.proof_len()
        self.VERIFIER_LEN = valid.verifier_len()

    def encode(self, measurement: Any) -> Vec:
        return self.valid.encode(measurement)

    def truncate(self, meas: Sequence[int]) -> Vec:
        return self.valid.truncate(meas)

    def decode(self, output: Sequence[int], num_measurements: int) -> Any:
        return self.valid.decode(output, num_measurements)

    def prove(self, meas: Sequence[int], prove_rand: Sequence[int], joint_rand: Sequence[int]) -> Vec:
        """Wire seeds and gadget polynomial of each gadget (Section 7.3.3)."""
        gadgets: list[ProveGadget] = []
        rand = list(prove_rand)
        for g, calls in zip(self.valid.GADGETS, self.valid.GADGET_CALLS, strict=True):
            seeds, rand = rand[: g.ARITY], rand[g.ARITY :]
            gadgets.append(ProveGadget(self.field, seeds, g, calls))
        self.valid.with_gadgets(list(gadgets)).eval(meas, joint_rand, 1)

        proof: Vec = []
        for g, calls in zip(gadgets, self.valid.GADGET_CALLS, strict=True):
            p = wire_poly_len(calls)
            proof += [wire[0] for wire in g.wires]
            gadget_poly = g.eval_poly(self.field, g.wires)
            proof += gadget_poly[: gadget_poly_len(g.DEGREE, p)]
        return proof

    def query(
        self,
        meas: Sequence[int],
        proof: Sequence[int],
        query_rand: Sequence[int],
        joint_rand: Sequence[int],
        num_shares: int,
    ) -> Vec:
        """A share of the verifier message from a share of the measurement and proof (Section 7.3.4)."""
        if len(proof) != self.PROOF_LEN:
            raise DecodeError("proof has the wrong length")
        p = self.field.MODULUS
        gadgets: list[QueryGadget] = []
        rest = list(proof)
        for g, calls in zip(self.valid.GADGETS, self.valid.GADGET_CALLS, strict=True):
            poly_len = gadget_poly_len(g.DEGREE, wire_poly_len(calls))
            seeds, gadget_poly, rest = rest[: g.ARITY], rest[g.ARITY : g.ARITY + poly_len], rest[g.ARITY + poly_len :]
            gadgets.append(QueryGadget(self.field, seeds, gadget_poly, g, calls))
        out = self.valid.with_gadgets(list(gadgets)).eval(meas, joint_rand, num_shares)

        rand = list(query_rand)
        if self.valid.EVAL_OUTPUT_LEN > 1:
            coeffs, rand = rand[: self.valid.EVAL_OUTPUT_LEN], rand[self.valid.EVAL_OUTPUT_LEN :]
            v = sum(r * o for r, o in zip(coeffs, out, strict=True)) % p
        else:
            [v] = out

        verifier = [v]
        for g, t in zip(gadgets, rand, strict=True):
            n = len(g.wires[0])
            # A t among the wire polynomials' points would reveal wire values: refuse it.
            if pow(t, n, p) == 1:
                raise VerifyError("test point is a root of unity")
            verifier += poly_eval_batched(self.field, g.wires, t)
            verifier += poly_eval_batched(self.field, [g.poly], t)
        return verifier

    def decide(self, verifier: Sequence[int]) -> bool:
        """Accept iff the circuit output is zero and every gadget test passes (Section 7.3.5)."""
        if len(verifier) != self.VERIFIER_LEN:
            raise DecodeError("verifier has the wrong length")
        if verifier[0] != 0:
            return False
        rest = list(verifier[1:])
        for g in self.valid.GADGETS:
            wire_checks, gadget_check, rest = rest[: g.ARITY], rest[g.ARITY], rest[g.ARITY + 1 :]
            if g.eval(self.field, wire_checks) != gadget_check:
                return False
        return True
