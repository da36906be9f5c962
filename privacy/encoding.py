"""One-hot encodings of recipe schemas (seed 000, Appendix B).

A BucketedType with boundaries b1 < ... < bk has 1 + k buckets, in this order:
OOV, [b1, b2), ..., [b(k-1), bk), [bk, inf). Values below b1, and missing values, go to OOV,
which the device adds itself: Appendix B counts (1 + 7) buckets for 7 boundaries.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import pairwise

import numpy as np
import numpy.typing as npt

from privacy.ngrams import HashedNgramType, PrefixTreeType, SchemaError

OOV_LABEL = "OOV"


@dataclass(frozen=True)
class BucketedType:
    boundaries: tuple[float, ...]

    def __post_init__(self) -> None:
        if not self.boundaries:
            raise ValueError("boundaries must hold at least one number")
        if not all(math.isfinite(b) for b in self.boundaries):
            raise ValueError("boundaries must be finite numbers")
        if any(b >= c for b, c in pairwise(self.boundaries)):
            raise ValueError("boundaries must be strictly increasing")

    @property
    def size(self) -> int:
        return 1 + len(self.boundaries)

    @property
    def labels(self) -> list[str]:
        edges = [_number(b) for b in self.boundaries]
        ranges = [f"[{lo}, {hi})" for lo, hi in pairwise(edges)]
        return [OOV_LABEL, *ranges, f"[{edges[-1]}, ∞)"]

    def encode(self, values: npt.NDArray[np.float64]) -> npt.NDArray[np.int64]:
        """Bucket index of each value; NaN (missing) and values below b1 go to OOV (index 0)."""
        values = np.asarray(values, dtype=np.float64)
        # searchsorted(side="right") counts the boundaries <= value: 0 means below b1 (OOV), and
        # i >= 1 means b_i <= value < b_(i+1), which is bucket i in the order above.
        index = np.searchsorted(np.asarray(self.boundaries), values, side="right")
        index[np.isnan(values)] = 0
        return index.astype(np.int64)


# What a recipe's dataTypeContent entry can name: each has ``size`` and ``labels``.
Encoding = BucketedType | PrefixTreeType | HashedNgramType


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def encoding_from_json(schema: dict) -> Encoding:
    """The encoding a recipe's dataTypeContent entry names; SchemaError says which key is wrong and why."""
    if not isinstance(schema, dict):
        raise SchemaError("dataType", "must be an object")
    data_type = schema.get("dataType")
    if data_type == "BucketedType":
        boundaries = schema.get("boundaries")
        if not isinstance(boundaries, list) or not boundaries:
            raise SchemaError("boundaries", "must be a non-empty list of numbers")
        if any(isinstance(b, bool) or not isinstance(b, (int, float)) for b in boundaries):
            raise SchemaError("boundaries", "every boundary must be a number")
        try:
            return BucketedType(tuple(float(b) for b in boundaries))
        except ValueError as error:
            raise SchemaError("boundaries", str(error)) from error
    if data_type == "PrefixTree":
        return PrefixTreeType.from_json(schema)
    if data_type == "HashedNgrams":
        return HashedNgramType.from_json(schema)
    raise SchemaError("dataType", "must be one of BucketedType, PrefixTree, HashedNgrams")
