"""Poplar1 of draft-irtf-cfrg-vdaf-20, Section 8: counts of the clients' bit strings that start with each candidate prefix.

A client programs its string ``alpha`` (BITS bits) into an IDPF (``privacy.vdaf.idpf``) whose value at
every node on alpha's path is (1, k), k a random authenticator per level, zero elsewhere; with it come
shares of correlated randomness (a, b, c) and of A = -2a + k, B = a**2 + b - ka + c per level. The
collector's aggregation parameter is a level and its candidate prefixes (sorted, distinct). Each
aggregator evaluates its IDPF key at the prefixes and checks, with the other, the arithmetic sketch of
[BBCGGI21] (Appendix C.4): for random r_i and data shares d_i, authenticator shares e_i,
z = sum d_i r_i, z* = sum d_i r_i**2, z** = sum e_i r_i are revealed masked, Z = z + a, Z* = z* + b,
Z** = z** + c (round one); then Z**2 - Z* - Z** + A Z + B, which is z**2 - z* - z** + k z, is computed
in shares and must be zero (round two). It is zero for a zero vector or a vector with a single 1 whose
authenticator is k; anything else passes with probability at most 2/|field| (Schwartz-Zippel: the
check is a polynomial of degree 2 in the r_i).

Verification is two rounds: ``verify_init`` (the masked sketch), ``verifier_shares_to_message`` (adds
the shares), ``verify_next`` (the sketch's check share), ``verifier_shares_to_message`` (zero or refuse),
``verify_next`` (the output share: the data shares at the prefixes). ``is_valid`` keeps a report from
being verified twice at one level, which would reuse its correlated randomness.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from privacy.vdaf import field64_arrays
from privacy.vdaf.errors import DecodeError, MeasurementError, VdafError, VerifyError, verify_init_checked
from privacy.vdaf.field import Field, Field64, Vec, vec_add, vec_sub
from privacy.vdaf.idpf import IdpfBBCGGI21, PublicShare
from privacy.vdaf.xof import XofTurboShake128, format_dst

# The usage constants of Section 8.2.
USAGE_SHARD_RAND = 1
USAGE_CORR_INNER = 2
USAGE_CORR_LEAF = 3
USAGE_VERIFY_RAND = 4

Prefix = tuple[bool, ...]
AggParam = tuple[int, Sequence[Prefix]]  # (level, candidate prefixes of length level + 1)
InputShare = tuple[bytes, bytes, Vec, Vec]  # (IDPF key, correlation seed, corr_inner, corr_leaf)
VerifyState = tuple[bytes, int, Vec]  # (step, level, [A share, B share, agg_id, *out_share])
VerifierShare = Vec  # three sketch elements in round one, one in round two
VerifierMessage = Vec | None  # the masked sketch, then None for "the sketch is zero"

STEP_EVALUATE = b"evaluate sketch"
STEP_REVEAL = b"reveal sketch"


class Poplar1:
    """Poplar1 over BITS-bit strings: the IDPF with VALUE_LEN 2, XofTurboShake128, two aggregators (ID 0x00000006)."""

    ID = 0x00000006
    xof = XofTurboShake128
    VERIFY_KEY_SIZE = XofTurboShake128.SEED_SIZE
    NONCE_SIZE = 16
    ROUNDS = 2
    SHARES = 2

    def __init__(self, bits: int) -> None:
        self.idpf = IdpfBBCGGI21(bits, 2)
        self.BITS = bits
        self.RAND_SIZE = 3 * self.xof.SEED_SIZE + self.idpf.RAND_SIZE

    def domain_separation_tag(self, usage: int, ctx: bytes) -> bytes:
        return format_dst(0, self.ID, usage) + ctx

    # -- Sharding (Section 8.2.1) ------------------------------------------------------------------

    def shard(
        self, ctx: bytes, measurement: Sequence[bool], nonce: bytes, rand: bytes
    ) -> tuple[PublicShare, list[InputShare]]:
        """The IDPF's public share and the two input shares of ``measurement`` (BITS booleans).

        ``nonce`` (16 bytes) and ``rand`` (RAND_SIZE bytes) must come from a CSPRNG on a real device.
        """
        if len(measurement) != self.BITS or any(not isinstance(bit, bool) for bit in measurement):
            raise MeasurementError(f"a Poplar1 measurement is {self.BITS} booleans")
        if len(nonce) != self.NONCE_SIZE:
            raise VdafError("incorrect nonce size")
        if len(rand) != self.RAND_SIZE:
            raise VdafError("incorrect size of random bytes argument")
        inner, leaf = self.idpf.field_inner, self.idpf.field_leaf
        size = self.xof.SEED_SIZE
        idpf_rand, rand = rand[: self.idpf.RAND_SIZE], rand[self.idpf.RAND_SIZE :]
        corr_seeds = [rand[:size], rand[size : 2 * size]]
        shard_seed = rand[2 * size : 3 * size]
        xof = self.xof(shard_seed, self.domain_separation_tag(USAGE_SHARD_RAND, ctx), nonce)

        # The data value 1 and the authenticator k at every level.
        beta_inner = [[1, k] for k in xof.next_vec(inner, self.BITS - 1)]
        beta_leaf = [1, *xof.next_vec(leaf, 1)]
        public_share, keys = self.idpf.gen(measurement, beta_inner, beta_leaf, ctx, nonce, idpf_rand)

        # (a, b, c) per level, the sum of what each aggregator's correlation seed expands to.
        offsets_inner = vec_add(
            inner, *(self._corr_inner(ctx, j, seed, nonce, self.BITS - 1) for j, seed in enumerate(corr_seeds))
        )
        offsets_leaf = vec_add(leaf, *(self._corr_leaf(ctx, j, seed, nonce) for j, seed in enumerate(corr_seeds)))
        # (A, B) per level, and aggregator 1's share of them read from the shard XOF. The spec reads two
        # elements a level; reading the inner levels' at once consumes the stream in the same order.
        corr = []
        for level in range(self.BITS):
            field = self.idpf.current_field(level)
            p = field.MODULUS
            if level < self.BITS - 1:
                k, (a, b, c) = beta_inner[level][1], offsets_inner[3 * level : 3 * level + 3]
            else:
                k, (a, b, c) = beta_leaf[1], offsets_leaf
            corr += [(-2 * a + k) % p, (a * a + b - a * k + c) % p]
        inner_len = 2 * (self.BITS - 1)
        corr_inner1, corr_leaf1 = xof.next_vec(inner, inner_len), xof.next_vec(leaf, 2)
        corr_inner = [vec_sub(inner, corr[:inner_len], corr_inner1), corr_inner1]
        corr_leaf = [vec_sub(leaf, corr[inner_len:], corr_leaf1), corr_leaf1]
        input_shares = [(keys[j], corr_seeds[j], corr_inner[j], corr_leaf[j]) for j in range(self.SHARES)]
        return public_share, input_shares

    def _corr_inner(self, ctx: bytes, agg_id: int, corr_seed: bytes, nonce: bytes, levels: int) -> Vec:
        """(a, b, c) shares of the first ``levels`` inner levels, from one aggregator's correlation seed."""
        return self.xof(corr_seed, self.domain_separation_tag(USAGE_CORR_INNER, ctx), bytes([agg_id]) + nonce).next_vec(
            self.idpf.field_inner, 3 * levels
        )

    def _corr_leaf(self, ctx: bytes, agg_id: int, corr_seed: bytes, nonce: bytes) -> Vec:
        return self.xof.expand_into_vec(
            self.idpf.field_leaf,
            corr_seed,
            self.domain_separation_tag(USAGE_CORR_LEAF, ctx),
            bytes([agg_id]) + nonce,
            3,
        )

    # -- Verification (Section 8.2.2) --------------------------------------------------------------

    def verify_init(
        self,
        verify_key: bytes,
        ctx: bytes,
        agg_id: int,
        agg_param: AggParam,
        nonce: bytes,
        public_share: PublicShare,
        input_share: InputShare,
    ) -> tuple[VerifyState, VerifierShare]:
        """This aggregator's output share, kept in its state, and its share of the masked sketch."""
        verify_init_checked(self, verify_key, nonce, agg_id)
        level, prefixes = agg_param
        key, corr_seed, corr_inner, corr_leaf = input_share
        field = self.idpf.current_field(level)
        p = field.MODULUS
        values = self.idpf.eval_array(agg_id, public_share, key, level, prefixes, ctx, nonce)

        if level < self.BITS - 1:
            # This level's (a, b, c): the stream read up to it, as the spec's fast-forward does.
            a, b, c = self._corr_inner(ctx, agg_id, corr_seed, nonce, level + 1)[3 * level :]
            big_a, big_b = corr_inner[2 * level : 2 * level + 2]
        else:
            a, b, c = self._corr_leaf(ctx, agg_id, corr_seed, nonce)
            big_a, big_b = corr_leaf

        verify_rand = self.xof(
            verify_key, self.domain_separation_tag(USAGE_VERIFY_RAND, ctx), nonce + level.to_bytes(2, "big")
        )
        if values.dtype == np.uint64:
            # Field64: every prefix at once (privacy.vdaf.field64_arrays).
            r = _next_array64(verify_rand, len(prefixes))
            data, auth = values[:, 0], values[:, 1]
            data_r = field64_arrays.mul(data, r)
            sketch = [
                a + field64_arrays.total(data_r),
                b + field64_arrays.total(field64_arrays.mul(data_r, r)),
                c + field64_arrays.total(field64_arrays.mul(auth, r)),
            ]
            out_share = data.tolist()
        else:
            sketch = [a, b, c]
            out_share = []
            for r_i, (data_i, auth_i) in zip(verify_rand.next_vec(field, len(prefixes)), values.tolist(), strict=True):
                sketch[0] += data_i * r_i
                sketch[1] += data_i * r_i * r_i
                sketch[2] += auth_i * r_i
                out_share.append(data_i)
        verify_mem = [big_a, big_b, agg_id, *out_share]
        return (STEP_EVALUATE, level, verify_mem), [x % p for x in sketch]

    def verifier_shares_to_message(
        self, ctx: bytes, agg_param: AggParam, verifier_shares: Sequence[VerifierShare]
    ) -> VerifierMessage:
        """Round one: the masked sketch. Round two: None if the sketch is zero; VerifyError if not."""
        if len(verifier_shares) != self.SHARES:
            raise VdafError("incorrect number of verifier shares")
        field = self.idpf.current_field(agg_param[0])
        lengths = {len(share) for share in verifier_shares}
        if lengths not in ({3}, {1}):
            raise DecodeError("incorrect sketch length")
        sketch = vec_add(field, *verifier_shares)
        if len(sketch) == 3:
            return sketch
        if sketch != [0]:
            raise VerifyError("sketch verification failed")
        return None

    def verify_next(
        self, ctx: bytes, verify_state: VerifyState, verifier_message: VerifierMessage
    ) -> tuple[VerifyState, VerifierShare] | Vec:
        """After round one, this aggregator's share of the sketch's check; after round two, its output share."""
        step, level, verify_mem = verify_state
        p = self.idpf.current_field(level).MODULUS
        if step == STEP_EVALUATE:
            if verifier_message is None:
                raise VdafError("expected the masked sketch, got none")
            if len(verifier_message) != 3:
                raise DecodeError("incorrect sketch length")
            z, z_star, z_star2 = verifier_message
            big_a, big_b, agg_id = verify_mem[:3]
            # Only one aggregator adds the public part z**2 - z* - z**, so the shares sum to it once.
            check = (agg_id * (z * z - z_star - z_star2) + big_a * z + big_b) % p
            return (STEP_REVEAL, level, verify_mem[3:]), [check]
        if step == STEP_REVEAL:
            if verifier_message is not None:
                raise VdafError("invalid verifier message")
            return verify_mem
        raise VdafError("invalid verification state")

    # -- Validity of aggregation parameters (Section 8.2.3) ----------------------------------------

    def is_valid(self, agg_param: AggParam, previous_agg_params: Sequence[AggParam]) -> bool:
        """Whether a report verified under ``previous_agg_params`` may be verified under ``agg_param``.

        The prefixes are distinct and sorted, of the level's length; the level is above every level
        before (the draft compares with the last, which is the highest in a sequence it accepted:
        comparing with all refuses a revisited level even in a history that was not checked); each
        prefix extends one of the last parameter's prefixes.
        """
        level, prefixes = agg_param
        if level not in range(self.BITS) or any(len(prefix) != level + 1 for prefix in prefixes):
            return False
        if any(prefixes[i - 1] >= prefixes[i] for i in range(1, len(prefixes))):
            return False
        if not previous_agg_params:
            return True
        if any(level <= previous_level for previous_level, _ in previous_agg_params):
            return False
        last_level, last_prefixes = previous_agg_params[-1]
        last = set(map(tuple, last_prefixes))
        return all(tuple(prefix[: last_level + 1]) in last for prefix in prefixes)

    # -- Aggregation and unsharding (Sections 8.2.4, 8.2.5) ----------------------------------------

    def agg_init(self, agg_param: AggParam) -> Vec:
        level, prefixes = agg_param
        return self.idpf.current_field(level).zeros(len(prefixes))

    def agg_update(self, agg_param: AggParam, agg_share: Sequence[int], out_share: Sequence[int]) -> Vec:
        return vec_add(self.idpf.current_field(agg_param[0]), agg_share, out_share)

    def merge(self, agg_param: AggParam, agg_shares: Sequence[Sequence[int]]) -> Vec:
        # All the shares at once: one numpy sum per prefix instead of a Python addition per share
        # (uint64 in Field64; Python integers in Field255, summed exactly and reduced once).
        if not agg_shares:
            return self.agg_init(agg_param)
        field64 = self._field(agg_param) is Field64
        shares = np.array(agg_shares, dtype=np.uint64 if field64 else object)
        if shares.shape != (len(agg_shares), len(agg_param[1])):
            raise ValueError("mismatched vector sizes")
        if field64:
            return field64_arrays.column_totals(shares).tolist()
        return (shares.sum(axis=0) % self._field(agg_param).MODULUS).tolist()

    def aggregate(self, agg_param: AggParam, out_shares: Sequence[Sequence[int]]) -> Vec:
        """One aggregator's aggregate share: agg_update over its output shares."""
        return self.merge(agg_param, out_shares)

    def unshard(self, agg_param: AggParam, agg_shares: Sequence[Sequence[int]], num_measurements: int) -> list[int]:
        """The count of measurements under each candidate prefix."""
        return self.merge(agg_param, agg_shares)

    # -- Message serialization (Section 8.2.6) -----------------------------------------------------

    def encode_public_share(self, public_share: PublicShare) -> bytes:
        return self.idpf.encode_public_share(public_share)

    def decode_public_share(self, encoded: bytes) -> PublicShare:
        return self.idpf.decode_public_share(encoded)

    def encode_input_share(self, input_share: InputShare) -> bytes:
        key, corr_seed, corr_inner, corr_leaf = input_share
        return (
            key + corr_seed + self.idpf.field_inner.encode_vec(corr_inner) + self.idpf.field_leaf.encode_vec(corr_leaf)
        )

    def decode_input_share(self, agg_id: int, encoded: bytes) -> InputShare:
        if agg_id not in range(self.SHARES):
            raise DecodeError("agg_id out of range")
        key_size, seed_size = self.idpf.KEY_SIZE, self.xof.SEED_SIZE
        inner_len = self.idpf.field_inner.ENCODED_SIZE * 2 * (self.BITS - 1)
        leaf_len = self.idpf.field_leaf.ENCODED_SIZE * 2
        if len(encoded) != key_size + seed_size + inner_len + leaf_len:
            raise DecodeError("input share has the wrong length")
        key, rest = encoded[:key_size], encoded[key_size:]
        corr_seed, rest = rest[:seed_size], rest[seed_size:]
        return (
            key,
            corr_seed,
            self.idpf.field_inner.decode_vec(rest[:inner_len]),
            self.idpf.field_leaf.decode_vec(rest[inner_len:]),
        )

    def _field(self, agg_param: AggParam) -> type[Field]:
        return self.idpf.current_field(agg_param[0])

    def encode_verifier_share(self, agg_param: AggParam, verifier_share: VerifierShare) -> bytes:
        return self._field(agg_param).encode_vec(verifier_share)

    def decode_verifier_share(self, agg_param: AggParam, encoded: bytes) -> VerifierShare:
        """Three elements (round one) or one (round two), of the level's field."""
        share = self._field(agg_param).decode_vec(encoded)
        if len(share) not in (3, 1):
            raise DecodeError("verifier share has the wrong length")
        return share

    def encode_verifier_message(self, agg_param: AggParam, message: VerifierMessage) -> bytes:
        return b"" if message is None else self._field(agg_param).encode_vec(message)

    def decode_verifier_message(self, agg_param: AggParam, encoded: bytes) -> VerifierMessage:
        if not encoded:
            return None
        message = self._field(agg_param).decode_vec(encoded)
        if len(message) != 3:
            raise DecodeError("verifier message has the wrong length")
        return message

    def encode_agg_share(self, agg_param: AggParam, agg_share: Sequence[int]) -> bytes:
        """Also the encoding of an output share (the test vectors use it for both)."""
        return self._field(agg_param).encode_vec(agg_share)

    def decode_agg_share(self, agg_param: AggParam, encoded: bytes) -> Vec:
        agg_share = self._field(agg_param).decode_vec(encoded)
        if len(agg_share) != len(agg_param[1]):
            raise DecodeError("aggregate share has the wrong length")
        return agg_share

    def encode_agg_param(self, agg_param: AggParam) -> bytes:
        """level (u16), number of prefixes (u32), each prefix's bits packed MSB first (Section 8.2.6.6)."""
        level, prefixes = agg_param
        encoded = bytearray(level.to_bytes(2, "big") + len(prefixes).to_bytes(4, "big"))
        for prefix in prefixes:
            if len(prefix) != level + 1:
                raise VdafError("incorrect prefix length")
            for start in range(0, len(prefix), 8):
                encoded.append(sum(int(bit) << (7 - i) for i, bit in enumerate(prefix[start : start + 8])))
        return bytes(encoded)

    def decode_agg_param(self, encoded: bytes) -> AggParam:
        if len(encoded) < 6:
            raise DecodeError("aggregation parameter too short")
        level, count = int.from_bytes(encoded[:2], "big"), int.from_bytes(encoded[2:6], "big")
        if level not in range(self.BITS):
            raise DecodeError("level out of range")
        per_prefix = (level + 1 + 7) // 8
        packed = encoded[6:]
        if len(packed) != per_prefix * count:
            raise DecodeError("aggregation parameter has the wrong length")
        # The unused low bits of each prefix's last byte must be zero.
        unused = (-(level + 1)) % 8
        prefixes = []
        for start in range(0, len(packed), per_prefix):
            chunk = packed[start : start + per_prefix]
            if chunk[-1] & ((1 << unused) - 1):
                raise DecodeError("trailing bits in prefix")
            prefixes.append(tuple(bool(chunk[i // 8] >> (7 - i % 8) & 1) for i in range(level + 1)))
        return level, prefixes


def _next_array64(xof: XofTurboShake128, length: int) -> field64_arrays.Elements:
    """``xof.next_vec(Field64, length)`` as a uint64 array, read in one piece.

    Field64 elements are 8 bytes with nothing masked; a draw >= p (about 2**-32 each) is rejected, and
    then the spec's element-by-element reading is replayed from where the piece ends.
    """
    draws = np.frombuffer(xof.next(8 * length), dtype="<u8").astype(np.uint64)
    kept = draws[draws < np.uint64(Field64.MODULUS)]
    if len(kept) == length:
        return kept
    return np.concatenate([kept, np.array(xof.next_vec(Field64, length - len(kept)), dtype=np.uint64)])
