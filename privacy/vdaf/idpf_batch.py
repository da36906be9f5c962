"""The IDPF walk of ``privacy.vdaf.idpf`` for many reports at once, all at the same level and prefixes.

A collection evaluates every report at one aggregation parameter, so the tree's shape (which node
each prefix passes through at each depth) is the same for all of them: only the seeds, control bits
and correction words differ. Here they are arrays with a leading axis of reports, and every step of
a depth (selecting the children, applying the corrections, reading the values) is one numpy
operation for all the reports. The fixed AES keys derive from each report's nonce, so AES stays one
call per report per depth (covering all of its nodes); the last level's TurboSHAKE128, whose input
carries the nonce, hashes every node of every report in one go (``privacy.vdaf.turboshake_arrays``).

Only the child a prefix takes is hashed: block b of a seed's extend stream is hash(seed xor le128(b)),
so the sibling nobody asked for costs nothing. Seeds are pairs of little-endian uint64 halves.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import repeat

import numpy as np
import numpy.typing as npt
from cryptography.hazmat.primitives.ciphers import CipherContext

from privacy.vdaf import field64_arrays
from privacy.vdaf.errors import VdafError
from privacy.vdaf.field import Field, Field64, next_power_of_2
from privacy.vdaf.idpf import Bits, DecodedPublicShare, IdpfBBCGGI21, PublicShare, Values, _Hashing, _WalkPlan
from privacy.vdaf.turboshake_arrays import turboshake128

Halves = npt.NDArray[np.uint64]  # (..., 2): a 16-byte block as two little-endian uint64
# Reports × nodes per chunk: more only grows the temporaries past the cache without saving calls.
ROWS_PER_CHUNK = 1 << 17


def eval_batch(
    idpf: IdpfBBCGGI21,
    agg_id: int,
    public_shares: Sequence[PublicShare],
    keys: Sequence[bytes],
    level: int,
    prefixes: Sequence[Bits],
    ctx: bytes,
    nonces: Sequence[bytes],
) -> Values:
    """``idpf.eval_array`` of each report, stacked: reports × prefixes × VALUE_LEN, the same checks first."""
    if not len(public_shares) == len(keys) == len(nonces):
        raise VdafError("one public share, key and nonce per report")
    if agg_id not in range(idpf.SHARES):
        raise VdafError("aggregator id out of range")
    if level not in range(idpf.BITS):
        raise VdafError("level out of range")
    if any(len(public_share) != idpf.BITS for public_share in public_shares):
        raise VdafError("public share must hold BITS correction words")
    if any(len(key) != idpf.KEY_SIZE for key in keys):
        raise VdafError("incorrect key size")
    if any(len(nonce) != idpf.NONCE_SIZE for nonce in nonces):
        raise VdafError("incorrect nonce size")
    last = idpf._last_plan  # a plan kept for these very (immutable) prefixes has checked their lengths
    checked = last is not None and last[0] is prefixes and last[1][1].shape[1] == level + 1
    if not checked and set(map(len, prefixes)) - {level + 1}:
        raise VdafError("incorrect prefix length")
    vectorised = idpf.current_field(level).MODULUS == Field64.MODULUS
    dtype = np.uint64 if vectorised else object
    if not prefixes or not keys:
        return np.zeros((len(keys), len(prefixes), idpf.VALUE_LEN), dtype=dtype)
    plan = idpf._walk_plan(level, prefixes)
    step = max(1, ROWS_PER_CHUNK // len(prefixes))
    chunks = [
        _walk(idpf, agg_id, public_shares[i : i + step], keys[i : i + step], level, plan, ctx, nonces[i : i + step])
        for i in range(0, len(keys), step)
    ]
    return np.concatenate(chunks) if len(chunks) > 1 else chunks[0]


def _walk(idpf, agg_id, public_shares, keys, level, plan, ctx, nonces) -> Values:  # noqa: ANN001 - see eval_batch
    reports = len(keys)
    hashings = [_Hashing(ctx, nonce) for nonce in nonces]
    if all(isinstance(public_share, DecodedPublicShare) for public_share in public_shares):
        # The aggregators' case: the first levels' seeds and control bits straight from the arrays.
        size = (level + 1) * idpf.KEY_SIZE
        seed_cws = np.frombuffer(b"".join(ps.seeds[:size] for ps in public_shares), dtype="<u8")
        ctrl_cws = np.stack([ps.controls[: level + 1] for ps in public_shares])
    else:
        seed_cws = np.frombuffer(
            b"".join(cw[0] for public_share in public_shares for cw in public_share[: level + 1]), dtype="<u8"
        )
        ctrl_cws = np.array([[cw[1] for cw in ps[: level + 1]] for ps in public_shares], dtype=bool)
    seed_cws = seed_cws.reshape(reports, level + 1, 2)
    seeds = np.frombuffer(b"".join(keys), dtype="<u8").reshape(reports, 1, 2)
    ctrl = np.full((reports, 1), bool(agg_id))
    last_tree_level = idpf.BITS - 1
    for depth, (parents, bits, bits64) in enumerate(_depth_plan(level, plan)):
        if depth < last_tree_level:
            # The child's block is seed xor le128(bit): sigma(seed xor le128(bit)) = sigma(seed) xor (0, bit).
            sigma = _sigma(_gather(seeds, parents), 1)
            sigma[:, :, 1] ^= bits64
            s = _aes(hashings, "extend_cipher", sigma)
        else:
            both = _turboshake(hashings, "extend_dst", seeds, 2).reshape(reports, -1, 2)
            s = _gather(both, 2 * parents + bits)  # each parent's two children, the one taken
        t = (s[:, :, 0] & np.uint64(1)).astype(bool)
        s[:, :, 0] &= ~np.uint64(1)
        corrected = ctrl[:, parents]
        # (reports × nodes) arrays against a column per report: numpy is slow on a last axis of 2.
        s[:, :, 0] ^= seed_cws[:, depth, 0, None] * corrected
        s[:, :, 1] ^= seed_cws[:, depth, 1, None] * corrected
        ctrl = t ^ (corrected & ctrl_cws[:, depth, bits])
        seeds, values = _convert(idpf, hashings, depth, s, values=depth == level)
    return _corrected_values(idpf, agg_id, public_shares, level, values, ctrl, plan[0])


# The per-depth plan of the last prefixes walked, with the plan it is for (one tuple, replaced whole, so
# that a thread never reads one plan's steps for another): every chunk and both aggregators walk the same.
_last_depth_plan: list[tuple[_WalkPlan, list] | None] = [None]


def _depth_plan(level: int, plan: _WalkPlan) -> list[tuple[npt.NDArray[np.intp], npt.NDArray[np.intp], Halves]]:
    """For each depth, each node's parent (its row at the depth before) and the bit it takes there."""
    last = _last_depth_plan[0]
    if last is not None and last[0] is plan:
        return last[1]
    _, paths, first_difference = plan
    steps = []
    starts = np.zeros(1, dtype=np.intp)  # the first sorted prefix under each node of the depth before
    for depth in range(level + 1):
        new_starts = np.concatenate(([0], np.flatnonzero(first_difference <= depth) + 1))
        parents = np.searchsorted(starts, new_starts, side="right") - 1
        bits = paths[new_starts, depth].astype(np.intp)
        steps.append((parents, bits, bits.astype(np.uint64)))
        starts = new_starts
    _last_depth_plan[0] = (plan, steps)
    return steps


