"""One-hot encodings of recipe schemas (seed 000, Appendix B).

A recipe encodes one field, or several joined by a CombinationType (``content_encoding``).

A BucketedType with boundaries b1 < ... < bk has 1 + k buckets, in this order:
OOV, [b1, b2), ..., [b(k-1), bk), [bk, inf). Values below b1, and missing values, go to OOV,
which the device adds itself: Appendix B counts (1 + 7) buckets for 7 boundaries.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from itertools import pairwise

import numpy as np
import numpy.typing as npt

from privacy import limits
from privacy.heavy_hitters import POPLAR1_WORDS, Poplar1WordsType
from privacy.ngrams import HashedNgramType, PrefixTreeType, SchemaError
from privacy.schema_keys import unknown_keys

OOV_LABEL = "OOV"


@dataclass(frozen=True)
class BucketedType:
    boundaries: tuple[float, ...]

    def __post_init__(self) -> None:
        if not self.boundaries:
            raise ValueError("boundaries must hold at least one number")
        # Vectorised: every shard of a round parses the recipe again, with up to MAX_BOUNDARIES numbers.
        edges = np.asarray(self.boundaries, dtype=np.float64)
        if not np.isfinite(edges).all():
            raise ValueError("boundaries must be finite numbers")
        if (np.diff(edges) <= 0).any():
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
Encoding = BucketedType | PrefixTreeType | HashedNgramType | Poplar1WordsType


def _within_magnitude(boundaries: list[int | float]) -> bool:
    """Every boundary within ±MAX_BOUNDARY_MAGNITUDE (NaN is not); an int too large for a float is not."""
    try:
        edges = np.asarray(boundaries, dtype=np.float64)
    except OverflowError:
        return False
    return bool((np.abs(edges) <= limits.MAX_BOUNDARY_MAGNITUDE).all())


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


# The keys each dataType may carry (docs/formats.md); any other key is refused.
SCHEMA_KEYS: dict[str, tuple[str, ...]] = {
    "BucketedType": ("dataType", "boundaries"),
    "PrefixTree": ("dataType", "tree", "tokens", "unit"),
    "HashedNgrams": ("dataType", "length", "tokens", "rows", "columns", "unit"),
    "CombinationType": ("dataType", "structure"),
    POPLAR1_WORDS: ("dataType", "bits", "alphabet", "zScore", "maxPerLevel"),
}


def encoding_from_json(schema: dict) -> Encoding:
    """The encoding a recipe's dataTypeContent entry names; SchemaError says which key is wrong and why."""
    if not isinstance(schema, dict):
        raise SchemaError("dataType", "must be an object")
    data_type = schema.get("dataType")
    if not isinstance(data_type, str) or data_type not in SCHEMA_KEYS or data_type == "CombinationType":
        raise SchemaError("dataType", "must be one of BucketedType, PrefixTree, HashedNgrams, Poplar1Words")
    for key, message in unknown_keys(schema, SCHEMA_KEYS[data_type]).items():
        raise SchemaError(key, message)
    if data_type == "BucketedType":
        boundaries = schema.get("boundaries")
        if not isinstance(boundaries, list) or not boundaries:
            raise SchemaError("boundaries", "must be a non-empty list of numbers")
        if len(boundaries) > limits.MAX_BOUNDARIES:
            raise SchemaError("boundaries", f"at most {limits.MAX_BOUNDARIES:,} boundaries")
        # JSON gives exact ints and floats: one set of types checks them all at once; anything else
        # (a subclass, a bool, a string) takes the element-wise check.
        if not set(map(type, boundaries)) <= {int, float} and any(
            isinstance(b, bool) or not isinstance(b, (int, float)) for b in boundaries
        ):
            raise SchemaError("boundaries", "every boundary must be a number")
        if not _within_magnitude(boundaries):
            raise SchemaError("boundaries", f"every boundary must lie within ±{limits.MAX_BOUNDARY_MAGNITUDE:g}")
        try:
            return BucketedType(tuple(float(b) for b in boundaries))
        except ValueError as error:
            raise SchemaError("boundaries", str(error)) from error
    if data_type == "PrefixTree":
        return PrefixTreeType.from_json(schema)
    if data_type == "HashedNgrams":
        return HashedNgramType.from_json(schema)
    if data_type == POPLAR1_WORDS:
        return Poplar1WordsType.from_json(schema)
    raise SchemaError("dataType", "must be one of BucketedType, PrefixTree, HashedNgrams, Poplar1Words")


