"""Reading a level and building the next round's buckets: pure functions, no database."""

from __future__ import annotations

import numpy as np
import pytest

from analyses.adaptive import levels
from privacy.ngrams import PrefixTreeType


def _batch(estimates, errors, reports, suppressed=False) -> dict:
    return {"estimates": estimates, "standard_errors": errors, "reports": reports, "suppressed": suppressed}


def test_pooled_sums_released_cohorts_and_skips_suppressed_ones() -> None:
    content = {
        "buckets": ["a", "b"],
        "batches": [
            _batch([1.0, 2.0], [3.0, 4.0], 10),
            _batch([5.0, 6.0], [0.0, 0.0], 3, suppressed=True),
            _batch([1.0, 1.0], [4.0, 3.0], 20),
        ],
    }
    estimates, variances, reports = levels.pooled(content)
    assert estimates.tolist() == [2.0, 3.0]
    assert variances.tolist() == [25.0, 25.0]
    assert reports == 30


def test_pooled_with_nothing_released_knows_nothing() -> None:
    estimates, variances, reports = levels.pooled({"buckets": ["a", "b", "c"], "batches": [_batch([9], [0], 1, True)]})
    assert estimates.tolist() == [0.0, 0.0, 0.0] and np.isinf(variances).all() and reports == 0


def test_clears_keeps_what_beats_z_standard_errors_largest_first_and_caps() -> None:
    estimates = np.array([10.0, 50.0, 30.0, 5.0])
    errors = np.array([1.0, 10.0, 10.0, 10.0])
    candidates = np.arange(4, dtype=np.int64)
    assert levels.clears(estimates, errors, candidates, z_score=2.0, max_per_level=None).tolist() == [1, 2, 0]
    assert levels.clears(estimates, errors, candidates, z_score=2.0, max_per_level=2).tolist() == [1, 2]
    assert levels.clears(estimates, errors, candidates, z_score=None, max_per_level=1).tolist() == [1]


def test_refinement_splits_only_buckets_that_clear_and_are_wide_enough() -> None:
    schema = {"dataType": "BucketedType", "boundaries": [0, 10, 12, 40]}
    # buckets: OOV, [0,10), [10,12), [12,40), [40, inf)
    estimates = np.array([0.0, 100.0, 100.0, 100.0, 100.0])
    errors = np.ones(5)
    level = levels.refinement_level(schema, estimates, errors, min_width=2.0, z_score=2.0, max_buckets=None)
    assert level["split"] == ["[0, 10)", "[12, 40)"]  # [10,12) is narrower than twice the minimum width
    assert levels.next_refinement_boundaries(level) == [0.0, 5.0, 10.0, 12.0, 26.0, 40.0]


def test_refinement_respects_the_bucket_cap() -> None:
    schema = {"dataType": "BucketedType", "boundaries": [0, 10, 20, 30]}
    estimates, errors = np.array([0.0, 30.0, 20.0, 10.0, 0.0]), np.ones(5)
    level = levels.refinement_level(schema, estimates, errors, min_width=1.0, z_score=None, max_buckets=6)
    assert level["split"] == ["[0, 10)"]  # 5 buckets now, room for one more


@pytest.mark.parametrize("z_score", [None, 3.0])
def test_an_ngram_level_keeps_the_clearing_extensions_and_the_next_tree_extends_them(z_score) -> None:
    tree = PrefixTreeType(tokens=("hello", "world"))
    estimates = np.zeros(tree.size)
    errors = np.ones(tree.size)
    wanted = [i for i in range(1, tree.size) if tree.bucket_ngram(i)[1] == "hello"]
    estimates[wanted] = 50.0
    level = levels.ngram_level(tree.to_json(), estimates, errors, z_score=z_score, max_per_level=1)
    assert [k["tokens"] for k in level["kept"]] == [["hello"]]
    assert level["length"] == 1
    following = levels.next_ngram_tree(level, ["hello", "world"], {})
    assert following.length == 2 and following.leaves == (("hello",),)
