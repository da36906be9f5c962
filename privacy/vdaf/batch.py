"""Prio3 verification of many reports at once (draft-irtf-cfrg-vdaf-20, Sections 7.2.2-7.2.4 and 7.3.4).

The functions here take and return *encoded* messages, as an aggregator stores and sends them, and
give the same bytes and verdicts as ``Prio3.verify_init`` / ``verifier_shares_to_message`` /
``verify_next`` / ``aggregate`` run report by report (the tests hold them to it). A report refused at
some step is ``None`` from then on; the others go on.

For the circuits with the chunked bit check (SumVec, Histogram, MultihotCountVec over Field128, one
proof) the FLP query is rewritten as dot products and computed with ``privacy.vdaf.limbs`` over a
whole chunk of reports:

* the gadget polynomial's values at the gadget calls are read straight from the proof share;
* each wire polynomial's value at t is sum_k wire[k] l_k(t) over the Lagrange basis l_k of the p-th
  roots of unity. With wire 2j holding r_i**(j+1) x[i*chunk + j] and wire 2j+1 holding
  x[i*chunk + j] - 1/SHARES, both are dot products of the measurement share with coefficients
  l_{i+1}(t) r_i**(j+1) and l_{i+1}(t);
* the basis itself is l_k(t) = W**k / n * prod_{m != k} (t - W**m), and the product is
  sum_j t**(n-1-j) W**(jk): an NTT of the powers of t, with no inversion;
* the gadget polynomial's value at t uses the basis of the 2p-th roots, its one missing value
  (degree <= 2p - 2) folded into the coefficients.

Any other Prio3 goes through the per-report functions. So does a helper whose expanded share would
need the XOF's rejection sampling (a draw >= p: probability about 2**-49 per report).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from privacy.vdaf import limbs
from privacy.vdaf.circuits import ChunkedRangeCheck, SumVec, range_checked_weights
from privacy.vdaf.errors import VdafError
from privacy.vdaf.field import Field128, Vec
from privacy.vdaf.flp import wire_poly_len
from privacy.vdaf.prio3 import (
    USAGE_JOINT_RAND_PART,
    USAGE_JOINT_RAND_SEED,
    USAGE_JOINT_RANDOMNESS,
    USAGE_MEAS_SHARE,
    USAGE_PROOF_SHARE,
    USAGE_QUERY_RANDOMNESS,
    Prio3,
)

# Reports whose numpy arrays are built at once. With 1,024 buckets a chunk of 128 takes about 4 MB per
# limb array and 9 MB per product, which stays in cache; 64 or 256 measured no faster (bench/prio3.py).
CHUNK = 128


@dataclass(frozen=True)
class QueryCircuit:
    """What the vectorised FLP query needs of a circuit with the chunked bit check (Field128, one proof)."""

    chunk: int  # the circuit's chunk_length: a gadget call's pairs of inputs
    calls: int  # gadget calls
    shares: int  # the VDAF's number of aggregators
    outputs: int  # the circuit's EVAL_OUTPUT_LEN: 1, or 2 with the affine check
    affine: tuple[tuple[int, ...], int] | None  # its affine check (weights, constant), as affine_check gives

    @classmethod
    def of(cls, vdaf: Prio3) -> QueryCircuit:
        valid = vdaf.flp.valid
        assert isinstance(valid, ChunkedRangeCheck)
        affine = valid.affine_check()
        return cls(
            chunk=valid.chunk_length,
            calls=valid.GADGET_CALLS[0],
            shares=vdaf.SHARES,
            outputs=valid.EVAL_OUTPUT_LEN,
            affine=None if affine is None else (tuple(affine[0]), affine[1]),
        )

    @property
    def ones(self) -> int:
        """How many of the affine check's weights open with a run of ones (the counts): a plain sum
        there, a dot product after (0 without an affine check)."""
        weights = self.affine[0] if self.affine is not None else ()
        return next((k for k, w in enumerate(weights) if w != 1), len(weights))

    @property
    def points(self) -> int:
        """p: the values of each wire polynomial (a power of two); the gadget polynomial has 2p - 1."""
        return wire_poly_len(self.calls)


# The FLP query of a chunk of reports: (circuit, x (4, n, MEAS_LEN), proof (4, n, PROOF_LEN), joint
# randomness (4, n, JOINT_RAND_LEN), query randomness (4, n, QUERY_RAND_LEN)) -> (verifier shares
# (4, n, VERIFIER_LEN), which reports the FLP refuses). ``flp_query`` below is numpy's; a caller may
# pass a faster function with the same contract (the aggregators pass a compiled one,
# aggregation.flp_query_jit, tested against this one).
FlpQuery = Callable[
    [QueryCircuit, limbs.Limbs, limbs.Limbs, limbs.Limbs, limbs.Limbs], tuple[limbs.Limbs, npt.NDArray[np.bool_]]
]


def flp_query(
    circuit: QueryCircuit, x: limbs.Limbs, proof: limbs.Limbs, r: limbs.Limbs, q: limbs.Limbs
) -> tuple[limbs.Limbs, npt.NDArray[np.bool_]]:
    """The FLP query (FlpQuery) in numpy: verifier shares of n reports, and which the FLP refuses
    (t a root of unity)."""
    c, calls, n, p = circuit.chunk, circuit.calls, x.shape[1], circuit.points
    shares_inv = Field128.inv(circuit.shares)

    # Point-major layout: the polynomial points (or slots) first, then the reports, so that the
    # blocks the vectorised steps work on are contiguous.
    t = q[..., -1]
    one = limbs.constant(1, 1)
    powers = limbs.geometric(np.broadcast_to(one, t.shape), t, 2 * p)  # t**k at [:, k]
    # The FLP refuses a t among the wire polynomials' points: it would reveal wire values.
    refused = limbs.equal(powers[:, p], one)
    basis = _lagrange(powers, p)  # (4, p, n)
    basis2 = _lagrange(powers, 2 * p)  # (4, 2p, n)

    # l_{i+1}(t): the value of call i sits at position i + 1 of its wire polynomial.
    inner = np.ascontiguousarray(basis[:, 1 : calls + 1].transpose(0, 2, 1))  # (4, n, calls)
    even, odd = _wire_sums(x, inner, r, c, calls)
    seed_basis = basis[:, :1]
    wire_even = limbs.reduce(even + limbs.mul_wide(proof[..., 0 : 2 * c : 2].transpose(0, 2, 1), seed_basis))
    wire_odd = limbs.reduce(odd + limbs.mul_wide(proof[..., 1 : 2 * c : 2].transpose(0, 2, 1), seed_basis))
    # Every call's x - 1/SHARES, padding included, contributes -l_{i+1}(t) / SHARES.
    constant_term = limbs.mul(limbs.limb_sum(inner, -1), limbs.constant(-shares_inv, 1))
    wire_odd = limbs.add(wire_odd, constant_term[:, None])

    gadget_poly = proof[..., 2 * c :]  # 2p - 1 values at the 2p-th roots of unity
    # The missing value v_{2p-1} = -W sum_m v_m W**m (degree <= 2p - 2), folded into the basis.
    roots2 = Field128.nth_root_powers(2 * p)
    fold = limbs.constant([roots2[(m + 1) % (2 * p)] for m in range(2 * p - 1)], 2, axis=0)
    gadget_basis = limbs.sub(basis2[:, : 2 * p - 1], limbs.mul(basis2[:, 2 * p - 1 :], fold))
    gadget_check = limbs.dot(gadget_poly.transpose(0, 2, 1), gadget_basis, axis=-2)
    # The gadget's output at call k is its polynomial at W_p**k = W_2p**(2k).
    range_check = limbs.limb_sum(gadget_poly[..., 2 : 2 * calls + 1 : 2], -1)

    outputs = [range_check]
    if circuit.affine is not None:
        weights, constant = circuit.affine
        ones = circuit.ones
        second = limbs.limb_sum(x[..., :ones], -1)
        if ones < len(weights):
            second = limbs.add(second, limbs.dot(x[..., ones:], limbs.constant(weights[ones:], 2)))
        outputs.append(limbs.add(second, limbs.constant(constant * shares_inv, 1)))
    if circuit.outputs > 1:
        v = limbs.reduce(sum(limbs.mul_wide(q[..., k], out) for k, out in enumerate(outputs)))
    else:
        v = range_check
    wires = np.stack([wire_even, wire_odd], axis=-1).transpose(0, 2, 1, 3).reshape(limbs.LIMBS, n, 2 * c)
    verifiers = np.concatenate([v[..., None], wires, gadget_check[..., None]], axis=-1)
    return verifiers, refused


def _wire_sums(
    x: limbs.Limbs, inner: limbs.Limbs, r: limbs.Limbs, chunk: int, calls: int
) -> tuple[limbs.Columns, limbs.Columns]:
    """The query's heavy part: for each report and slot j, with x the measurement share (zero past its
    end), l_i a call's Lagrange basis value and r_i its joint randomness,
        even[j] = sum_i l_i r_i**(j+1) x[i*chunk + j]    and    odd[j] = sum_i l_i x[i*chunk + j],
    as unreduced columns (8, chunk, n): the coefficients l_i r_i**(j+1) built by doubling, then two
    dot products over the calls."""
    n = x.shape[1]
    # Measurement share as (slot j, report, call i), zero past its end as the circuit pads it.
    grid = np.zeros((limbs.LIMBS, n, calls * chunk), dtype=np.uint64)
    grid[..., : x.shape[-1]] = x
    grid = np.ascontiguousarray(grid.reshape(limbs.LIMBS, n, calls, chunk).transpose(0, 3, 1, 2))
    coeffs = limbs.geometric(limbs.mul(inner, r), r, chunk)  # l_i r_i**(j+1) at [:, j, :, i]
    return limbs.mul_wide(coeffs, grid).sum(axis=-1), limbs.mul_wide(inner[:, None], grid).sum(axis=-1)


def _lagrange(powers: limbs.Limbs, size: int) -> limbs.Limbs:
    """l_k(t) at [:, k] for the ``size``-th roots of unity, from the powers of t (module docstring)."""
    roots = Field128.nth_root_powers(size)
    products = limbs.ntt(powers[:, size - 1 :: -1], roots)  # u_j = t**(size-1-j)
    size_inv = Field128.inv(size)
    return limbs.mul(products, limbs.constant([w * size_inv for w in roots], 2, axis=0))


@dataclass(frozen=True)
class BatchVerifyState:
    """One aggregator's state after verify_init_batch, one entry per report."""

    agg_id: int
    # Encoded output share (Field.encode_vec of the truncated measurement share); None: refused.
    out_shares: list[bytes | None]
    # The joint randomness seed this aggregator computed (None for circuits without joint randomness).
    joint_rand_seeds: list[bytes | None]


