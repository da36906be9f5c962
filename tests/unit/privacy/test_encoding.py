from __future__ import annotations

import numpy as np
import pytest

from privacy.encoding import BucketedType, encoding_from_json
from privacy.ngrams import SchemaError


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


@pytest.mark.parametrize(
    ("boundaries", "message"),
    [
        ([1, True, 3], "every boundary must be a number"),
        ([1, "2", 3], "every boundary must be a number"),
        ([1, None], "every boundary must be a number"),
        ([1.0, float("nan")], "within"),
        ([1, 10**400], "within"),  # an int too large for a float
        ([-(10**13), 1], "within"),
        ([1.0, 2.0, 2.0], "strictly increasing"),
        ([3, 2], "strictly increasing"),
    ],
)
def test_a_bucketed_schema_refuses_each_bad_boundary_with_its_reason(boundaries: list, message: str) -> None:
    with pytest.raises(SchemaError, match=message) as refused:
        encoding_from_json({"dataType": "BucketedType", "boundaries": boundaries})
    assert refused.value.key == "boundaries"


def test_a_bucketed_schema_takes_ints_floats_and_float_subclasses() -> None:
    encoding = encoding_from_json({"dataType": "BucketedType", "boundaries": [1, 2.5, np.float64(4.0)]})
    assert encoding == BucketedType((1.0, 2.5, 4.0))
