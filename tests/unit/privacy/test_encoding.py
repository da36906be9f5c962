from __future__ import annotations

import numpy as np
import pytest

from privacy.encoding import BucketedType


def test_seven_boundaries_give_oov_plus_seven_buckets_in_order() -> None:
    encoding = BucketedType((20, 30, 40, 50, 60, 70, 80))
    assert encoding.size == 8  # (1 + 7), as Appendix B of seed 000 counts
    assert encoding.labels == ["OOV", "[20, 30)", "[30, 40)", "[40, 50)", "[50, 60)", "[60, 70)", "[70, 80)", "[80, ∞)"]


def test_values_fall_into_half_open_buckets_and_missing_or_small_values_into_oov() -> None:
    encoding = BucketedType((20, 30, 40, 50, 60, 70, 80))
    values = np.array([np.nan, 5, 19.99, 20, 29.9, 30, 79.9, 80, 120])
    assert encoding.encode(values).tolist() == [0, 0, 0, 1, 1, 2, 6, 7, 7]


@pytest.mark.parametrize("boundaries", [(), (3, 2), (1, 1), (1, float("inf"))])
def test_rejects_empty_non_increasing_or_infinite_boundaries(boundaries: tuple) -> None:
    with pytest.raises(ValueError, match="boundaries"):
        BucketedType(boundaries)
