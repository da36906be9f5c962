"""aggregation.wire_sums_jit: the compiled wire sums give what privacy.vdaf.batch's numpy ones give.

First element by element, on random limbs and on the largest limbs a lazily reduced value can hold
(where a short reduction would show), then through whole verifications against the per-report
reference path, honest, invalid and tampered reports mixed.
"""

from __future__ import annotations

import numpy as np
import pytest

from aggregation.wire_sums_jit import wire_sums
from privacy.vdaf import Prio3, Prio3Histogram, Prio3MultihotCountVec, Prio3SumVec, batch, limbs
from tests.unit.privacy.test_vdaf_batch import _assert_batch_matches_scalar, _reports


def _values(columns: limbs.Columns) -> limbs.Limbs:
    return limbs.canonical(limbs.reduce(columns.copy()))


def _limbs(rng: np.random.Generator, shape: tuple[int, ...], fill: str) -> limbs.Limbs:
    if fill == "largest":  # 2**128 - 1: every limb at 0xFFFFFFFF
        return np.full((limbs.LIMBS, *shape), 0xFFFFFFFF, dtype=np.uint64)
    return rng.integers(0, 2**32, size=(limbs.LIMBS, *shape), dtype=np.uint64)


@pytest.mark.parametrize("fill", ["random", "largest"])
@pytest.mark.parametrize(("reports", "length", "chunk", "calls"), [(128, 1032, 34, 31), (1, 7, 3, 3), (5, 40, 6, 7)])
def test_the_compiled_sums_equal_the_numpy_sums(fill: str, reports: int, length: int, chunk: int, calls: int) -> None:
    rng = np.random.default_rng(length * 1000 + reports)
    x = _limbs(rng, (reports, length), fill)
    inner, r = _limbs(rng, (reports, calls), fill), _limbs(rng, (reports, calls), fill)
    x[:, 0, : min(3, length)] = 0  # zeros beside the others
    compiled, numpy = wire_sums(x, inner, r, chunk, calls), batch.wire_sums(x, inner, r, chunk, calls)
    for got, want in zip(compiled, numpy, strict=True):
        assert got.shape == want.shape == (8, chunk, reports)
        np.testing.assert_array_equal(_values(got), _values(want))


def test_a_measurement_longer_than_the_calls_is_refused() -> None:
    x = np.zeros((limbs.LIMBS, 2, 10), dtype=np.uint64)
    r = np.zeros((limbs.LIMBS, 2, 3), dtype=np.uint64)
    with pytest.raises(ValueError, match="calls \\* chunk"):
        wire_sums(x, r, r, 3, 3)


@pytest.mark.parametrize(
    "vdaf",
    [
        Prio3MultihotCountVec(length=40, max_weight=5, chunk_length=6),
        Prio3MultihotCountVec(length=130, max_weight=130, chunk_length=12, shares=3),
        Prio3Histogram(length=33, chunk_length=5),
        Prio3SumVec(length=5, max_measurement=1000, chunk_length=8),
    ],
    ids=lambda vdaf: f"{type(vdaf).__name__}-{vdaf.flp.MEAS_LEN}-{vdaf.SHARES}",
)
def test_verification_with_the_compiled_sums_agrees_with_the_per_report_path(vdaf: Prio3) -> None:
    rng = np.random.default_rng(vdaf.flp.MEAS_LEN * 10 + vdaf.SHARES + 1)
    _assert_batch_matches_scalar(vdaf, _reports(vdaf, rng, 24), rng.bytes(32), sums=wire_sums)