def supports_fast_path(vdaf: Prio3) -> bool:
    """Whether verify_init_batch vectorises this Prio3 (otherwise it loops over the per-report path)."""
    return isinstance(vdaf.flp.valid, ChunkedRangeCheck) and vdaf.field is Field128 and vdaf.PROOFS == 1


def verify_init_batch(
    vdaf: Prio3,
    verify_key: bytes,
    ctx: bytes,
    agg_id: int,
    nonces: Sequence[bytes],
    public_shares: Sequence[bytes],
    input_shares: Sequence[bytes],
    *,
    query: FlpQuery = flp_query,
) -> tuple[BatchVerifyState, list[bytes | None]]:
    """verify_init for every report of this aggregator: its state and the encoded verifier shares.

    A report whose messages do not parse, or that verify_init refuses, gets None. ``query``: how the
    vectorised path computes the FLP query (FlpQuery).
    """
    if not len(nonces) == len(public_shares) == len(input_shares):
        raise ValueError("nonces, public shares and input shares must be given per report")
    if len(verify_key) != vdaf.VERIFY_KEY_SIZE or not 0 <= agg_id < vdaf.SHARES:
        raise VdafError("incorrect verify_key size or agg_id out of range")
    count = len(nonces)
    out_shares: list[bytes | None] = [None] * count
    seeds: list[bytes | None] = [None] * count
    verifier_shares: list[bytes | None] = [None] * count
    fast = supports_fast_path(vdaf)
    for start in range(0, count, CHUNK):
        indices = range(start, min(start + CHUNK, count))
        if fast:
            results = _FastVerifier(vdaf, verify_key, ctx, agg_id, query).run(
                [nonces[i] for i in indices], [public_shares[i] for i in indices], [input_shares[i] for i in indices]
            )
        else:
            results = [
                _verify_init_one(vdaf, verify_key, ctx, agg_id, nonces[i], public_shares[i], input_shares[i])
                for i in indices
            ]
        for i, result in zip(indices, results, strict=True):
            if result is not None:
                out_shares[i], seeds[i], verifier_shares[i] = result
    return BatchVerifyState(agg_id, out_shares, seeds), verifier_shares


