"""A real device's side of the upload protocol: its token, its report, its two sealed shares.

Uses the same privacy/ code as the simulator: the mechanism's ``privatize`` for one device. The
report is then sharded with Prio3 (privacy.vdaf, the VDAF privacy.report_vdaf names for the recipe):
two input shares that each reveal nothing alone, and a zero-knowledge proof that the report is of
its form, which both aggregators check — with the OS CSPRNG, not a seeded generator.

The order is fixed by what binds what: the token's nonce first, then the report sharded and sealed
under it (report_seal), then the token, whose message names the sealed report
(report_token_blind, pfs_device.wire.report_digest), and the report signed with it (report_sign).
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from pfs_device import hpke
from pfs_device.tokens import Blinding, IssuerPublicKey, Token, nonce_generate, token_blind, token_finalize
from pfs_device.wire import Report, SealedShare, report_digest_of
from privacy.heavy_hitters import report_context, word_bits
from privacy.mechanisms import FrequencyOracle
from privacy.report_vdaf import ReportShape, context, measurement, report_nonce
from privacy.vdaf import VdafError
from privacy.vdaf.poplar1 import Poplar1


@dataclass(frozen=True)
class AggregatorKeys:
    """The leader's and the helper's HPKE public keys, as published with the recipe."""

    leader: bytes
    helper: bytes


def report_vector(
    oracle: FrequencyOracle | None, value: int, domain_size: int, rng: np.random.Generator | None = None
) -> np.ndarray:
    """The device's report: privatized, or one-hot under aggregator noise (oracle None).

    A device's coins come from the OS unless a generator is given (seeded tests).
    """
    if oracle is None:
        vector = np.zeros(domain_size, dtype=np.int64)
        vector[value] = 1
        return vector
    rng = rng or np.random.default_rng(secrets.randbits(128))
    return oracle.privatize(np.array([value]), domain_size, rng)[0].astype(np.int64)


def report_shard(
    *, collection_key: str, vector: np.ndarray, shape: ReportShape, nonce: bytes
) -> tuple[bytes, bytes, bytes]:
    """(public share, leader input share, helper input share) of ``vector``, encoded: Prio3's
    sharding with its validity proof, bound to the collection (the VDAF context) and to the token
    (the VDAF nonce is derived from the token's ``nonce``, single use in the collection).

    The sharding's randomness comes from the OS CSPRNG. ValueError for a vector that is not of the
    shape's form (an honest device's report always is, up to the weight bound's 1e-9 tail).
    """
    vdaf = shape.vdaf()
    return vector_shard(
        collection_key=collection_key,
        vector=vector,
        shape=shape,
        nonce=report_nonce(nonce),
        rand=os.urandom(vdaf.RAND_SIZE),
    )


def vector_shard(
    *, collection_key: str, vector: np.ndarray, shape: ReportShape, nonce: bytes, rand: bytes
) -> tuple[bytes, bytes, bytes]:
    """Prio3's sharding of one report vector with the given nonce and randomness (a real device:
    report_shard; a simulated device of a fleet with per-device reports: its shard's coins)."""
    vdaf = shape.vdaf()
    try:
        public, (leader, helper) = vdaf.shard(context(collection_key), measurement(shape.kind, vector), nonce, rand)
    except VdafError as error:  # e.g. a multi-hot report over the weight bound
        raise ValueError(str(error)) from None
    return vdaf.encode_public_share(public), vdaf.encode_input_share(leader), vdaf.encode_input_share(helper)


def shares_seal(
    *,
    collection_key: str,
    batch_key: str,
    nonce: bytes,
    keys: AggregatorKeys,
    public: bytes,
    leader: bytes,
    helper: bytes,
) -> Report:
    """Seal each input share to its aggregator (hpke.share_info names it), bound to this report's
    collection, batch, token nonce and public share (hpke.share_aad, the AEAD's associated data).

    The report is not signed yet (its token has the nonce and no signature): its token signs its
    digest (report_sign)."""
    token = Token(nonce=nonce, signature=b"")
    aad = hpke.share_aad(collection_key, batch_key=batch_key, token_digest=token.digest, public_share=public)
    sealed = {
        role: SealedShare(*hpke.seal(key, share, hpke.share_info(role), aad=aad))
        for role, key, share in (("leader", keys.leader, leader), ("helper", keys.helper, helper))
    }
    return Report(
        collection_key=collection_key,
        batch_key=batch_key,
        token=token,
        leader=sealed["leader"],
        helper=sealed["helper"],
        public=public,
    )


def report_seal(
    *,
    collection_key: str,
    batch_key: str,
    vector: np.ndarray,
    keys: AggregatorKeys,
    shape: ReportShape,
    nonce: bytes | None = None,
) -> Report:
    """The report a device uploads, not signed yet: ``vector`` sharded with its proof (report_shard),
    each share sealed, all under the token ``nonce`` (a fresh one when None) the token will carry."""
    nonce = nonce_generate() if nonce is None else nonce
    public, leader, helper = report_shard(collection_key=collection_key, vector=vector, shape=shape, nonce=nonce)
    return shares_seal(
        collection_key=collection_key,
        batch_key=batch_key,
        nonce=nonce,
        keys=keys,
        public=public,
        leader=leader,
        helper=helper,
    )


def word_report_seal(
    *, collection_key: str, batch_key: str, word: str, bits: int, keys: AggregatorKeys, nonce: bytes | None = None
) -> Report:
    """The Poplar1 report of a device's word (a heavy-hitters walk, privacy.heavy_hitters), not signed
    yet: the word's ``bits``-bit string sharded into two IDPF keys with their correlated randomness
    (the OS CSPRNG's coins), bound to the collection (the VDAF context) and to the token (the VDAF
    nonce derives from the token's ``nonce``), each input share sealed to its aggregator as a Prio3
    report's is (shares_seal). Neither share alone says anything of the word."""
    nonce = nonce_generate() if nonce is None else nonce
    vdaf = Poplar1(bits)
    public, (leader, helper) = vdaf.shard(
        report_context(collection_key), word_bits(word, bits), report_nonce(nonce), os.urandom(vdaf.RAND_SIZE)
    )
    return shares_seal(
        collection_key=collection_key,
        batch_key=batch_key,
        nonce=nonce,
        keys=keys,
        public=vdaf.encode_public_share(public),
        leader=vdaf.encode_input_share(leader),
        helper=vdaf.encode_input_share(helper),
    )


def report_token_blind(report: Report, issuer: IssuerPublicKey) -> Blinding:
    """The token request of a sealed report: its nonce and its digest, blinded (pfs_device.tokens)."""
    return token_blind(
        collection_key=report.collection_key,
        nonce=report.token.nonce,
        report_digest=report_digest_of(report),
        issuer=issuer,
    )


def report_sign(report: Report, token: Token) -> Report:
    """The sealed report with its token, ready to upload. ValueError for a token of another nonce."""
    if token.nonce != report.token.nonce:
        raise ValueError("the token's nonce is not the one the report was sealed with")
    return replace(report, token=token)


def report_token_obtain(*, report: Report, issuer: IssuerPublicKey, issue: Callable[[int], int]) -> Report:
    """A sealed report signed in one go: its token request blinded, signed by ``issue``, finalized
    (the SDK takes these steps one at a time, each on disk first: pfs_device.sdk.device)."""
    blinding = report_token_blind(report, issuer)
    token = token_finalize(issuer=issuer, blinding=blinding, blind_sig=issue(blinding.blinded))
    return report_sign(report, token)
