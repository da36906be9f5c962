"""A real device's side of the upload protocol: its token, its report, its two sealed shares.

Uses the same privacy/ code as the simulator: the mechanism's ``privatize`` for one device, and
additive shares from privacy.field — with the OS CSPRNG for the mask, not a seeded generator.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

import numpy as np

from aggregation import hpke
from aggregation.tokens import Token
from aggregation.wire import Report, SealedShare
from privacy import field as prime_field
from privacy.mechanisms import FrequencyOracle


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


def report_seal(
    *, collection_key: str, batch_key: str, vector: np.ndarray, keys: AggregatorKeys, token: Token
) -> Report:
    """Split ``vector`` into two shares and seal each to its aggregator, bound to this report's
    collection, batch and token (hpke.share_info)."""
    leader, helper = prime_field.split(prime_field.to_field(vector))
    sealed = {
        role: SealedShare(
            *hpke.seal(
                public,
                share.astype("<u8").tobytes(),
                hpke.share_info(collection_key, role, batch_key=batch_key, token_digest=token.digest),
            )
        )
        for role, public, share in (("leader", keys.leader, leader), ("helper", keys.helper, helper))
    }
    return Report(
        collection_key=collection_key,
        batch_key=batch_key,
        token=token,
        leader=sealed["leader"],
        helper=sealed["helper"],
    )