def verifier_shares_to_message_batch(
    vdaf: Prio3, ctx: bytes, verifier_shares: Sequence[Sequence[bytes | None]]
) -> list[bytes | None]:
    """The encoded verifier message of each report, or None if the report is rejected.

    ``verifier_shares[agg_id][report]`` is aggregator agg_id's encoded verifier share of the report.
    """
    if len(verifier_shares) != vdaf.SHARES or len({len(shares) for shares in verifier_shares}) != 1:
        raise ValueError("give every aggregator's verifier shares, one per report")
    count = len(verifier_shares[0])
    messages: list[bytes | None] = [None] * count
    fast = supports_fast_path(vdaf)
    for start in range(0, count, CHUNK):
        indices = range(start, min(start + CHUNK, count))
        per_report = [[shares[i] for shares in verifier_shares] for i in indices]
        if fast:
            results = _decide_fast(vdaf, ctx, per_report)
        else:
            results = [_message_one(vdaf, ctx, shares) for shares in per_report]
        for i, result in zip(indices, results, strict=True):
            messages[i] = result
    return messages


def verify_next_batch(vdaf: Prio3, ctx: bytes, state: BatchVerifyState, messages: Sequence[bytes | None]) -> list[bool]:
    """Which reports verify_next accepts: verified, and the message's seed equals this aggregator's."""
    if len(messages) != len(state.out_shares):
        raise ValueError("one verifier message per report")
    accepted = []
    for out_share, seed, message in zip(state.out_shares, state.joint_rand_seeds, messages, strict=True):
        ok = out_share is not None and message is not None
        if ok:
            try:
                ok = vdaf.decode_verifier_message(message) == seed  # type: ignore[arg-type]
            except VdafError:
                ok = False
        accepted.append(ok)
    return accepted


