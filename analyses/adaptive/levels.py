"""Reading a level and building the next one's buckets: numpy only, no database.

A level is what one round of an adaptive run taught: the kept n-grams of a prefix tree, or the
buckets of a refinement to split. Everything here works on a release's content (plain JSON) and
the spec's numbers, so it is tested without a database (tests/unit/test_adaptive_levels.py).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from privacy.encoding import BucketedType
from privacy.ngrams import END_LABEL, OOV_LABEL, PrefixTreeType


def pooled(content: dict[str, Any]) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], int]:
    """Estimates and variances summed over a release's released batches (cohorts), and their reports."""
    batches = [b for b in content["batches"] if not b["suppressed"]]
    if not batches:
        size = len(content["buckets"])
        return np.zeros(size), np.full(size, np.inf), 0
    estimates = np.sum([b["estimates"] for b in batches], axis=0)
    variances = np.sum([np.square(b["standard_errors"]) for b in batches], axis=0)
    return estimates, variances, sum(b["reports"] for b in batches)


def clears(
    estimates: npt.NDArray[np.float64],
    errors: npt.NDArray[np.float64],
    candidates: npt.NDArray[np.int64],
    *,
    z_score: float | None,
    max_per_level: int | None,
) -> npt.NDArray[np.int64]:
    """Indices of the candidates that clear the threshold, largest estimate first, at most ``max_per_level``."""
    chosen = candidates
    if z_score is not None:
        chosen = chosen[estimates[chosen] > z_score * errors[chosen]]
    chosen = chosen[np.argsort(-estimates[chosen], kind="stable")]
    return chosen[:max_per_level] if max_per_level is not None else chosen


def ngram_candidates(tree: PrefixTreeType) -> npt.NDArray[np.int64]:
    """Every bucket naming an n-gram: not the global OOV, nor a leaf's unknown word."""
    return np.array([i for i in range(1, tree.size) if tree.bucket_ngram(i)[1] != OOV_LABEL], dtype=np.int64)


def ngram_level(
    schema: dict[str, Any],
    estimates: npt.NDArray[np.float64],
    errors: npt.NDArray[np.float64],
    *,
    z_score: float | None,
    max_per_level: int | None,
) -> dict[str, Any]:
    """The n-grams of a prefix-tree round that clear the threshold, each with its estimate."""
    tree = PrefixTreeType.from_json(schema)
    labels = np.array(tree.labels, dtype=object)
    kept = []
    for i in clears(estimates, errors, ngram_candidates(tree), z_score=z_score, max_per_level=max_per_level):
        prefix, extension = tree.bucket_ngram(int(i))
        kept.append(
            {
                "ngram": str(labels[i]),
                "tokens": [*prefix, extension],
                "end": extension == END_LABEL,
                "estimate": float(estimates[i]),
                "standard_error": float(errors[i]),
            }
        )
    return {"length": tree.length, "leaves": len(tree.leaves), "tree": schema["tree"], "kept": kept}


def next_ngram_tree(last: dict[str, Any], vocabulary: list[str], unit: dict[str, str]) -> PrefixTreeType:
    """The prefix tree of the next round: the extensions of the n-grams ``last`` kept."""
    previous = PrefixTreeType.from_json({"tree": last["tree"], "tokens": vocabulary, **unit})
    leaves = tuple(tuple(k["tokens"]) for k in last["kept"] if not k["end"])
    ended = tuple(tuple(k["tokens"][:-1]) for k in last["kept"] if k["end"])
    # Complete phrases stay in the tree (as "null" children) only under a prefix still in use.
    complete = tuple(c for c in (*previous.complete, *ended) if any(leaf[: len(c)] == c for leaf in leaves))
    tree = PrefixTreeType(tokens=previous.tokens, leaves=leaves, complete=complete, unit=previous.unit)
    return PrefixTreeType.from_json(tree.to_json())  # the canonical (breadth-first) order of leaves


def refinement_level(
    schema: dict[str, Any],
    estimates: npt.NDArray[np.float64],
    errors: npt.NDArray[np.float64],
    *,
    min_width: float,
    z_score: float | None,
    max_buckets: int | None,
) -> dict[str, Any]:
    """The histogram of a refinement round and the buckets that clear the threshold and can be halved."""
    boundaries = [float(b) for b in schema["boundaries"]]
    encoding = BucketedType(tuple(boundaries))
    # Finite buckets [b_i, b_(i+1)) are buckets 1 .. k-1; OOV (0) and [b_k, inf) cannot be halved.
    finite = np.arange(1, len(boundaries), dtype=np.int64)
    wide = np.array([boundaries[i] - boundaries[i - 1] >= 2 * min_width for i in finite], dtype=bool)
    # maxBuckets caps the next round's buckets: each split adds one.
    room = None if max_buckets is None else max(max_buckets - encoding.size, 0)
    split = sorted(int(i) for i in clears(estimates, errors, finite[wide], z_score=z_score, max_per_level=room))
    buckets = [
        {"bucket": label, "estimate": float(e), "standard_error": float(s)}
        for label, e, s in zip(encoding.labels, estimates, errors, strict=True)
    ]
    return {"boundaries": boundaries, "histogram": buckets, "split": [encoding.labels[i] for i in split]}


def next_refinement_boundaries(last: dict[str, Any]) -> list[float]:
    """The next round's boundaries: every split bucket of ``last`` halved."""
    boundaries = last["boundaries"]
    labels = BucketedType(tuple(boundaries)).labels
    midpoints = [
        (boundaries[i - 1] + boundaries[i]) / 2 for i in range(1, len(boundaries)) if labels[i] in last["split"]
    ]
    return sorted(boundaries + midpoints)


def walk_levels(content: dict[str, Any], round_id: int) -> list[dict[str, Any]]:
    """A heavy-hitters walk's levels, from its round's release (analyses.services.releases.walk_release_content),
    in a discovery level's shape: each kept prefix as an n-gram of characters, one ending its word
    with END (so the run's tree and tables read both kinds alike)."""
    walk = content["walk"]
    records = []
    for level in walk["levels"]:
        kept = [
            {
                "ngram": k["prefix"] + (f" {END_LABEL}" if k["end"] else ""),
                "tokens": [*k["prefix"], *([END_LABEL] if k["end"] else [])],
                "end": k["end"],
                "estimate": float(k["count"]),
                "standard_error": walk["standard_error"],
            }
            for k in level["kept"]
        ]
        records.append(
            {
                "length": level["length"],
                "round": round_id,
                "buckets": level["asked"],
                "leaves": sum(1 for k in records[-1]["kept"] if not k["end"]) if records else 1,
                "reports": level["reports"],
                "threshold": level["threshold"],
                "epsilon0": None,
                "epsilon": content["epsilon"],
                "delta": content["delta"],
                "kept": kept,
            }
        )
    return records


def walk_stop_reason(records: list[dict[str, Any]], bits: int) -> str:
    """Why a walk ended, in words."""
    most = bits // 8
    if records and records[-1]["length"] >= most:
        return f"The walk spelled words up to {most} bytes: all {most} levels ran."
    if not records:
        return "The walk asked no level."
    return f"The walk ended after {records[-1]['length']} of {most} levels: no prefix left to extend cleared the threshold."
