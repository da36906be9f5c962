"""privacy.report_vdaf: which Prio3 a recipe's reports are, and every mechanism's honest report verifies.

Each mechanism privatizes a report with its own coins (seeded), the device code's sharding proves it,
and both aggregators' verification (the per-report reference path of privacy.vdaf) accepts it and
reconstructs it exactly.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from privacy.mechanisms import MECHANISMS, mechanism_get, report_weight_bound
from privacy.report_vdaf import (
    COUNT,
    HISTOGRAM,
    MULTIHOT,
    WEIGHT_FALSE_REJECTION,
    chunk_length,
    context,
    measurement,
    report_nonce,
    report_shape,
)

EXPECTED = {
    "asymmetric_ohe": MULTIHOT,
    "symmetric_rappor": MULTIHOT,
    "kary_rr": HISTOGRAM,
    "hadamard_response": HISTOGRAM,
    "binary_rr": COUNT,
}


def test_every_mechanism_has_its_prio3() -> None:
    assert set(EXPECTED) == set(MECHANISMS)
    for name, kind in EXPECTED.items():
        shape = report_shape(mechanism=name, epsilon0=2.0, domain_size=2 if kind == COUNT else 20)
        oracle = mechanism_get(name, 2.0)
        assert shape.kind == kind
        assert shape.weight_bound == report_weight_bound(oracle, 2 if kind == COUNT else 20, WEIGHT_FALSE_REJECTION)
    assert report_shape(mechanism=None, epsilon0=None, domain_size=20).kind == HISTOGRAM  # aggregator noise


def test_the_chunk_length_gives_the_shortest_proof() -> None:
    # 1,024 buckets and a weight of 4 to 7 bits: 34 (31 calls, 32-point wires), not sqrt's 32 (33 calls, 64).
    assert chunk_length(1024 + 3) == 34 and chunk_length(1024 + 8) == 34
    assert chunk_length(1) == 1


def test_a_vector_not_of_its_form_has_no_measurement() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        measurement(HISTOGRAM, [0, 1, 1])
    with pytest.raises(ValueError, match="0s and 1s"):
        measurement(MULTIHOT, [0, 2, 0])
    assert measurement(HISTOGRAM, [0, 0, 1]) == 2 and measurement(COUNT, [1]) == 1


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_an_honest_report_of_each_mechanism_verifies_and_reconstructs(name: str) -> None:
    rng = np.random.default_rng(7)
    domain = 2 if EXPECTED[name] == COUNT else 12
    oracle = mechanism_get(name, 1.0)
    shape = report_shape(mechanism=name, epsilon0=1.0, domain_size=domain)
    vdaf, ctx, verify_key = shape.vdaf(), context("c"), os.urandom(32)
    for value in range(domain):
        vector = oracle.privatize(np.array([value]), domain, rng)[0]
        nonce = report_nonce(os.urandom(32))
        public, shares = vdaf.shard(ctx, measurement(shape.kind, vector), nonce, os.urandom(vdaf.RAND_SIZE))
        states, verifier_shares = zip(
            *(vdaf.verify_init(verify_key, ctx, i, None, nonce, public, share) for i, share in enumerate(shares)),
            strict=True,
        )
        message = vdaf.verifier_shares_to_message(ctx, None, verifier_shares)
        outputs = [vdaf.verify_next(ctx, state, message) for state in states]
        total = [(a + b) % vdaf.field.MODULUS for a, b in zip(*outputs, strict=True)]
        assert total == [int(x) for x in vector]
