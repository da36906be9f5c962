"""privacy.vdaf.batch agrees byte for byte with the per-report Prio3 path (the one checked against the vectors).

Each test builds a mix of honest, invalid and tampered reports from a seeded generator and compares every
output of the batch functions with the per-report functions run on the same encoded messages.
"""

from __future__ import annotations

import numpy as np
import pytest

from privacy.vdaf import Prio3, Prio3Count, Prio3Histogram, Prio3MultihotCountVec, Prio3Sum, Prio3SumVec, batch
from privacy.vdaf.circuits import ChunkedRangeCheck
from privacy.vdaf.errors import VdafError
from privacy.vdaf.field import Field128

CTX = b"batch tests"
Report = tuple[bytes, bytes, list[bytes]]


def _honest_measurement(vdaf: Prio3, rng: np.random.Generator) -> object:
    valid = vdaf.flp.valid
    name = type(vdaf).__name__
    if name == "Prio3Count":
        return int(rng.integers(0, 2))
    if name == "Prio3Sum":
        return int(rng.integers(0, valid.max_measurement + 1))
    if name == "Prio3SumVec":
        return rng.integers(0, valid.max_measurement + 1, size=valid.length).tolist()
    if name == "Prio3Histogram":
        return int(rng.integers(0, valid.length))
    bits = np.zeros(valid.length, dtype=bool)
    bits[rng.choice(valid.length, size=rng.integers(0, valid.max_weight + 1), replace=False)] = True
    return bits.tolist()


def _reports(vdaf: Prio3, rng: np.random.Generator, count: int) -> list[Report]:
    """Honest reports, reports of random field vectors, and reports tampered with on the wire."""
    p = vdaf.field.MODULUS
    reports: list[Report] = []
    for k in range(count):
        nonce, rand = rng.bytes(vdaf.NONCE_SIZE), rng.bytes(vdaf.RAND_SIZE)
        kind = k % 4
        if kind == 1:
            # A malicious client: any vector, small values or uniform field elements, proved honestly.
            high = 3 if k % 8 == 1 else p
            vector = [int(x) % p for x in rng.integers(0, min(high, 2**63), size=vdaf.flp.MEAS_LEN)]
            public_share, input_shares = vdaf.shard_encoded(CTX, vector, nonce, rand)
        else:
            public_share, input_shares = vdaf.shard(CTX, _honest_measurement(vdaf, rng), nonce, rand)
        encoded = [vdaf.encode_input_share(s) for s in input_shares]
        public = vdaf.encode_public_share(public_share)
        if kind == 3:
            # On the wire: flip a byte of some aggregator's share, or truncate it, or swap the public share.
            target = int(rng.integers(0, vdaf.SHARES))
            share = bytearray(encoded[target])
            choice = k % 12
            if choice == 3:
                share[int(rng.integers(0, len(share)))] ^= 1 << int(rng.integers(0, 8))
            elif choice == 7:
                share = share[:-1]
            elif public:
                public = public[::-1]
            encoded[target] = bytes(share)
        reports.append((nonce, public, encoded))
    return reports


def _scalar_verify_init(vdaf: Prio3, verify_key: bytes, agg_id: int, report: Report) -> tuple | None:
    nonce, public, shares = report
    try:
        (out_share, seed), verifier_share = vdaf.verify_init(
            verify_key,
            CTX,
            agg_id,
            None,
            nonce,
            vdaf.decode_public_share(public),
            vdaf.decode_input_share(agg_id, shares[agg_id]),
        )
    except VdafError:
        return None
    return vdaf.encode_agg_share(out_share), seed, vdaf.encode_verifier_share(verifier_share)


