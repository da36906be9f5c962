"""aggregation.flp_query_jit: the compiled FLP query gives what privacy.vdaf.batch's numpy one gives.

First on random limbs and on the largest limbs a lazily reduced value can hold (where a short
reduction would show), for each circuit's shape, with a query point among the roots of unity
refused; then through whole verifications against the per-report reference path, honest, invalid
and tampered reports mixed.
"""

from __future__ import annotations

import numpy as np
import pytest

from aggregation.flp_query_jit import flp_query
from privacy.vdaf import Prio3, Prio3Histogram, Prio3MultihotCountVec, Prio3SumVec, batch, limbs
from privacy.vdaf.field import Field128
from tests.unit.privacy.test_vdaf_batch import _assert_batch_matches_scalar, _reports

CIRCUITS = [
    Prio3MultihotCountVec(length=1024, max_weight=189, chunk_length=34),  # the bench's and the demo's shape
    Prio3MultihotCountVec(length=40, max_weight=5, chunk_length=6),
    Prio3MultihotCountVec(length=130, max_weight=130, chunk_length=12, shares=3),
    Prio3Histogram(length=33, chunk_length=5),
    Prio3SumVec(length=5, max_measurement=1000, chunk_length=8),
    Prio3Histogram(length=2, chunk_length=1),  # one slot per call
]


def _ids(vdaf: Prio3) -> str:
    return f"{type(vdaf).__name__}-{vdaf.flp.MEAS_LEN}-{vdaf.SHARES}"


def _limbs(rng: np.random.Generator, reports: int, length: int, fill: str) -> limbs.Limbs:
    if fill == "largest":  # 2**128 - 1: every limb at 0xFFFFFFFF
        return np.full((limbs.LIMBS, reports, length), 0xFFFFFFFF, dtype=np.uint64)
    values = rng.integers(0, 2**32, size=(limbs.LIMBS, reports, length), dtype=np.uint64)
    values[:, 0, : min(3, length)] = 0  # zeros beside the others
    return values


def _canonical(values: limbs.Limbs) -> limbs.Limbs:
    return limbs.canonical(values)


@pytest.mark.parametrize("fill", ["random", "largest"])
@pytest.mark.parametrize("vdaf", CIRCUITS, ids=_ids)
def test_the_compiled_query_equals_the_numpy_query(fill: str, vdaf: Prio3) -> None:
    flp, circuit = vdaf.flp, batch.QueryCircuit.of(vdaf)
    reports = 5 if fill == "largest" else 37
    rng = np.random.default_rng(flp.MEAS_LEN * 10 + vdaf.SHARES)
    x, proof = _limbs(rng, reports, flp.MEAS_LEN, fill), _limbs(rng, reports, flp.PROOF_LEN, fill)
    r, q = _limbs(rng, reports, flp.JOINT_RAND_LEN, fill), _limbs(rng, reports, flp.QUERY_RAND_LEN, fill)
    compiled, refused = flp_query(circuit, x, proof, r, q)
    numpy, numpy_refused = batch.flp_query(circuit, x, proof, r, q)
    assert compiled.shape == numpy.shape == (limbs.LIMBS, reports, flp.VERIFIER_LEN)
    np.testing.assert_array_equal(compiled, _canonical(compiled))  # below p, as encoded
    np.testing.assert_array_equal(compiled, _canonical(numpy))
    np.testing.assert_array_equal(refused, numpy_refused)


@pytest.mark.parametrize("vdaf", CIRCUITS[3:5], ids=_ids)
def test_a_query_point_among_the_roots_of_unity_is_refused(vdaf: Prio3) -> None:
    # Section 7.3.4: t with t**p == 1 would reveal a wire value. t is the query randomness's last
    # element, which the XOF derives: inject the p-th roots (and a value next to one) directly.
    flp, circuit = vdaf.flp, batch.QueryCircuit.of(vdaf)
    rng = np.random.default_rng(3)
    roots = Field128.nth_root_powers(circuit.points)
    points = [roots[1], roots[-1], 1, roots[1] + 1, 2]
    x, proof = _limbs(rng, len(points), flp.MEAS_LEN, "random"), _limbs(rng, len(points), flp.PROOF_LEN, "random")
    r = _limbs(rng, len(points), flp.JOINT_RAND_LEN, "random")
    q = _limbs(rng, len(points), flp.QUERY_RAND_LEN, "random")
    q[:, :, -1] = limbs.from_ints(points)
    _, refused = flp_query(circuit, x, proof, r, q)
    assert refused.tolist() == [True, True, True, False, False]
    assert batch.flp_query(circuit, x, proof, r, q)[1].tolist() == refused.tolist()


def test_a_measurement_longer_than_the_calls_is_refused() -> None:
    circuit = batch.QueryCircuit(chunk=3, calls=3, shares=2, outputs=1, affine=None)
    x = np.zeros((limbs.LIMBS, 2, 10), dtype=np.uint64)
    with pytest.raises(ValueError, match="calls \\* chunk"):
        flp_query(circuit, x, x, x, x)


@pytest.mark.parametrize("vdaf", CIRCUITS[1:], ids=_ids)
def test_verification_with_the_compiled_query_agrees_with_the_per_report_path(vdaf: Prio3) -> None:
    rng = np.random.default_rng(vdaf.flp.MEAS_LEN * 10 + vdaf.SHARES + 1)
    _assert_batch_matches_scalar(vdaf, _reports(vdaf, rng, 24), rng.bytes(32), query=flp_query)
