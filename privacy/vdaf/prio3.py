"""Prio3 of draft-irtf-cfrg-vdaf-20, Section 7.2, and its variants of Section 7.4.

A client shards its encoded measurement additively: the leader (aggregator 0) gets its share and its
share of the proof as field vectors, each helper a 32-byte XOF seed that expands to its shares. When
the circuit needs joint randomness (SumVec, Histogram, MultihotCountVec), it is derived Fiat-Shamir
style from each share's "joint randomness part"; the client puts the parts in the public share, and
each aggregator recomputes its own part and checks that all agree on the seed (Section 7.2.2).

Verification is one round: ``verify_init`` on each aggregator (a verifier share),
``verifier_shares_to_message`` (decides the proof; any aggregator can run it), ``verify_next`` (the
joint randomness check; releases the output share). Earlier drafts called these prep_init,
prep_shares_to_prep and prep_next.

This module is the per-report reference path, checked against the draft's test vectors
(``python -m privacy.vdaf.check_vectors``). ``privacy.vdaf.batch`` verifies many reports at once and
must agree with it byte for byte.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from privacy.vdaf.circuits import Count, Histogram, MultihotCountVec, Sum, SumVec
from privacy.vdaf.errors import DecodeError, VdafError, VerifyError, verify_init_checked
from privacy.vdaf.field import Field, Vec, vec_add, vec_sub
from privacy.vdaf.flp import Flp, Valid
from privacy.vdaf.xof import XofTurboShake128, format_dst

# The usage constants of Section 7.2.
USAGE_MEAS_SHARE = 1
USAGE_PROOF_SHARE = 2
USAGE_JOINT_RANDOMNESS = 3
USAGE_PROVE_RANDOMNESS = 4
USAGE_QUERY_RANDOMNESS = 5
USAGE_JOINT_RAND_SEED = 6
USAGE_JOINT_RAND_PART = 7

PublicShare = list[bytes] | None
# The leader's (meas_share, proofs_share, blind) or a helper's (seed, blind); blind is None without joint randomness.
LeaderInputShare = tuple[Vec, Vec, bytes | None]
HelperInputShare = tuple[bytes, bytes | None]
InputShare = LeaderInputShare | HelperInputShare
VerifyState = tuple[Vec, bytes | None]  # (out_share, corrected joint randomness seed)
VerifierShare = tuple[Vec, bytes | None]  # (verifiers_share, joint randomness part)
VerifierMessage = bytes | None  # the joint randomness seed


class Prio3:
    """Prio3 over one validity circuit (Section 7.2), with XofTurboShake128 and PROOFS proofs."""

    xof = XofTurboShake128
    NONCE_SIZE = 16
    ROUNDS = 1
    VERIFY_KEY_SIZE = XofTurboShake128.SEED_SIZE

    def __init__(self, valid: Valid, *, algorithm_id: int, shares: int, proofs: int = 1) -> None:
        if not 2 <= shares < 256:
            raise ValueError("shares must be in [2, 256)")
        if not 1 <= proofs < 256:
            raise ValueError("proofs must be in [1, 256)")
        if not 0 <= algorithm_id < 2**32:
            raise ValueError("algorithm_id must fit in 32 bits")
        self.ID = algorithm_id
        self.SHARES = shares
        self.PROOFS = proofs
        self.flp = Flp(valid)
        self.field: type[Field] = valid.field
        seed_size = self.xof.SEED_SIZE
        self.RAND_SIZE = seed_size * shares * (1 if self.flp.JOINT_RAND_LEN == 0 else 2)

    # -- Sharding (Section 7.2.1) ------------------------------------------------------------------

    def shard(self, ctx: bytes, measurement: Any, nonce: bytes, rand: bytes) -> tuple[PublicShare, list[InputShare]]:
        """Public share and SHARES input shares of ``measurement``.

        ``nonce`` (NONCE_SIZE bytes) and ``rand`` (RAND_SIZE bytes) must come from a CSPRNG on a real
        device, e.g. ``os.urandom``; tests pass fixed bytes.
        """
        return self.shard_encoded(ctx, self.flp.encode(measurement), nonce, rand)

    def shard_encoded(
        self, ctx: bytes, meas: Sequence[int], nonce: bytes, rand: bytes
    ) -> tuple[PublicShare, list[InputShare]]:
        """Shard an already encoded measurement, without the encoding's validity checks.

        An honest client goes through ``shard``. This entry point lets tests play a malicious client
        that proves an invalid vector honestly, which the aggregators must reject.
        """
        if len(nonce) != self.NONCE_SIZE:
            raise VdafError("incorrect nonce size")
        if len(rand) != self.RAND_SIZE:
            raise VdafError("incorrect size of random bytes argument")
        if len(meas) != self.flp.MEAS_LEN or any(not 0 <= x < self.field.MODULUS for x in meas):
            raise VdafError("encoded measurement must be MEAS_LEN field elements")
        size = self.xof.SEED_SIZE
        seeds = [rand[i : i + size] for i in range(0, self.RAND_SIZE, size)]
        if self.flp.JOINT_RAND_LEN > 0:
            return self._shard_with_joint_rand(ctx, list(meas), nonce, seeds)
        return self._shard_without_joint_rand(ctx, list(meas), seeds)

    def _shard_without_joint_rand(
        self, ctx: bytes, meas: Vec, seeds: list[bytes]
    ) -> tuple[PublicShare, list[InputShare]]:
        helper_shares, (prove_seed,) = seeds[: self.SHARES - 1], seeds[self.SHARES - 1 :]
        leader_meas_share = meas
        for j, share in enumerate(helper_shares):
            leader_meas_share = vec_sub(self.field, leader_meas_share, self.helper_meas_share(ctx, j + 1, share))
        leader_proofs_share = self._prove_all(ctx, meas, prove_seed, None)
        for j, share in enumerate(helper_shares):
            leader_proofs_share = vec_sub(self.field, leader_proofs_share, self.helper_proofs_share(ctx, j + 1, share))
        input_shares: list[InputShare] = [(leader_meas_share, leader_proofs_share, None)]
        input_shares += [(share, None) for share in helper_shares]
        return None, input_shares

    def _shard_with_joint_rand(
        self, ctx: bytes, meas: Vec, nonce: bytes, seeds: list[bytes]
    ) -> tuple[PublicShare, list[InputShare]]:
        helper_seeds = seeds[: 2 * (self.SHARES - 1)]
        helper_shares, helper_blinds = helper_seeds[0::2], helper_seeds[1::2]
        leader_blind, prove_seed = seeds[2 * (self.SHARES - 1) :]

        leader_meas_share = meas
        joint_rand_parts = []
        for j in range(self.SHARES - 1):
            helper_meas_share = self.helper_meas_share(ctx, j + 1, helper_shares[j])
            leader_meas_share = vec_sub(self.field, leader_meas_share, helper_meas_share)
            joint_rand_parts.append(self.joint_rand_part(ctx, j + 1, helper_blinds[j], helper_meas_share, nonce))
        joint_rand_parts.insert(0, self.joint_rand_part(ctx, 0, leader_blind, leader_meas_share, nonce))

        joint_rand_seed = self.joint_rand_seed(ctx, joint_rand_parts)
        leader_proofs_share = self._prove_all(ctx, meas, prove_seed, joint_rand_seed)
        for j in range(self.SHARES - 1):
            leader_proofs_share = vec_sub(
                self.field, leader_proofs_share, self.helper_proofs_share(ctx, j + 1, helper_shares[j])
            )
        input_shares: list[InputShare] = [(leader_meas_share, leader_proofs_share, leader_blind)]
        input_shares += [(helper_shares[j], helper_blinds[j]) for j in range(self.SHARES - 1)]
        return joint_rand_parts, input_shares

    def _prove_all(self, ctx: bytes, meas: Vec, prove_seed: bytes, joint_rand_seed: bytes | None) -> Vec:
        """PROOFS proofs, each with its slice of the prover and joint randomness."""
        prove_rands = self.prove_rands(ctx, prove_seed)
        joint_rands = self.joint_rands(ctx, joint_rand_seed) if joint_rand_seed is not None else []
        prove_len, joint_len = self.flp.PROVE_RAND_LEN, self.flp.JOINT_RAND_LEN
        proofs: Vec = []
        for k in range(self.PROOFS):
            proofs += self.flp.prove(
                meas,
                prove_rands[k * prove_len : (k + 1) * prove_len],
                joint_rands[k * joint_len : (k + 1) * joint_len],
            )
        return proofs

    # -- Verification (Section 7.2.2) --------------------------------------------------------------

    def verify_init(
        self,
        verify_key: bytes,
        ctx: bytes,
        agg_id: int,
        agg_param: None,
        nonce: bytes,
        public_share: PublicShare,
        input_share: InputShare,
    ) -> tuple[VerifyState, VerifierShare]:
        """This aggregator's verification state and verifier share for one report."""
        verify_init_checked(self, verify_key, nonce, agg_id)
        meas_share, proofs_share, blind = self.expand_input_share(ctx, agg_id, input_share)
        out_share = self.flp.truncate(meas_share)

        joint_rands: Vec = []
        corrected_joint_rand_seed, joint_rand_part = None, None
        if self.flp.JOINT_RAND_LEN > 0:
            parts = self._checked_public_share(public_share)
            assert blind is not None  # expand_input_share checked it
            joint_rand_part = self.joint_rand_part(ctx, agg_id, blind, meas_share, nonce)
            parts[agg_id] = joint_rand_part
            corrected_joint_rand_seed = self.joint_rand_seed(ctx, parts)
            joint_rands = self.joint_rands(ctx, corrected_joint_rand_seed)
        elif public_share is not None:
            raise DecodeError("this VDAF has no public share")

        query_rands = self.query_rands(verify_key, ctx, nonce)
        proof_len, query_len, joint_len = self.flp.PROOF_LEN, self.flp.QUERY_RAND_LEN, self.flp.JOINT_RAND_LEN
        verifiers_share: Vec = []
        for k in range(self.PROOFS):
            verifiers_share += self.flp.query(
                meas_share,
                proofs_share[k * proof_len : (k + 1) * proof_len],
                query_rands[k * query_len : (k + 1) * query_len],
                joint_rands[k * joint_len : (k + 1) * joint_len],
                self.SHARES,
            )
        return (out_share, corrected_joint_rand_seed), (verifiers_share, joint_rand_part)

    def verifier_shares_to_message(
        self, ctx: bytes, agg_param: None, verifier_shares: Sequence[VerifierShare]
    ) -> VerifierMessage:
        """Combine all aggregators' verifier shares, decide every proof, and derive the joint randomness seed.

        Raises VerifyError if a proof is rejected.
        """
        if len(verifier_shares) != self.SHARES:
            raise VdafError(f"expected {self.SHARES} verifier shares")
        length = self.flp.VERIFIER_LEN * self.PROOFS
        verifiers = self.field.zeros(length)
        joint_rand_parts = []
        for verifiers_share, joint_rand_part in verifier_shares:
            if len(verifiers_share) != length:
                raise DecodeError("verifier share has the wrong length")
            verifiers = vec_add(self.field, verifiers, verifiers_share)
            if self.flp.JOINT_RAND_LEN > 0:
                if joint_rand_part is None:
                    raise DecodeError("verifier share lacks its joint randomness part")
                joint_rand_parts.append(joint_rand_part)
        verifier_len = self.flp.VERIFIER_LEN
        for k in range(self.PROOFS):
            if not self.flp.decide(verifiers[k * verifier_len : (k + 1) * verifier_len]):
                raise VerifyError("proof verifier check failed")
        if self.flp.JOINT_RAND_LEN > 0:
            return self.joint_rand_seed(ctx, joint_rand_parts)
        return None

    def verify_next(self, ctx: bytes, verify_state: VerifyState, verifier_message: VerifierMessage) -> Vec:
        """The output share, once the aggregators' joint randomness seed matches the client's."""
        out_share, corrected_joint_rand_seed = verify_state
        if verifier_message != corrected_joint_rand_seed:
            raise VerifyError("joint randomness check failed")
        return out_share

    # -- Aggregation and unsharding (Sections 7.2.4, 7.2.5) ----------------------------------------

    def is_valid(self, agg_param: None, previous_agg_params: Sequence[None]) -> bool:
        """A report is aggregated at most once."""
        return len(previous_agg_params) == 0

    def agg_init(self, agg_param: None = None) -> Vec:
        return self.field.zeros(self.flp.OUTPUT_LEN)

    def agg_update(self, agg_param: None, agg_share: Sequence[int], out_share: Sequence[int]) -> Vec:
        return vec_add(self.field, agg_share, out_share)

    def merge(self, agg_param: None, agg_shares: Sequence[Sequence[int]]) -> Vec:
        agg = self.agg_init(None)
        for agg_share in agg_shares:
            agg = vec_add(self.field, agg, agg_share)
        return agg

    def aggregate(self, out_shares: Sequence[Sequence[int]]) -> Vec:
        """One aggregator's aggregate share: agg_update over its output shares."""
        agg = self.agg_init(None)
        for out_share in out_shares:
            agg = self.agg_update(None, agg, out_share)
        return agg

    def unshard(self, agg_param: None, agg_shares: Sequence[Sequence[int]], num_measurements: int) -> Any:
        return self.flp.decode(self.merge(None, agg_shares), num_measurements)

    # -- Auxiliary functions (Section 7.2.6) -------------------------------------------------------

    def domain_separation_tag(self, usage: int, ctx: bytes) -> bytes:
        return format_dst(0, self.ID, usage) + ctx

    def helper_meas_share(self, ctx: bytes, agg_id: int, share: bytes) -> Vec:
        return self.xof.expand_into_vec(
            self.field,
            share,
            self.domain_separation_tag(USAGE_MEAS_SHARE, ctx),
            bytes([agg_id]),
            self.flp.MEAS_LEN,
        )

    def helper_proofs_share(self, ctx: bytes, agg_id: int, share: bytes) -> Vec:
        return self.xof.expand_into_vec(
            self.field,
            share,
            self.domain_separation_tag(USAGE_PROOF_SHARE, ctx),
            bytes([self.PROOFS, agg_id]),
            self.flp.PROOF_LEN * self.PROOFS,
        )

    def expand_input_share(self, ctx: bytes, agg_id: int, input_share: InputShare) -> tuple[Vec, Vec, bytes | None]:
        needs_blind = self.flp.JOINT_RAND_LEN > 0
        if agg_id > 0:
            if len(input_share) != 2:
                raise DecodeError("a helper's input share is (seed, blind)")
            share, blind = input_share  # type: ignore[misc]
            if not isinstance(share, bytes) or len(share) != self.xof.SEED_SIZE:
                raise DecodeError("helper seed has the wrong size")
            meas_share = self.helper_meas_share(ctx, agg_id, share)
            proofs_share = self.helper_proofs_share(ctx, agg_id, share)
        else:
            if len(input_share) != 3:
                raise DecodeError("the leader's input share is (meas_share, proofs_share, blind)")
            meas_share, proofs_share, blind = input_share  # type: ignore[misc]
            if len(meas_share) != self.flp.MEAS_LEN or len(proofs_share) != self.flp.PROOF_LEN * self.PROOFS:
                raise DecodeError("leader share has the wrong length")
            if any(not 0 <= x < self.field.MODULUS for x in (*meas_share, *proofs_share)):
                raise DecodeError("leader share holds a value outside the field")
        if needs_blind != (blind is not None) or (blind is not None and len(blind) != self.xof.SEED_SIZE):
            raise DecodeError("blind missing, unexpected or of the wrong size")
        return list(meas_share), list(proofs_share), blind

    def prove_rands(self, ctx: bytes, prove_seed: bytes) -> Vec:
        return self.xof.expand_into_vec(
            self.field,
            prove_seed,
            self.domain_separation_tag(USAGE_PROVE_RANDOMNESS, ctx),
            bytes([self.PROOFS]),
            self.flp.PROVE_RAND_LEN * self.PROOFS,
        )

    def query_rands(self, verify_key: bytes, ctx: bytes, nonce: bytes) -> Vec:
        return self.xof.expand_into_vec(
            self.field,
            verify_key,
            self.domain_separation_tag(USAGE_QUERY_RANDOMNESS, ctx),
            bytes([self.PROOFS]) + nonce,
            self.flp.QUERY_RAND_LEN * self.PROOFS,
        )

    def joint_rand_part(self, ctx: bytes, agg_id: int, blind: bytes, meas_share: Sequence[int], nonce: bytes) -> bytes:
        return self.xof.derive_seed(
            blind,
            self.domain_separation_tag(USAGE_JOINT_RAND_PART, ctx),
            bytes([agg_id]) + nonce + self.field.encode_vec(meas_share),
        )

    def joint_rand_seed(self, ctx: bytes, joint_rand_parts: Sequence[bytes]) -> bytes:
        return self.xof.derive_seed(
            bytes(self.xof.SEED_SIZE),
            self.domain_separation_tag(USAGE_JOINT_RAND_SEED, ctx),
            b"".join(joint_rand_parts),
        )

    def joint_rands(self, ctx: bytes, joint_rand_seed: bytes) -> Vec:
        return self.xof.expand_into_vec(
            self.field,
            joint_rand_seed,
            self.domain_separation_tag(USAGE_JOINT_RANDOMNESS, ctx),
            bytes([self.PROOFS]),
            self.flp.JOINT_RAND_LEN * self.PROOFS,
        )

    def _checked_public_share(self, public_share: PublicShare) -> list[bytes]:
        if public_share is None or len(public_share) != self.SHARES:
            raise DecodeError(f"public share must hold {self.SHARES} joint randomness parts")
        if any(len(part) != self.xof.SEED_SIZE for part in public_share):
            raise DecodeError("joint randomness part has the wrong size")
        return list(public_share)

    # -- Message serialization (Section 7.2.7) ----------------------------------------------------

    def encode_public_share(self, public_share: PublicShare) -> bytes:
        return b"" if public_share is None else b"".join(public_share)

    def decode_public_share(self, encoded: bytes) -> PublicShare:
        if self.flp.JOINT_RAND_LEN == 0:
            if encoded:
                raise DecodeError("this VDAF's public share is empty")
            return None
        size = self.xof.SEED_SIZE
        if len(encoded) != size * self.SHARES:
            raise DecodeError("public share has the wrong length")
        return [encoded[i : i + size] for i in range(0, len(encoded), size)]

    def encode_input_share(self, input_share: InputShare) -> bytes:
        if len(input_share) == 3:
            meas_share, proofs_share, blind = input_share  # type: ignore[misc]
            encoded = self.field.encode_vec(meas_share) + self.field.encode_vec(proofs_share)
        else:
            encoded, blind = input_share  # type: ignore[misc]
        return encoded + (blind or b"")

    def decode_input_share(self, agg_id: int, encoded: bytes) -> InputShare:
        size = self.xof.SEED_SIZE
        blind_size = size if self.flp.JOINT_RAND_LEN > 0 else 0
        if agg_id == 0:
            meas_len = self.flp.MEAS_LEN * self.field.ENCODED_SIZE
            proofs_len = self.flp.PROOF_LEN * self.PROOFS * self.field.ENCODED_SIZE
            if len(encoded) != meas_len + proofs_len + blind_size:
                raise DecodeError("leader input share has the wrong length")
            meas_share = self.field.decode_vec(encoded[:meas_len])
            proofs_share = self.field.decode_vec(encoded[meas_len : meas_len + proofs_len])
            return meas_share, proofs_share, (encoded[meas_len + proofs_len :] if blind_size else None)
        if not 0 < agg_id < self.SHARES:
            raise DecodeError("agg_id out of range")
        if len(encoded) != size + blind_size:
            raise DecodeError("helper input share has the wrong length")
        return encoded[:size], (encoded[size:] if blind_size else None)

    def encode_verifier_share(self, verifier_share: VerifierShare) -> bytes:
        verifiers_share, joint_rand_part = verifier_share
        return self.field.encode_vec(verifiers_share) + (joint_rand_part or b"")

    def decode_verifier_share(self, encoded: bytes) -> VerifierShare:
        vec_len = self.flp.VERIFIER_LEN * self.PROOFS * self.field.ENCODED_SIZE
        part_len = self.xof.SEED_SIZE if self.flp.JOINT_RAND_LEN > 0 else 0
        if len(encoded) != vec_len + part_len:
            raise DecodeError("verifier share has the wrong length")
        return self.field.decode_vec(encoded[:vec_len]), (encoded[vec_len:] if part_len else None)

    def encode_verifier_message(self, message: VerifierMessage) -> bytes:
        return message or b""

    def decode_verifier_message(self, encoded: bytes) -> VerifierMessage:
        if self.flp.JOINT_RAND_LEN == 0:
            if encoded:
                raise DecodeError("this VDAF's verifier message is empty")
            return None
        if len(encoded) != self.xof.SEED_SIZE:
            raise DecodeError("verifier message has the wrong length")
        return encoded

    def encode_agg_share(self, agg_share: Sequence[int]) -> bytes:
        """Also the encoding of an output share (the test vectors use it for both)."""
        return self.field.encode_vec(agg_share)

    def decode_agg_share(self, encoded: bytes) -> Vec:
        agg_share = self.field.decode_vec(encoded)
        if len(agg_share) != self.flp.OUTPUT_LEN:
            raise DecodeError("aggregate share has the wrong length")
        return agg_share


