"""The IDPF of [BBCGGI21] as draft-irtf-cfrg-vdaf-20 specifies it for Poplar1 (Sections 8.1 and 8.3).

An IDPF key pair shares a binary tree of depth BITS whose nodes are all zero except on the path to the
client's index ``alpha``, where level L holds ``beta[L]`` (VALUE_LEN field elements: Field64 at inner
levels, Field255 at the leaves). Each aggregator walks the tree from its 16-byte key: a node is a seed
and a control bit; ``extend`` hashes the seed into two children, the public correction words fix the
children on the path, and ``convert`` turns a child's seed into the next seed and the node's value.

XofFixedKeyAes128 does the hashing at inner levels, XofTurboShake128 at the last one (Section 8.3.4).
The walk is batched: ``eval`` visits every distinct node the candidate prefixes pass through once, one
level at a time, hashing all of a level's nodes in one AES call (``privacy.vdaf.xof.hash_blocks``);
``gen`` hashes both aggregators' seeds together. Only nodes at the evaluated level have their values
computed: above it, ``convert``'s first block (the next seed) is all the walk needs. The values are
read, corrected and negated as arrays: uint64 in Field64 (``privacy.vdaf.field64_arrays``), Python
integers in an object array in Field255, which has no numpy form here.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
from cryptography.hazmat.primitives.ciphers import CipherContext

from privacy.vdaf import field64_arrays
from privacy.vdaf.errors import DecodeError, VdafError
from privacy.vdaf.field import Field, Field64, Field255, Vec, next_power_of_2, vec_add, vec_sub
from privacy.vdaf.xof import (
    XofFixedKeyAes128,
    XofTurboShake128,
    counter_blocks,
    fixed_key_cipher,
    format_dst,
    hash_blocks,
)

Bits = Sequence[bool]
# (seed correction, the two control bit corrections, value correction) of one level (Section 8.3.2).
CorrectionWord = tuple[bytes, tuple[bool, bool], Vec]
PublicShare = list[CorrectionWord]  # or a DecodedPublicShare, which reads as one
Seeds = npt.NDArray[np.uint8]  # one 16-byte seed per row
# One row of VALUE_LEN field elements per node or prefix: uint64 for 8-byte fields, Python integers (object) otherwise.
Values = npt.NDArray[np.uint64] | npt.NDArray[np.object_]
# The prefixes' sorted order, their bits in that order (rows × depth) and, for each row after the first,
# the depth at which it leaves the row before it.
_WalkPlan = tuple[npt.NDArray[np.intp], npt.NDArray[np.bool_], npt.NDArray[np.intp]]

# The IDPF's algorithm class and its two usages in format_dst (Section 8.3.4).
IDPF_ALGORITHM_CLASS = 1
USAGE_EXTEND = 0
USAGE_CONVERT = 1


class _Hashing:
    """What one report's tree is hashed with: the tags of extend and convert and their fixed-key ciphers."""

    def __init__(self, ctx: bytes, nonce: bytes) -> None:
        self.nonce = nonce
        self.extend_dst = format_dst(IDPF_ALGORITHM_CLASS, 0, USAGE_EXTEND) + ctx
        self.convert_dst = format_dst(IDPF_ALGORITHM_CLASS, 0, USAGE_CONVERT) + ctx
        # The AES keys depend on the tag and the nonce only: derived once per report, not once per node.
        self.extend_cipher = fixed_key_cipher(self.extend_dst, nonce)
        self.convert_cipher = fixed_key_cipher(self.convert_dst, nonce)