def aggregate_batch(vdaf: Prio3, state: BatchVerifyState, accepted: Sequence[bool]) -> Vec:
    """This aggregator's aggregate share: the sum of the accepted reports' output shares."""
    chosen = [share for share, ok in zip(state.out_shares, accepted, strict=True) if ok and share is not None]
    length, words = vdaf.flp.OUTPUT_LEN, vdaf.field.ENCODED_SIZE // 4
    if not chosen:
        return vdaf.agg_init(None)
    totals = np.zeros((length, words), dtype=np.uint64)
    # Each 32-bit word sums exactly in uint64 for up to 2**32 reports per block.
    for start in range(0, len(chosen), 2**20):
        block = b"".join(chosen[start : start + 2**20])
        totals += np.frombuffer(block, dtype="<u4").reshape(-1, length, words).sum(axis=0, dtype=np.uint64)
    p = vdaf.field.MODULUS
    return [sum(int(w) << (32 * k) for k, w in enumerate(row)) % p for row in totals.tolist()]


# -- The per-report path, for VDAFs without a vectorised query and for rare reports -------------------


def _verify_init_one(
    vdaf: Prio3, verify_key: bytes, ctx: bytes, agg_id: int, nonce: bytes, public_share: bytes, input_share: bytes
) -> _Result | None:
    try:
        (out_share, seed), verifier_share = vdaf.verify_init(
            verify_key,
            ctx,
            agg_id,
            None,
            nonce,
            vdaf.decode_public_share(public_share),
            vdaf.decode_input_share(agg_id, input_share),
        )
    except VdafError:
        return None
    return vdaf.encode_agg_share(out_share), seed, vdaf.encode_verifier_share(verifier_share)