class Prio3Count(Prio3):
    """Counts 0/1 measurements over Field64 (Section 7.4.1, ID 0x00000001)."""

    def __init__(self, shares: int = 2) -> None:
        super().__init__(Count(), algorithm_id=0x00000001, shares=shares)


class Prio3Sum(Prio3):
    """Sums integers in [0, max_measurement] over Field64 (Section 7.4.2, ID 0x00000002)."""

    def __init__(self, max_measurement: int, shares: int = 2) -> None:
        super().__init__(Sum(max_measurement), algorithm_id=0x00000002, shares=shares)


class Prio3SumVec(Prio3):
    """Sums vectors of integers in [0, max_measurement] over Field128 (Section 7.4.3, ID 0x00000003)."""

    def __init__(self, length: int, max_measurement: int, chunk_length: int, shares: int = 2) -> None:
        super().__init__(SumVec(length, max_measurement, chunk_length), algorithm_id=0x00000003, shares=shares)


class Prio3Histogram(Prio3):
    """Counts one bucket in [0, length) per measurement over Field128 (Section 7.4.4, ID 0x00000004).

    The spec recommends chunk_length near sqrt(length).
    """

    def __init__(self, length: int, chunk_length: int, shares: int = 2) -> None:
        super().__init__(Histogram(length, chunk_length), algorithm_id=0x00000004, shares=shares)


class Prio3MultihotCountVec(Prio3):
    """Counts ``length`` bits per measurement, at most max_weight of them set (Section 7.4.5, ID 0x00000005).

    The spec recommends chunk_length near sqrt(length + max_weight.bit_length()).
    """

    def __init__(self, length: int, max_weight: int, chunk_length: int, shares: int = 2) -> None:
        super().__init__(MultihotCountVec(length, max_weight, chunk_length), algorithm_id=0x00000005, shares=shares)