class IdpfBBCGGI21:
    """Key generation and evaluation of the IDPF of Section 8.3, with SHARES = 2."""

    SHARES = 2
    KEY_SIZE = XofFixedKeyAes128.SEED_SIZE
    RAND_SIZE = 2 * XofFixedKeyAes128.SEED_SIZE
    NONCE_SIZE = 16
    field_inner: type[Field] = Field64
    field_leaf: type[Field] = Field255

    def __init__(self, bits: int, value_len: int) -> None:
        if bits < 1:
            raise ValueError("BITS must be positive")
        if value_len < 1:
            raise ValueError("VALUE_LEN must be positive")
        self.BITS = bits
        self.VALUE_LEN = value_len
        # The last tuple of prefixes walked and its plan: every report of a collection is evaluated at
        # the same aggregation parameter. Kept only for tuples of tuples, which cannot change under it.
        self._last_plan: tuple[tuple[Bits, ...], _WalkPlan] | None = None

    def current_field(self, level: int) -> type[Field]:
        return self.field_inner if level < self.BITS - 1 else self.field_leaf

    # -- Key generation (Section 8.3.2) ------------------------------------------------------------

    def gen(
        self,
        alpha: Bits,
        beta_inner: Sequence[Sequence[int]],
        beta_leaf: Sequence[int],
        ctx: bytes,
        nonce: bytes,
        rand: bytes,
    ) -> tuple[PublicShare, list[bytes]]:
        """The public correction words and the two aggregators' keys programming ``beta`` on ``alpha``'s path."""
        if len(alpha) != self.BITS:
            raise VdafError("incorrect alpha length")
        if len(beta_inner) != self.BITS - 1:
            raise VdafError("incorrect beta_inner length")
        if len(rand) != self.RAND_SIZE:
            raise VdafError("incorrect rand size")
        if len(nonce) != self.NONCE_SIZE:
            raise VdafError("incorrect nonce size")
        hashing = _Hashing(ctx, nonce)
        keys = [rand[: self.KEY_SIZE], rand[self.KEY_SIZE :]]
        seeds = np.frombuffer(rand, dtype=np.uint8).reshape(2, self.KEY_SIZE).copy()
        ctrl = [False, True]
        public_share: PublicShare = []
        for level in range(self.BITS):
            bit = bool(alpha[level])
            keep, lose = int(bit), 1 - int(bit)
            s, t = self._extend(hashing, level, seeds)
            seed_cw = s[0, lose] ^ s[1, lose]
            ctrl_cw = (bool(t[0, 0] ^ t[1, 0] ^ (not bit)), bool(t[0, 1] ^ t[1, 1] ^ bit))
            # The side whose control bit is set applies the correction: off the path both seeds then agree.
            kept = np.stack([s[k, keep] ^ seed_cw if ctrl[k] else s[k, keep] for k in range(2)])
            ctrl = [bool(t[k, keep]) ^ (ctrl[k] and ctrl_cw[keep]) for k in range(2)]
            seeds, values = self._convert(hashing, level, kept, values=True)
            w0, w1 = values.tolist()
            beta = beta_inner[level] if level < self.BITS - 1 else beta_leaf
            if len(beta) != self.VALUE_LEN:
                raise VdafError("length of beta must match the value length")
            field = self.current_field(level)
            w_cw = vec_add(field, vec_sub(field, list(beta), w0), w1)
            if ctrl[1]:
                w_cw = [-x % field.MODULUS for x in w_cw]
            public_share.append((seed_cw.tobytes(), ctrl_cw, w_cw))
        return public_share, keys

    # -- Evaluation (Section 8.3.3) ----------------------------------------------------------------

    def eval(
        self,
        agg_id: int,
        public_share: PublicShare,
        key: bytes,
        level: int,
        prefixes: Sequence[Bits],
        ctx: bytes,
        nonce: bytes,
    ) -> list[Vec]:
        """This aggregator's share of the value at each prefix of length level + 1 (in the order given)."""
        return self.eval_array(agg_id, public_share, key, level, prefixes, ctx, nonce).tolist()

    def eval_array(
        self,
        agg_id: int,
        public_share: PublicShare,
        key: bytes,
        level: int,
        prefixes: Sequence[Bits],
        ctx: bytes,
        nonce: bytes,
    ) -> Values:
        """``eval`` as an array, one row of VALUE_LEN elements per prefix: uint64 in Field64, Python integers otherwise."""
        if agg_id not in range(self.SHARES):
            raise VdafError("aggregator id out of range")
        if level not in range(self.BITS):
            raise VdafError("level out of range")
        if len(public_share) != self.BITS:
            raise VdafError("public share must hold BITS correction words")
        if len(key) != self.KEY_SIZE:
            raise VdafError("incorrect key size")
        if len(nonce) != self.NONCE_SIZE:
            raise VdafError("incorrect nonce size")
        if set(map(len, prefixes)) - {level + 1}:
            raise VdafError("incorrect prefix length")
        field = self.current_field(level)
        vectorised = field.MODULUS == Field64.MODULUS
        if not prefixes:
            return np.zeros((0, self.VALUE_LEN), dtype=np.uint64 if vectorised else object)
        order, paths, first_difference = self._walk_plan(level, prefixes)
        hashing = _Hashing(ctx, nonce)
        seeds = np.frombuffer(key, dtype=np.uint8).reshape(1, self.KEY_SIZE)
        ctrl = np.array([bool(agg_id)])
        starts = np.zeros(1, dtype=np.intp)  # the first row of each node at the depth walked so far
        for depth in range(level + 1):
            new_starts = np.concatenate(([0], np.flatnonzero(first_difference <= depth) + 1))
            parents = np.searchsorted(starts, new_starts, side="right") - 1
            bits = paths[new_starts, depth].astype(np.intp)
            starts = new_starts
            seed_cw, ctrl_cw, w_cw = public_share[depth]
            s, t = self._extend(hashing, depth, seeds)
            corrected = ctrl[:, None]
            s = s ^ (corrected[:, :, None] * np.frombuffer(seed_cw, dtype=np.uint8))
            t = t ^ (corrected & np.array(ctrl_cw, dtype=bool))
            ctrl = t[parents, bits]
            seeds, values = self._convert(hashing, depth, s[parents, bits], values=depth == level)
        # The prefixes are distinct and of this depth: each row is a node of its own, in order.
        rows, row_ctrl = values, ctrl[:, None]
        if vectorised:
            shares = np.where(row_ctrl, field64_arrays.add(rows, np.array(w_cw, dtype=np.uint64)), rows)
            if agg_id == 1:
                shares = field64_arrays.neg(shares)
        else:
            p = field.MODULUS
            rows = rows.astype(object)
            shares = np.where(row_ctrl, (rows + np.array(w_cw, dtype=object)) % p, rows)
            if agg_id == 1:
                shares = -shares % p
        out = np.empty_like(shares)
        out[order] = shares
        return out

    def _walk_plan(self, level: int, prefixes: Sequence[Bits]) -> _WalkPlan:
        """The prefixes' sorted order, their bits in that order and where each leaves the one before it."""
        last = self._last_plan
        if last is not None and last[0] is prefixes:
            return last[1]
        # One byte per bit (bytes() of a prefix of booleans), read as booleans: no Python work per bit.
        paths = np.frombuffer(b"".join(map(bytes, prefixes)), dtype=np.uint8).reshape(len(prefixes), level + 1) != 0
        # Sorted, the prefixes that share a node at a depth are consecutive rows: a node starts where a
        # row differs from the one before it in any bit up to that depth. Sorting the packed bits gives
        # the order of the bits.
        order = np.lexsort(np.packbits(paths, axis=1).T[::-1])
        paths = paths[order]
        differs = paths[1:] != paths[:-1]
        if not differs.any(axis=1).all():
            raise VdafError("prefixes must be unique")
        first_difference = differs.argmax(axis=1)  # the depth at which each row leaves the one before
        for array in (order, paths, first_difference):
            array.flags.writeable = False  # shared by every report evaluated at these prefixes
        plan = (order, paths, first_difference)
        if isinstance(prefixes, tuple) and all(type(prefix) is tuple for prefix in prefixes):
            self._last_plan = (prefixes, plan)
        return plan

    # -- Auxiliary functions (Section 8.3.4), over many seeds at once --------------------------------

    def _stream(self, level: int, dst: bytes, cipher: CipherContext, nonce: bytes, seeds: Seeds, blocks: int) -> Seeds:
        """The first ``blocks`` * 16 bytes of each seed's XOF stream, one row per seed."""
        if level < self.BITS - 1:
            out = hash_blocks(cipher, seeds[:, None, :] ^ counter_blocks(0, blocks))
            return out.reshape(len(seeds), blocks * 16)
        # The last level hashes with TurboSHAKE128 (safe to model as a random oracle: extractability).
        rows = [XofTurboShake128(seed.tobytes(), dst, nonce).next(blocks * 16) for seed in seeds]
        return np.frombuffer(b"".join(rows), dtype=np.uint8).reshape(len(seeds), blocks * 16)

    def _extend(
        self, hashing: _Hashing, level: int, seeds: Seeds
    ) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.bool_]]:
        """Each seed's two children (rows × 2 × 16 bytes) and their control bits, the children's low bits."""
        stream = (
            self._stream(level, hashing.extend_dst, hashing.extend_cipher, hashing.nonce, seeds, 2)
            .reshape(-1, 2, 16)
            .copy()
        )
        t = (stream[:, :, 0] & 1).astype(bool)
        stream[:, :, 0] &= 0xFE
        return stream, t

    def _convert(self, hashing: _Hashing, level: int, seeds: Seeds, *, values: bool) -> tuple[Seeds, Values]:
        """Each seed's next seed and, if ``values``, its VALUE_LEN field elements (rejection sampled).

        The elements are uint64 for a field of 8-byte elements, Python integers (dtype object) otherwise.
        """
        field = self.current_field(level)
        value_bytes = field.ENCODED_SIZE * self.VALUE_LEN if values else 0
        stream = self._stream(
            level, hashing.convert_dst, hashing.convert_cipher, hashing.nonce, seeds, 1 + -(-value_bytes // 16)
        )
        next_seeds = stream[:, :16].copy()
        if not values:
            return next_seeds, np.zeros((0, self.VALUE_LEN), dtype=object)
        size = field.ENCODED_SIZE
        mask = next_power_of_2(field.MODULUS) - 1
        raw = stream[:, 16 : 16 + value_bytes]
        if size == 8:
            out = np.ascontiguousarray(raw).view("<u8").astype(np.uint64) & np.uint64(mask)
            rejected = np.flatnonzero((out >= np.uint64(field.MODULUS)).any(axis=1)).tolist()
        else:
            out = np.array(
                [
                    [int.from_bytes(chunk[j : j + size], "little") & mask for j in range(0, value_bytes, size)]
                    for chunk in map(bytes, raw)
                ],
                dtype=object,
            ).reshape(len(seeds), self.VALUE_LEN)
            rejected = [i for i, vec in enumerate(out.tolist()) if any(x >= field.MODULUS for x in vec)]
        for i in rejected:
            # A rejected draw (about 2**-32 per Field64 element): read on from the same stream, as the spec does.
            xof = self._xof(level, seeds[i].tobytes(), hashing.convert_dst, hashing.nonce)
            xof.next(16)
            out[i] = xof.next_vec(field, self.VALUE_LEN)
        return next_seeds, out

    def _xof(self, level: int, seed: bytes, dst: bytes, nonce: bytes) -> XofFixedKeyAes128 | XofTurboShake128:
        if level < self.BITS - 1:
            return XofFixedKeyAes128(seed, dst, nonce)
        return XofTurboShake128(seed, dst, nonce)

    # -- Public share encoding (Section 8.2.6.1) ---------------------------------------------------

    def encode_public_share(self, public_share: PublicShare) -> bytes:
        """Packed control bits (LSB first), the seeds, the inner values (Field64), the leaf values (Field255)."""
        bits = [bit for _, ctrl_cw, _ in public_share for bit in ctrl_cw]
        packed = bytearray((len(bits) + 7) // 8)
        for i, bit in enumerate(bits):
            packed[i // 8] |= int(bit) << (i % 8)
        seeds = b"".join(seed_cw for seed_cw, _, _ in public_share)
        inner = b"".join(self.field_inner.encode_vec(w_cw) for _, _, w_cw in public_share[:-1])
        return bytes(packed) + seeds + inner + self.field_leaf.encode_vec(public_share[-1][2])

    def decode_public_share(self, encoded: bytes) -> PublicShare:
        """The correction words, every one checked now (length, trailing bits, each value below its
        field's modulus), held as arrays and read a level at a time (DecodedPublicShare): an
        aggregator decodes each report's public share at every level of a walk, and reads a few."""
        packed_len = (2 * self.BITS + 7) // 8
        inner_len = self.field_inner.ENCODED_SIZE * self.VALUE_LEN * (self.BITS - 1)
        leaf_len = self.field_leaf.ENCODED_SIZE * self.VALUE_LEN
        if len(encoded) != packed_len + self.KEY_SIZE * self.BITS + inner_len + leaf_len:
            raise DecodeError("public share has the wrong length")
        packed, rest = encoded[:packed_len], encoded[packed_len:]
        bits = np.unpackbits(np.frombuffer(packed, dtype=np.uint8), bitorder="little")[: 2 * self.BITS]
        if packed[-1] >> ((2 * self.BITS + 7) % 8 + 1):
            raise DecodeError("trailing bits in the packed control bits")
        seeds, rest = rest[: self.KEY_SIZE * self.BITS], rest[self.KEY_SIZE * self.BITS :]
        inner = np.frombuffer(rest[:inner_len], dtype="<u8")
        if (inner >= np.uint64(self.field_inner.MODULUS)).any():
            raise DecodeError("modulus overflow")
        leaf = self.field_leaf.decode_vec(rest[inner_len:])
        return DecodedPublicShare(
            seeds=seeds,
            controls=bits.astype(bool).reshape(self.BITS, 2),
            inner=inner.reshape(self.BITS - 1, self.VALUE_LEN),
            leaf=leaf,
            key_size=self.KEY_SIZE,
        )


class DecodedPublicShare(Sequence):
    """A decoded public share, a list of correction words (seed, (ctrl0, ctrl1), values) to its
    readers, held as the arrays it was decoded into: a level's word is built when read, so reading
    the first levels of a 64-bit share costs a few levels' work, not 64. ``inner``: the Field64
    values of the inner levels (BITS - 1 rows); ``leaf``: the last level's (Field255, Python ints)."""

    def __init__(
        self, *, seeds: bytes, controls: np.ndarray, inner: np.ndarray, leaf: list[int], key_size: int
    ) -> None:
        self.seeds, self.controls, self.inner, self.leaf, self.key_size = seeds, controls, inner, leaf, key_size

    def __len__(self) -> int:
        return len(self.controls)

    def __getitem__(self, index):  # noqa: ANN001, ANN204 - an int gives a word, a slice a list of them
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        level = index + len(self) if index < 0 else index
        if not 0 <= level < len(self):
            raise IndexError("public share level out of range")
        seed = self.seeds[level * self.key_size : (level + 1) * self.key_size]
        ctrl = (bool(self.controls[level, 0]), bool(self.controls[level, 1]))
        values = self.inner[level].tolist() if level < len(self) - 1 else list(self.leaf)
        return seed, ctrl, values

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and list(self) == list(other)

    __hash__ = None  # a list's equality: not hashable