def _message_one(vdaf: Prio3, ctx: bytes, shares: Sequence[bytes | None]) -> bytes | None:
    if any(share is None for share in shares):
        return None
    try:
        decoded = [vdaf.decode_verifier_share(share) for share in shares]  # type: ignore[arg-type]
        return vdaf.encode_verifier_message(vdaf.verifier_shares_to_message(ctx, None, decoded))
    except VdafError:
        return None


# -- The vectorised path ---------------------------------------------------------------------------

# (encoded output share, corrected joint randomness seed, encoded verifier share) of one report.
_Result = tuple[bytes, bytes | None, bytes]


@dataclass(frozen=True)
class _Row:
    """A report of the chunk that parsed: its position, and this aggregator's shares as canonical bytes."""

    index: int
    meas: bytes
    proof: bytes
    blind: bytes


@dataclass(frozen=True)
class _Randomness:
    part: bytes  # this aggregator's joint randomness part
    seed: bytes  # the joint randomness seed with that part (the client's, if honest)
    joint_rand: bytes  # encoded Field128 vectors
    query_rand: bytes


def _rows_canonical(data: bytes, rows: int, length: int) -> npt.NDArray[np.bool_]:
    """For each of ``rows`` concatenated Field128 vectors, whether every element is below p."""
    return limbs.is_canonical(limbs.from_bytes(data, (rows, length))).all(axis=-1)