@dataclass(frozen=True)
class CombinationType:
    """The joint one-hot encoding of several fields (Appendix B: (1 + 7) x (1 + 3 (1 + 1 + 9)) bins).

    Bucket (i_1, ..., i_k) of parts with sizes s_1, ..., s_k is the mixed-radix index
    ((i_1 s_2 + i_2) s_3 + ...) + i_k: the last field varies fastest.
    """

    parts: tuple[tuple[str, Encoding], ...]

    @property
    def fields(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.parts)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(encoding.size for _, encoding in self.parts)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def labels(self) -> list[str]:
        return [" × ".join(combo) for combo in itertools.product(*(e.labels for _, e in self.parts))]

    def combine(self, indices: list[npt.NDArray[np.int64]]) -> npt.NDArray[np.int64]:
        """The joint bucket of each device from its bucket in every part, in ``parts`` order."""
        return np.ravel_multi_index(tuple(indices), self.shape).astype(np.int64)


def content_encoding(data_types: dict) -> tuple[tuple[str, ...], Encoding | CombinationType]:
    """The fields a recipe's dataTypeContent encodes, in order, and their encoding.

    Either one field with its schema, or Figure 4's form: one entry per field plus one
    CombinationType entry whose ``structure`` names them all. SchemaError's key is a dotted path
    under dataTypeContent.
    """
    if not isinstance(data_types, dict) or not data_types:
        raise SchemaError("", "must name the field(s) to encode")
    combinations = [n for n, s in data_types.items() if isinstance(s, dict) and s.get("dataType") == "CombinationType"]
    if not combinations:
        if len(data_types) != 1:
            raise SchemaError("", "several fields must be joined by one CombinationType entry")
        ((field, schema),) = data_types.items()
        return (field,), _within_buckets(_part(field, schema), field)
    if len(combinations) > 1:
        raise SchemaError(combinations[1], "only one CombinationType entry is allowed")
    name = combinations[0]
    for key, message in unknown_keys(data_types[name], SCHEMA_KEYS["CombinationType"]).items():
        raise SchemaError(f"{name}.{key}", message)
    structure = data_types[name].get("structure")
    if not isinstance(structure, list) or len(structure) < 2 or not all(isinstance(f, str) for f in structure):
        raise SchemaError(f"{name}.structure", "must list at least two fields")
    if len(set(structure)) != len(structure):
        raise SchemaError(f"{name}.structure", "lists a field twice")
    if set(structure) != set(data_types) - {name}:
        raise SchemaError(f"{name}.structure", "must list exactly the other fields of dataTypeContent")
    parts = tuple((f, _part(f, data_types[f])) for f in structure)
    for f, part in parts:
        if isinstance(part, Poplar1WordsType):
            raise SchemaError(
                f"{f}.dataType", "a Poplar1Words field is asked alone: its walk counts words, not buckets"
            )
    joint = CombinationType(parts)
    return tuple(structure), _within_buckets(joint, name)


def _within_buckets(encoding: Encoding | CombinationType, key: str) -> Encoding | CombinationType:
    if encoding.size > limits.MAX_BUCKETS:
        raise SchemaError(key, f"{encoding.size:,} buckets; at most {limits.MAX_BUCKETS:,} (privacy.limits)")
    return encoding


def _part(field: str, schema: dict) -> Encoding:
    try:
        return encoding_from_json(schema)
    except SchemaError as error:
        raise SchemaError(f"{field}.{error.key}", str(error)) from error