def _gather(blocks: Halves, rows: npt.NDArray[np.intp]) -> Halves:
    """blocks[:, rows], each 16-byte block moved as one item (far faster than two uint64 per row)."""
    items = np.ascontiguousarray(blocks).view("V16")[..., 0]
    return np.take(items, rows, axis=1).view("<u8").reshape(len(blocks), len(rows), 2)


def _aes(hashings: Sequence[_Hashing], which: str, sigma: Halves) -> Halves:
    """hash(x) = AES(sigma(x)) xor sigma(x) of every block of each report, under that report's cipher, given sigma(x).

    The caller builds sigma(x) (``_sigma``) straight from what it has: sigma is linear, so a counter
    xored into x is a counter xored into sigma(x), and no block x is ever materialised.
    """
    sigma = np.ascontiguousarray(sigma, dtype="<u8")
    per_report = sigma[0].nbytes
    # One output buffer for all the reports; update_into wants 15 bytes of room past each report's
    # blocks, which the next report's (or the spare last block) provides before being written.
    out = np.empty(sigma.size + 2, dtype="<u8")
    source, target = memoryview(sigma.reshape(-1).view(np.uint8)), memoryview(out.view(np.uint8))
    for r, hashing in enumerate(hashings):
        cipher: CipherContext = getattr(hashing, which)
        cipher.update_into(
            source[r * per_report : (r + 1) * per_report], target[r * per_report : (r + 1) * per_report + 15]
        )
    hashed = out[:-2].reshape(sigma.shape)
    hashed ^= sigma
    return hashed