class _FastVerifier:
    """verify_init for one chunk of reports of one aggregator, vectorised (see the module docstring)."""

    def __init__(self, vdaf: Prio3, verify_key: bytes, ctx: bytes, agg_id: int, query: FlpQuery) -> None:
        self.vdaf = vdaf
        self.query = query
        self.verify_key = verify_key
        self.ctx = ctx
        self.agg_id = agg_id
        valid = vdaf.flp.valid
        assert isinstance(valid, ChunkedRangeCheck)
        self.valid = valid
        self.circuit = QueryCircuit.of(vdaf)
        self.size = Field128.ENCODED_SIZE
        self.dst = {usage: vdaf.domain_separation_tag(usage, ctx) for usage in range(1, 8)}

    def run(
        self, nonces: Sequence[bytes], public_shares: Sequence[bytes], input_shares: Sequence[bytes]
    ) -> list[_Result | None]:
        """The per-report results (as _verify_init_one's) of one chunk."""
        results: list[_Result | None] = [None] * len(nonces)
        rows = self._shares(nonces, public_shares, input_shares, results)
        if not rows:
            return results
        flp, n = self.vdaf.flp, len(rows)
        row_nonces = [nonces[row.index] for row in rows]
        randomness = self._fix_rejections(
            row_nonces, [self._randomness(row_nonces[k], public_shares[row.index], row) for k, row in enumerate(rows)]
        )
        x = limbs.from_bytes(b"".join(row.meas for row in rows), (n, flp.MEAS_LEN))
        proof = limbs.from_bytes(b"".join(row.proof for row in rows), (n, flp.PROOF_LEN))
        r = limbs.from_bytes(b"".join(rand.joint_rand for rand in randomness), (n, flp.JOINT_RAND_LEN))
        q = limbs.from_bytes(b"".join(rand.query_rand for rand in randomness), (n, flp.QUERY_RAND_LEN))
        verifiers, refused = self.query(self.circuit, x, proof, r, q)
        encoded = limbs.to_bytes(verifiers)
        out_shares = self._truncate(x, [row.meas for row in rows])
        step = flp.VERIFIER_LEN * self.size
        for k, (row, rand) in enumerate(zip(rows, randomness, strict=True)):
            if not refused[k]:
                results[row.index] = (out_shares[k], rand.seed, encoded[k * step : (k + 1) * step] + rand.part)
        return results

    def _shares(
        self,
        nonces: Sequence[bytes],
        public_shares: Sequence[bytes],
        input_shares: Sequence[bytes],
        results: list[_Result | None],
    ) -> list[_Row]:
        """The reports that parse, with this aggregator's measurement and proof shares as canonical bytes.

        Reports that do not parse stay None in ``results``, as decode refuses them. A helper share whose
        expansion holds a draw >= p goes through the per-report path into ``results``.
        """
        vdaf, flp, seed_size = self.vdaf, self.vdaf.flp, self.vdaf.xof.SEED_SIZE
        meas_bytes, proof_bytes = flp.MEAS_LEN * self.size, flp.PROOF_LEN * self.size
        rows: list[_Row] = []
        for i, (nonce, public_share, share) in enumerate(zip(nonces, public_shares, input_shares, strict=True)):
            if len(nonce) != vdaf.NONCE_SIZE or len(public_share) != seed_size * vdaf.SHARES:
                continue
            if self.agg_id == 0:
                if len(share) != meas_bytes + proof_bytes + seed_size:
                    continue
                meas, proof = share[:meas_bytes], share[meas_bytes : meas_bytes + proof_bytes]
            else:
                if len(share) != 2 * seed_size:
                    continue
                seed = share[:seed_size]
                meas = vdaf.xof(seed, self.dst[USAGE_MEAS_SHARE], bytes([self.agg_id])).next(meas_bytes)
                proof = vdaf.xof(seed, self.dst[USAGE_PROOF_SHARE], bytes([vdaf.PROOFS, self.agg_id])).next(proof_bytes)
            rows.append(_Row(i, meas, proof, share[-seed_size:]))
        if not rows:
            return rows
        canonical = _rows_canonical(b"".join(row.meas for row in rows), len(rows), flp.MEAS_LEN)
        canonical &= _rows_canonical(b"".join(row.proof for row in rows), len(rows), flp.PROOF_LEN)
        for row, ok in zip(rows, canonical, strict=True):
            if not ok and self.agg_id > 0:
                # The helper's XOF would have rejected a draw and read further: recompute exactly.
                i = row.index
                results[i] = _verify_init_one(
                    vdaf, self.verify_key, self.ctx, self.agg_id, nonces[i], public_shares[i], input_shares[i]
                )
            # A leader share holding a value >= p does not decode: that report stays refused (None).
        return [row for row, ok in zip(rows, canonical, strict=True) if ok]

    def _randomness(self, nonce: bytes, public_share: bytes, row: _Row) -> _Randomness:
        """This aggregator's joint randomness part, the corrected seed, and the joint and query randomness."""
        vdaf, flp, seed_size = self.vdaf, self.vdaf.flp, self.vdaf.xof.SEED_SIZE
        part = vdaf.xof.derive_seed(row.blind, self.dst[USAGE_JOINT_RAND_PART], bytes([self.agg_id]) + nonce + row.meas)
        parts = [public_share[j : j + seed_size] for j in range(0, len(public_share), seed_size)]
        parts[self.agg_id] = part
        seed = vdaf.xof.derive_seed(bytes(seed_size), self.dst[USAGE_JOINT_RAND_SEED], b"".join(parts))
        proofs = bytes([vdaf.PROOFS])
        joint_rand = vdaf.xof(seed, self.dst[USAGE_JOINT_RANDOMNESS], proofs).next(flp.JOINT_RAND_LEN * self.size)
        query_rand = vdaf.xof(self.verify_key, self.dst[USAGE_QUERY_RANDOMNESS], proofs + nonce).next(
            flp.QUERY_RAND_LEN * self.size
        )
        return _Randomness(part, seed, joint_rand, query_rand)

    def _fix_rejections(self, nonces: list[bytes], randomness: list[_Randomness]) -> list[_Randomness]:
        """Expand exactly where the XOF drew a value >= p (about 2**-59 per element): it then reads further."""
        flp, n = self.vdaf.flp, len(randomness)
        joint_ok = _rows_canonical(b"".join(rand.joint_rand for rand in randomness), n, flp.JOINT_RAND_LEN)
        query_ok = _rows_canonical(b"".join(rand.query_rand for rand in randomness), n, flp.QUERY_RAND_LEN)
        fixed = list(randomness)
        for k in np.flatnonzero(~(joint_ok & query_ok)):
            joint_rand = Field128.encode_vec(self.vdaf.joint_rands(self.ctx, fixed[k].seed))
            query_rand = Field128.encode_vec(self.vdaf.query_rands(self.verify_key, self.ctx, nonces[k]))
            fixed[k] = dataclasses.replace(fixed[k], joint_rand=joint_rand, query_rand=query_rand)
        return fixed

    def _truncate(self, x: limbs.Limbs, meas: list[bytes]) -> list[bytes]:
        """Encoded output shares: a prefix of the measurement share, or SumVec's weighted bits."""
        valid, size = self.valid, self.size
        if isinstance(valid, SumVec):
            n = x.shape[1]
            bits = x.reshape(limbs.LIMBS, n, valid.length, valid.bits)
            values = limbs.dot(bits, limbs.constant(range_checked_weights(valid.max_measurement), 3))
            encoded = limbs.to_bytes(values)
            step = valid.OUTPUT_LEN * size
            return [encoded[k * step : (k + 1) * step] for k in range(n)]
        # Histogram and MultihotCountVec truncate to a prefix, already canonical on the wire.
        return [share[: valid.OUTPUT_LEN * size] for share in meas]


