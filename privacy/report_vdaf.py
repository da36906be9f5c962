"""Which Prio3 an uploaded report is, from the public recipe alone (no Django; devices and aggregators both use it).

A device proves its report valid in zero knowledge (privacy.vdaf, draft-irtf-cfrg-vdaf-20) and both
aggregators check the proof without learning the report. What "valid" means follows the randomizer:

* multi-hot reports (asymmetric OHE, symmetric RAPPOR): Prio3MultihotCountVec, every entry a bit
  and at most ``weight_bound`` of them set (the recipe's weight bound, seed 001 Section 6.1.1);
* one-hot reports (k-ary RR, Hadamard response, aggregator noise's one-hot vector): Prio3Histogram,
  every entry a bit and exactly one set;
* binary RR's single bit: Prio3Count.

A proof establishes the report's form, nothing more: that the device ran its local randomizer
honestly cannot be proved, so a malicious device still chooses its one report (docs/privacy.md).

The two aggregators and the device must agree on the VDAF, its context string and nonce:
``report_vdaf`` builds it from (kind, length, weight bound), ``context`` binds it to the collection
(a report shard for one collection verifies in no other), and ``report_nonce`` derives the VDAF's
16-byte nonce from the token's 32-byte nonce (single use per collection, so unique per report).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import numpy.typing as npt

from privacy.mechanisms import mechanism_get, report_weight_bound
from privacy.vdaf import Prio3, Prio3Count, Prio3Histogram, Prio3MultihotCountVec
from privacy.vdaf.flp import wire_poly_len

COUNT, HISTOGRAM, MULTIHOT = "count", "histogram", "multihot"
KINDS = (COUNT, HISTOGRAM, MULTIHOT)
# An honest report is over the weight bound with probability at most this (then it cannot be sent).
WEIGHT_FALSE_REJECTION = 1e-9
_BY_MECHANISM = {
    "asymmetric_ohe": MULTIHOT,
    "symmetric_rappor": MULTIHOT,
    "kary_rr": HISTOGRAM,
    "hadamard_response": HISTOGRAM,
    "binary_rr": COUNT,
}
_CONTEXT = b"pfs-studio prio3 report v1|"
_NONCE = b"pfs-studio prio3 nonce v1|"


@dataclass(frozen=True)
class ReportShape:
    """What both aggregators verify a report against: the Prio3 kind, the vector's length, its weight bound."""

    kind: str
    length: int
    weight_bound: int

    def vdaf(self) -> Prio3:
        return report_vdaf(self.kind, self.length, self.weight_bound)


@lru_cache(maxsize=256)
def report_shape(*, mechanism: str | None, epsilon0: float | None, domain_size: int) -> ReportShape:
    """The shape of a recipe's reports; ``mechanism`` None: aggregator noise (a one-hot vector).

    Cached: the weight bound's binomial tail costs tens of milliseconds, and a device process
    answering for many devices asks for the same shape each time.
    """
    if mechanism is None:
        return ReportShape(HISTOGRAM, domain_size, 1)
    oracle = mechanism_get(mechanism, float(epsilon0 or 0.0))
    kind = _BY_MECHANISM.get(mechanism)
    if kind is None:
        raise KeyError(f"no Prio3 is defined for reports of {mechanism!r}")
    length = oracle.report_length(domain_size)
    return ReportShape(kind, length, report_weight_bound(oracle, domain_size, WEIGHT_FALSE_REJECTION))


def chunk_length(meas_len: int) -> int:
    """The chunk length giving the shortest proof: 2 c seed values plus two polynomials of
    wire_poly_len(ceil(meas_len / c)) points (for 1,024 buckets: 34, a proof of 131 elements,
    where the spec's rule of thumb sqrt(meas_len) = 32 gives 191, bench/results/prio3.md)."""
    best = min(range(1, meas_len + 1), key=lambda c: (2 * c + 2 * wire_poly_len(math.ceil(meas_len / c)), c))
    return best


@lru_cache(maxsize=64)
def report_vdaf(kind: str, length: int, weight_bound: int) -> Prio3:
    """The Prio3 instance of a report shape (cached: building the FLP computes its roots once)."""
    if kind == COUNT:
        if length != 1:
            raise ValueError(f"a Prio3Count report has length 1, not {length}")
        return Prio3Count()
    if kind == HISTOGRAM:
        return Prio3Histogram(length, chunk_length(length))
    if kind == MULTIHOT:
        max_weight = max(1, min(weight_bound, length))
        return Prio3MultihotCountVec(length, max_weight, chunk_length(length + max_weight.bit_length()))
    raise ValueError(f"unknown report kind {kind!r}; known: {', '.join(KINDS)}")


def measurement(kind: str, vector: npt.ArrayLike) -> object:
    """The VDAF measurement of a device's report vector (entries 0/1): ValueError if it has no such form."""
    array = np.asarray(vector)
    if array.ndim != 1 or not np.isin(array, (0, 1)).all():
        raise ValueError("a report vector holds 0s and 1s only")
    if kind == COUNT:
        return int(array[0])
    if kind == HISTOGRAM:
        ones = np.flatnonzero(array)
        if ones.size != 1:
            raise ValueError(f"a one-hot report holds exactly one 1, not {ones.size}")
        return int(ones[0])
    if kind == MULTIHOT:
        return array.astype(bool).tolist()
    raise ValueError(f"unknown report kind {kind!r}")


def context(collection_key: str) -> bytes:
    """The VDAF application context: a report's proof is bound to its collection."""
    return _CONTEXT + collection_key.encode()


def report_nonce(token_nonce: bytes) -> bytes:
    """The VDAF nonce (16 bytes) of the report that spends the token with this nonce."""
    return hashlib.sha256(_NONCE + token_nonce).digest()[:16]


def input_share_sizes(vdaf: Prio3) -> tuple[int, int, int]:
    """(leader input share, helper input share, public share) in bytes, as encoded on the wire."""
    seed = vdaf.xof.SEED_SIZE
    blind = seed if vdaf.flp.JOINT_RAND_LEN > 0 else 0
    leader = (vdaf.flp.MEAS_LEN + vdaf.flp.PROOF_LEN * vdaf.PROOFS) * vdaf.field.ENCODED_SIZE + blind
    public = seed * vdaf.SHARES if blind else 0
    return leader, seed + blind, public