def _assert_batch_matches_scalar(
    vdaf: Prio3, reports: list[Report], verify_key: bytes, query: batch.FlpQuery = batch.flp_query
) -> None:
    """Every output of the batch functions equals the per-report path's (``query``: the FLP query used)."""
    nonces, publics = [r[0] for r in reports], [r[1] for r in reports]
    states, all_verifier_shares = [], []
    for agg_id in range(vdaf.SHARES):
        state, verifier_shares = batch.verify_init_batch(
            vdaf, verify_key, CTX, agg_id, nonces, publics, [r[2][agg_id] for r in reports], query=query
        )
        for i, report in enumerate(reports):
            expected = _scalar_verify_init(vdaf, verify_key, agg_id, report)
            got = (
                None
                if verifier_shares[i] is None
                else (state.out_shares[i], state.joint_rand_seeds[i], verifier_shares[i])
            )
            assert got == expected, f"verify_init, report {i}, aggregator {agg_id}"
        states.append(state)
        all_verifier_shares.append(verifier_shares)

    messages = batch.verifier_shares_to_message_batch(vdaf, CTX, all_verifier_shares)
    accepted_by_scalar = []
    for i in range(len(reports)):
        shares = [all_verifier_shares[agg_id][i] for agg_id in range(vdaf.SHARES)]
        expected = None
        if all(s is not None for s in shares):
            try:
                decoded = [vdaf.decode_verifier_share(s) for s in shares]
                expected = vdaf.encode_verifier_message(vdaf.verifier_shares_to_message(CTX, None, decoded))
            except VdafError:
                expected = None
        assert messages[i] == expected, f"verifier message, report {i}"
        accepted_by_scalar.append(expected is not None)

    for state in states:
        accepted = batch.verify_next_batch(vdaf, CTX, state, messages)
        out_shares = []
        for i, (ok, message) in enumerate(zip(accepted, messages, strict=True)):
            scalar_ok = False
            if message is not None and state.out_shares[i] is not None:
                scalar_state = (vdaf.decode_agg_share(state.out_shares[i]), state.joint_rand_seeds[i])
                try:
                    out_shares.append(vdaf.verify_next(CTX, scalar_state, vdaf.decode_verifier_message(message)))
                    scalar_ok = True
                except VdafError:
                    scalar_ok = False
            assert ok == scalar_ok, f"verify_next, report {i}"
        assert batch.aggregate_batch(vdaf, state, accepted) == vdaf.aggregate(out_shares)
    # The mix must exercise both verdicts, or the comparison proves little.
    assert any(accepted_by_scalar) and not all(accepted_by_scalar)


@pytest.mark.parametrize(
    "vdaf",
    [
        Prio3MultihotCountVec(length=40, max_weight=5, chunk_length=6),
        Prio3MultihotCountVec(length=130, max_weight=130, chunk_length=12, shares=3),
        Prio3Histogram(length=33, chunk_length=5),
        Prio3Histogram(length=7, chunk_length=7, shares=3),
        Prio3SumVec(length=5, max_measurement=1000, chunk_length=8),
        Prio3Count(),
        Prio3Sum(max_measurement=77, shares=3),
    ],
    ids=lambda vdaf: f"{type(vdaf).__name__}-{vdaf.flp.MEAS_LEN}-{vdaf.SHARES}",
)
def test_batch_verification_agrees_with_the_per_report_path(vdaf: Prio3) -> None:
    rng = np.random.default_rng(vdaf.flp.MEAS_LEN * 10 + vdaf.SHARES)
    _assert_batch_matches_scalar(vdaf, _reports(vdaf, rng, 24), rng.bytes(32))


def test_batch_verification_agrees_across_chunk_boundaries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(batch, "CHUNK", 5)
    vdaf = Prio3MultihotCountVec(length=20, max_weight=3, chunk_length=4)
    rng = np.random.default_rng(99)
    _assert_batch_matches_scalar(vdaf, _reports(vdaf, rng, 17), rng.bytes(32))


def test_helper_shares_needing_rejection_sampling_are_recomputed_exactly(monkeypatch: pytest.MonkeyPatch) -> None:
    # A draw >= p (about 2**-59 per element) cannot be produced on purpose: pretend the first row of
    # every check has one, which sends that helper report and its randomness down the exact path.
    real = batch._rows_canonical

    def first_row_rejected(data: bytes, rows: int, length: int) -> np.ndarray:
        result = real(data, rows, length)
        result[0] = False
        return result

    vdaf = Prio3Histogram(length=12, chunk_length=4)
    rng = np.random.default_rng(5)
    reports = [(n, p, s) for n, p, s in _reports(vdaf, rng, 8)]
    verify_key = rng.bytes(32)
    nonces, publics, helper_shares = [r[0] for r in reports], [r[1] for r in reports], [r[2][1] for r in reports]
    expected = [_scalar_verify_init(vdaf, verify_key, 1, r) for r in reports]
    monkeypatch.setattr(batch, "_rows_canonical", first_row_rejected)
    state, verifier_shares = batch.verify_init_batch(vdaf, verify_key, CTX, 1, nonces, publics, helper_shares)
    got = [
        None if v is None else (state.out_shares[i], state.joint_rand_seeds[i], v)
        for i, v in enumerate(verifier_shares)
    ]
    assert got == expected


