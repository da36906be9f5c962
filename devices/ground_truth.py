"""Ground truth of a simulated fleet's typed n-grams, for judging discovery against the truth.

Only a simulator can do this: it reads every device's raw data. Nothing here is shown per device;
it yields fleet-wide counts, and only for fleets made by the synthetic generator.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from devices.models import Fleet
from pfs_device.encode import text_sequences
from pfs_device.streams import apply_retention
from privacy.ngrams import END_SYMBOL, PrefixTreeType, expected_counts, windows


class NoGroundTruth(ValueError):
    """The fleet's data is not simulated, or too large a key space to count exactly."""


@dataclass(frozen=True)
class NgramTruth:
    """Per distinct r-gram typed in the fleet: its symbols, the devices that typed it, and how many
    devices would report it when each reports one of its r-grams uniformly (the static estimand)."""

    tokens: tuple[str, ...]
    ngrams: npt.NDArray[np.int64]  # (distinct, r) symbols into tokens, END_SYMBOL last
    devices: npt.NDArray[np.int64]
    uniform_reports: npt.NDArray[np.float64]

    def top(self, k: int) -> list[tuple[str, ...]]:
        order = np.lexsort((np.arange(self.devices.size), -self.devices))[:k]
        return [self.labels(self.ngrams[i]) for i in order]

    def labels(self, symbols: npt.NDArray[np.int64]) -> tuple[str, ...]:
        return tuple("</s>" if s == END_SYMBOL else self.tokens[s] for s in symbols)

    def uniform_reports_of(self, ngram: tuple[str, ...]) -> float:
        index = {t: i for i, t in enumerate(self.tokens)}
        wanted = np.array([END_SYMBOL if t == "</s>" else index.get(t, -9) for t in ngram])
        match = np.flatnonzero((self.ngrams == wanted).all(axis=1))
        return float(self.uniform_reports[match[0]]) if match.size else 0.0


def _shards(fleet: Fleet, now: float):
    if fleet.seed is None:
        raise NoGroundTruth(f"fleet {fleet.name} holds no simulated data")
    for shard in fleet.shards.order_by("index"):
        yield apply_retention(shard.load_columns(), now=now)[0]


def _alphabet(fleet_tokens: list[str], unit: str) -> tuple[str, ...]:
    if unit == "word":
        return tuple(fleet_tokens)
    return tuple(sorted({c for word in fleet_tokens for c in word}))


def ngram_truth(fleet: Fleet, *, length: int, unit: str, now: float) -> NgramTruth:
    """Every r-gram the fleet typed (within retention), with its device count and uniform estimand."""
    tokens = _alphabet(fleet.vocabularies["tokens"], unit)
    base = len(tokens) + 2
    largest_shard = max(fleet.shards.values_list("size", flat=True), default=1)
    if length * np.log2(base) + np.log2(max(largest_shard, 1)) > 62:
        raise NoGroundTruth("too many possible n-grams to count exactly")
    key_parts, weights_parts = [], []
    for columns in _shards(fleet, now):
        sequences = text_sequences(columns, fleet.vocabularies["tokens"], tokens, unit)
        found = windows(sequences, length, anchored=unit == "character")
        key = np.zeros(found.device.size, dtype=np.int64)
        for column in found.symbols.T:  # r columns
            key = key * base + (column + 2)  # END -> 0; every fleet symbol is known
        per_device = np.bincount(found.device, minlength=sequences.devices)
        weights_parts.append((key, 1.0 / per_device[found.device]))
        # One count per device that typed the n-gram, however often it did.
        key_parts.append(np.unique(found.device.astype(np.int64) * base**length + key) % base**length)
    distinct_keys, devices = np.unique(np.concatenate(key_parts), return_counts=True)
    all_keys = np.concatenate([k for k, _ in weights_parts])
    all_weights = np.concatenate([w for _, w in weights_parts])
    uniform = np.bincount(np.searchsorted(distinct_keys, all_keys), weights=all_weights, minlength=distinct_keys.size)
    digits = np.stack([(distinct_keys // base**p) % base for p in reversed(range(length))], axis=1) - 2
    return NgramTruth(tokens=tokens, ngrams=digits, devices=devices, uniform_reports=uniform)


def prefix_tree_estimand(fleet: Fleet, encoding: PrefixTreeType, *, now: float) -> npt.NDArray[np.float64]:
    """Per bucket of a prefix-tree round: the devices expected to report it if every device answers."""
    total = np.zeros(encoding.size)
    for columns in _shards(fleet, now):
        sequences = text_sequences(columns, fleet.vocabularies["tokens"], encoding.tokens, encoding.unit)
        found = windows(sequences, encoding.length, anchored=encoding.unit == "character")
        bucket, eligible = encoding.buckets_of(found.symbols)
        total += expected_counts(sequences.devices, found.device, eligible, bucket, encoding.size)
    return total