def _decide_fast(vdaf: Prio3, ctx: bytes, per_report: Sequence[Sequence[bytes | None]]) -> list[bytes | None]:
    """verifier_shares_to_message for a chunk: sum the shares, check v == 0 and the ParallelSum(Mul) test."""
    flp, size, seed_size = vdaf.flp, Field128.ENCODED_SIZE, vdaf.xof.SEED_SIZE
    vec_bytes = flp.VERIFIER_LEN * size
    results: list[bytes | None] = [None] * len(per_report)
    rows = [
        k
        for k, shares in enumerate(per_report)
        if all(share is not None and len(share) == vec_bytes + seed_size for share in shares)
    ]
    if not rows:
        return results
    total = None
    canonical = np.ones(len(rows), dtype=bool)
    for agg_id in range(vdaf.SHARES):
        data = b"".join(per_report[k][agg_id][:vec_bytes] for k in rows)  # type: ignore[index]
        share = limbs.from_bytes(data, (len(rows), flp.VERIFIER_LEN))
        canonical &= limbs.is_canonical(share).all(axis=-1)
        total = share if total is None else limbs.add(total, share)
    assert total is not None
    c = (flp.VERIFIER_LEN - 2) // 2
    zero = limbs.constant(0, 1)
    output_ok = limbs.equal(total[..., 0], zero)
    gadget = limbs.dot(total[..., 1 : 2 * c + 1 : 2], total[..., 2 : 2 * c + 2 : 2])
    gadget_ok = limbs.equal(gadget, total[..., 2 * c + 1])
    for k, ok in zip(rows, canonical & output_ok & gadget_ok, strict=True):
        if ok:
            parts = [share[vec_bytes:] for share in per_report[k]]  # type: ignore[index]
            results[k] = vdaf.joint_rand_seed(ctx, parts)  # type: ignore[arg-type]
    return results