def _sigma(seeds: Halves, blocks: int, first: int = 0) -> Halves:
    """sigma(seed xor le128(i)) for first <= i < blocks, of every seed: (hi, hi xor lo xor i), one block per row."""
    if blocks - first == 1:
        sigma = np.empty_like(seeds)
        sigma[..., 0] = seeds[..., 1]
        np.bitwise_xor(seeds[..., 0], seeds[..., 1], out=sigma[..., 1])
        if first:
            sigma[..., 1] ^= np.uint64(first)
        return sigma
    sigma = np.empty((*seeds.shape[:-1], blocks - first, 2), dtype=np.uint64)
    mixed = seeds[..., 1] ^ seeds[..., 0]
    for i in range(first, blocks):  # a few blocks: a pass over all the nodes each (numpy is slow on short last axes)
        sigma[..., i - first, 0] = seeds[..., 1]
        np.bitwise_xor(mixed, np.uint64(i), out=sigma[..., i - first, 1])
    return sigma


def _turboshake(hashings: Sequence[_Hashing], which: str, seeds: Halves, blocks: int) -> Halves:
    """The first ``blocks`` blocks of XofTurboShake128(seed, dst, nonce) of every seed of every report, at once."""
    reports, nodes = seeds.shape[:2]
    dst = getattr(hashings[0], which)
    head = len(dst).to_bytes(2, "little") + dst + bytes([16])
    messages = np.empty((reports, nodes, len(head) + 16 + 16), dtype=np.uint8)
    messages[:, :, : len(head)] = np.frombuffer(head, dtype=np.uint8)
    messages[:, :, len(head) : len(head) + 16] = seeds.view(np.uint8).reshape(reports, nodes, 16)
    nonces = np.frombuffer(b"".join(hashing.nonce for hashing in hashings), dtype=np.uint8)
    messages[:, :, len(head) + 16 :] = nonces.reshape(reports, 1, 16)
    out = turboshake128(messages.reshape(reports * nodes, -1), 1, 16 * blocks)
    return out.view("<u8").reshape(reports, nodes, 2 * blocks)


