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


@dataclass(frozen=True)
class WordTruth:
    """Per distinct word typed in the fleet (its UTF-8 cut to ``cut`` bytes, as a walk spells it): the
    devices that typed it, and how many would report it when each reports one of its typed words
    uniformly (a heavy-hitters walk's estimand, privacy.heavy_hitters)."""

    words: tuple[str, ...]
    devices: npt.NDArray[np.int64]
    uniform_reports: npt.NDArray[np.float64]  # the sum over devices of p_d, the chance device d reports it
    uniform_squares: npt.NDArray[np.float64]  # the sum of p_d squared

    def choice_variance(self, word: str, rate: float) -> float:
        """The variance of the reports naming ``word`` when each device answers with probability
        ``rate`` and reports one of its words uniformly: the sum of q p_d (1 - q p_d)."""
        index = {w: i for i, w in enumerate(self.words)}.get(word)
        if index is None:
            return 0.0
        return rate * float(self.uniform_reports[index]) - rate**2 * float(self.uniform_squares[index])

    def top(self, k: int) -> list[str]:
        order = np.lexsort((np.arange(self.devices.size), -self.devices))[:k]
        return [self.words[i] for i in order]

    def of(self, word: str) -> tuple[int, float]:
        """(devices, uniform estimand) of a word; (0, 0.0) for one nobody typed."""
        index = {w: i for i, w in enumerate(self.words)}.get(word)
        return (0, 0.0) if index is None else (int(self.devices[index]), float(self.uniform_reports[index]))


def word_truth(fleet: Fleet, *, cut: int, now: float) -> WordTruth:
    """Every word the fleet typed (within retention), cut to ``cut`` bytes, with its devices and estimand."""
    fleet_tokens = fleet.vocabularies["tokens"]
    cut_words = [w.encode()[:cut].decode(errors="ignore") for w in fleet_tokens]
    words = tuple(sorted(set(cut_words)))
    word_of_token = np.array([words.index(w) for w in cut_words], dtype=np.int64) if words else np.zeros(0, np.int64)
    devices = np.zeros(len(words), dtype=np.int64)
    uniform, squares = np.zeros(len(words)), np.zeros(len(words))
    for columns in _shards(fleet, now):
        phrase_start, token_start, typed = columns["phrase_start"], columns["token_start"], columns["tokens"]
        first, last = token_start[phrase_start[:-1]], token_start[phrase_start[1:]]
        held = last - first
        device = np.repeat(np.arange(held.size), held)
        start = int(token_start[phrase_start[0]])  # every device's words, one after the other
        word = word_of_token[typed[start : start + int(held.sum())]]
        # Per (device, word): how often the device typed it, so p_d = that / its words.
        pairs, typed_times = np.unique(device * len(words) + word, return_counts=True)
        pair_word, pair_device = pairs % len(words), pairs // len(words)
        p = typed_times / held[pair_device]
        uniform += np.bincount(pair_word, weights=p, minlength=len(words))
        squares += np.bincount(pair_word, weights=p * p, minlength=len(words))
        # One count per device that typed the word, however often it did.
        devices += np.bincount(pair_word, minlength=len(words))
    return WordTruth(words=words, devices=devices, uniform_reports=uniform, uniform_squares=squares)