def test_a_leader_share_with_a_value_above_the_modulus_is_refused_by_both_paths() -> None:
    vdaf = Prio3Histogram(length=12, chunk_length=4)
    rng = np.random.default_rng(6)
    nonce, rand = rng.bytes(16), rng.bytes(vdaf.RAND_SIZE)
    public_share, shares = vdaf.shard(CTX, 3, nonce, rand)
    leader = b"\xff" * 16 + vdaf.encode_input_share(shares[0])[16:]
    report = (nonce, vdaf.encode_public_share(public_share), [leader, vdaf.encode_input_share(shares[1])])
    verify_key = rng.bytes(32)
    assert _scalar_verify_init(vdaf, verify_key, 0, report) is None
    _, verifier_shares = batch.verify_init_batch(vdaf, verify_key, CTX, 0, [nonce], [report[1]], [leader])
    assert verifier_shares == [None]


def test_the_batch_query_refuses_a_test_point_among_the_roots_of_unity() -> None:
    # The FLP must refuse t with t**p == 1 (Section 7.3.4): t is derived by the XOF, so inject one.
    vdaf = Prio3Histogram(length=12, chunk_length=4)
    circuit = batch.QueryCircuit.of(vdaf)
    from privacy.vdaf import limbs

    p = circuit.points
    rng = np.random.default_rng(8)
    x = limbs.from_ints([int(v) for v in rng.integers(0, 2**62, size=vdaf.flp.MEAS_LEN)]).reshape(4, 1, -1)
    proof = limbs.from_ints([int(v) for v in rng.integers(0, 2**62, size=vdaf.flp.PROOF_LEN)]).reshape(4, 1, -1)
    r = limbs.from_ints([int(v) for v in rng.integers(0, 2**62, size=vdaf.flp.JOINT_RAND_LEN)]).reshape(4, 1, -1)
    root = Field128.nth_root(p)
    q = limbs.from_ints([5, 7, root]).reshape(4, 1, 3)
    _, refused = batch.flp_query(circuit, x, proof, r, q)
    assert refused.tolist() == [True]
    q = limbs.from_ints([5, 7, Field128.nth_root(2 * p)]).reshape(4, 1, 3)  # a 2p-th root is allowed
    _, refused = batch.flp_query(circuit, x, proof, r, q)
    assert refused.tolist() == [False]


@pytest.mark.parametrize(
    "vdaf",
    [Prio3Histogram(length=9, chunk_length=3, shares=3), Prio3MultihotCountVec(length=9, max_weight=4, chunk_length=2)],
    ids=lambda vdaf: type(vdaf).__name__,
)
def test_the_affine_check_used_by_the_batch_matches_the_circuit(vdaf: Prio3) -> None:
    valid = vdaf.flp.valid
    assert isinstance(valid, ChunkedRangeCheck)
    p = Field128.MODULUS
    rng = np.random.default_rng(2)
    meas = [int(v) % p for v in rng.integers(0, 2**63, size=valid.MEAS_LEN)]
    joint_rand = [int(v) for v in rng.integers(0, 2**63, size=valid.JOINT_RAND_LEN)]
    weights, constant = valid.affine_check()
    expected = (sum(w * x for w, x in zip(weights, meas, strict=True)) + constant * Field128.inv(vdaf.SHARES)) % p
    assert valid.eval(meas, joint_rand, vdaf.SHARES)[1] == expected


def test_verify_init_batch_refuses_mismatched_inputs() -> None:
    vdaf = Prio3Histogram(length=4, chunk_length=2)
    with pytest.raises(ValueError):
        batch.verify_init_batch(vdaf, bytes(32), CTX, 0, [bytes(16)], [], [])
    with pytest.raises(VdafError):
        batch.verify_init_batch(vdaf, bytes(32), CTX, 2, [], [], [])