def _convert(idpf: IdpfBBCGGI21, hashings, depth: int, seeds: Halves, *, values: bool) -> tuple[Halves, Values]:  # noqa: ANN001
    """Each node's next seed or, at the evaluated level, its VALUE_LEN elements (rejection sampled).

    At the evaluated level the walk stops: the next seed (the stream's first block) is not needed,
    and under AES it is not hashed.
    """
    field = idpf.current_field(depth)
    value_bytes = field.ENCODED_SIZE * idpf.VALUE_LEN if values else 0
    blocks = 1 + -(-value_bytes // 16)
    reports, nodes = seeds.shape[:2]
    if depth < idpf.BITS - 1:
        first = int(values)
        stream = _aes(hashings, "convert_cipher", _sigma(seeds, blocks, first))
        stream = stream.reshape(reports, nodes, 2 * (blocks - first))
    else:
        first = 0
        stream = _turboshake(hashings, "convert_dst", seeds, blocks)
    if not values:
        return stream, np.zeros((0,), dtype=object)
    raw = np.ascontiguousarray(stream[:, :, 2 * (1 - first) :]).view(np.uint8)[:, :, :value_bytes]
    size, p = field.ENCODED_SIZE, field.MODULUS
    out, rejected_draws = decode_draws(raw.reshape(reports, nodes, idpf.VALUE_LEN, size), field)
    if rejected_draws.any():
        for r, i in np.argwhere(rejected_draws.any(axis=2)).tolist():
            # A rejected draw: that node's stream read on, as the spec's element-by-element reading does.
            xof = idpf._xof(depth, seeds[r, i].tobytes(), hashings[r].convert_dst, hashings[r].nonce)
            xof.next(16)
            out[r, i] = xof.next_vec(field, idpf.VALUE_LEN)
    if out.dtype == np.uint64 and p != Field64.MODULUS:
        out = out.astype(object)  # uint64 arithmetic is Field64's only (privacy.vdaf.field64_arrays)
    return np.zeros((reports, 0, 2), dtype=np.uint64), out


def decode_draws(raw: npt.NDArray[np.uint8], field: type[Field]) -> tuple[Values, npt.NDArray[np.bool_]]:
    """Draws of ``field`` from XOF output (last axis: one element's ENCODED_SIZE bytes): the masked integers
    and which of them rejection sampling refuses (>= MODULUS; the caller reads on as the spec does).

    uint64 for 8-byte fields; otherwise Python integers (dtype object), converted in one C-level pass:
    each element's bytes as one numpy item, then int.from_bytes mapped over them.
    """
    size, p = field.ENCODED_SIZE, field.MODULUS
    mask = (next_power_of_2(p) - 1).to_bytes(size, "little")
    masked = np.ascontiguousarray(raw)
    partial = [j for j, byte in enumerate(mask) if byte != 0xFF]  # the mask is 2**k - 1: its top byte at most
    if partial:
        masked = masked.copy()
        for j in partial:
            masked[..., j] &= mask[j]
    if size == 8:
        out = masked.view("<u8")[..., 0].astype(np.uint64, copy=not masked.flags.writeable)  # callers patch it
        return out, out >= np.uint64(p)
    items = masked.view(f"V{size}")[..., 0]
    out = np.empty(items.shape, dtype=object)
    out.reshape(-1)[:] = list(map(int.from_bytes, items.reshape(-1).tolist(), repeat("little")))
    return out, np.asarray(out >= p, dtype=bool)


def _corrected_values(idpf, agg_id, public_shares, level, values, ctrl, order) -> Values:  # noqa: ANN001
    """The value correction where the control bit is set, aggregator 1's negated, back in the prefixes' order."""
    field = idpf.current_field(level)
    if values.dtype == np.uint64:
        if all(isinstance(public_share, DecodedPublicShare) for public_share in public_shares):
            w_cw = np.stack([public_share.inner[level] for public_share in public_shares])
        else:
            w_cw = np.array([public_share[level][2] for public_share in public_shares], dtype=np.uint64)
        shares = np.empty_like(values)
        for k in range(idpf.VALUE_LEN):  # column by column: numpy is slow on a last axis of 2
            column = values[:, :, k]
            fixed = np.where(ctrl, field64_arrays.add(column, w_cw[:, k, None]), column)
            shares[:, :, k] = field64_arrays.neg(fixed) if agg_id == 1 else fixed
        # Each prefix's row moved as one item back to the prefixes' order.
        rows = shares.view(f"V{8 * idpf.VALUE_LEN}")[..., 0]
        out = np.empty_like(rows)
        out[:, order] = rows
        return out.view(np.uint64).reshape(shares.shape)
    p = field.MODULUS
    w_cw = np.empty((len(public_shares), idpf.VALUE_LEN), dtype=object)
    w_cw[:] = [list(public_share[level][2]) for public_share in public_shares]
    shares = values.copy()
    reports, nodes = np.nonzero(ctrl)  # only the nodes whose control bit is set are corrected
    shares[reports, nodes] = (values[reports, nodes] + w_cw[reports]) % p
    if agg_id == 1:
        shares = -shares % p
    out = np.empty_like(shares)
    out[:, order] = shares
    return out
