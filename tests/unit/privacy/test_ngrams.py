"""The n-gram encodings of discovery: Figure 4's prefix tree, windows, the device's choice, the sketch."""

from __future__ import annotations

import math

import numpy as np
import pytest

from privacy.encoding import encoding_from_json
from privacy.ngrams import (
    END_SYMBOL,
    OOV_SYMBOL,
    HashedNgramType,
    PrefixTreeType,
    SchemaError,
    Sequences,
    choose_per_device,
    expected_counts,
    windows,
)

FIGURE_4 = {
    "dataType": "PrefixTree",
    "tree": {"root": ["null", "hello", "i"], "hello": ["null", "world"], "i": ["went", "got"]},
    "tokens": ["a", "and", "got", "hello", "home", "i", "school", "went", "world"],
}


def sequences_of(devices: list[list[list[str]]], tokens: list[str]) -> Sequences:
    """CSR sequences from nested lists: devices -> phrases -> words (unknown words become OOV)."""
    index = {t: i for i, t in enumerate(tokens)}
    phrases = [p for d in devices for p in d]
    return Sequences(
        device_start=np.concatenate([[0], np.cumsum([len(d) for d in devices])]).astype(np.int64),
        sequence_start=np.concatenate([[0], np.cumsum([len(p) for p in phrases])]).astype(np.int64),
        symbols=np.array([index.get(w, OOV_SYMBOL) for p in phrases for w in p], dtype=np.int64),
    )


def test_figure_4_has_one_plus_three_times_eleven_buckets() -> None:
    tree = PrefixTreeType.from_json(FIGURE_4)
    assert tree.leaves == (("hello", "world"), ("i", "went"), ("i", "got"))
    assert tree.complete == (("hello",),)
    assert tree.size == 1 + 3 * (1 + 1 + 9)
    assert tree.labels[:4] == ["OOV", "hello world </s>", "hello world OOV", "hello world a"]
    assert tree.labels[-1] == "i got world"


def test_the_tree_round_trips_through_its_json() -> None:
    tree = PrefixTreeType.from_json(FIGURE_4)
    assert PrefixTreeType.from_json(tree.to_json()) == tree


def test_round_one_is_the_vocabulary_plus_oov() -> None:
    tree = PrefixTreeType.from_json({"tree": {"root": []}, "tokens": ["a", "b"]})
    assert (tree.length, tree.size, tree.labels) == (1, 3, ["OOV", "a", "b"])


@pytest.mark.parametrize(
    ("schema", "key"),
    [
        ({"tree": {"root": ["x"]}, "tokens": ["a"]}, "tokens"),
        ({"tree": {"root": ["a", "b"], "a": ["b"]}, "tokens": ["a", "b"]}, "tree"),  # leaves of two lengths
        ({"tree": {"root": ["a"], "zz": ["a"]}, "tokens": ["a"]}, "tree"),  # unreachable node
        ({"tree": {"root": []}, "tokens": ["a", "a"]}, "tokens"),
        ({"tree": {"root": []}, "tokens": ["ab"], "unit": "character"}, "tokens"),
        ({"tree": {"root": []}, "tokens": ["a"], "unit": "syllable"}, "unit"),
        ({"tree": [], "tokens": ["a"]}, "tree"),
    ],
)
def test_bad_prefix_trees_name_the_key_at_fault(schema: dict, key: str) -> None:
    with pytest.raises(SchemaError) as refused:
        encoding_from_json({"dataType": "PrefixTree", **schema})
    assert refused.value.key == key


def test_windows_pad_each_phrase_with_its_end_marker() -> None:
    seqs = sequences_of([[["i", "went", "home"]], [["hello"]]], FIGURE_4["tokens"])
    found = windows(seqs, 3)
    # "i went home </s>" holds two 3-grams; "hello </s>" none.
    assert found.device.tolist() == [0, 0]
    assert found.symbols.tolist() == [[5, 7, 4], [7, 4, END_SYMBOL]]
    assert windows(seqs, 1).symbols[:, 0].tolist() == [5, 7, 4, 3]  # no window of the end marker alone
    assert windows(seqs, 2, anchored=True).symbols.tolist() == [[5, 7], [3, END_SYMBOL]]


def test_each_window_lands_in_its_leafs_bucket_or_oov() -> None:
    tree = PrefixTreeType.from_json(FIGURE_4)
    seqs = sequences_of([[["i", "went", "home"]], [["hello", "world"]], [["a", "zebra", "a"]]], tree.tokens)
    found = windows(seqs, 3)
    buckets, eligible = tree.buckets_of(found.symbols)
    labels = [tree.labels[b] for b in buckets]
    # "went home </s>" and both 3-grams of "a zebra a" have no leaf as their prefix.
    assert labels == ["i went home", "OOV", "hello world </s>", "OOV", "OOV"]
    assert eligible.tolist() == [True, False, True, False, False]


def test_a_device_picks_uniformly_among_its_eligible_ngrams() -> None:
    # One device typing "i went home", "i got home" and "i went school" many times over: three
    # eligible 3-grams, each chosen with probability 1/3 (plus ineligible windows never chosen).
    tree = PrefixTreeType.from_json(FIGURE_4)
    device = [["i", "went", "home"], ["i", "got", "home"], ["i", "went", "school"]]
    devices = 30_000
    seqs = sequences_of([device] * devices, tree.tokens)
    found = windows(seqs, 3)
    buckets, eligible = tree.buckets_of(found.symbols)
    chosen = choose_per_device(devices, found.device, eligible, buckets, np.random.default_rng(7))
    counts = np.bincount(chosen, minlength=tree.size)
    for phrase in ("i went home", "i got home", "i went school"):
        observed = counts[tree.labels.index(phrase)]
        # Binomial(n, 1/3): 4 standard errors.
        assert abs(observed - devices / 3) < 4 * math.sqrt(devices * (1 / 3) * (2 / 3)), phrase
    assert counts.sum() == devices and counts[0] == 0


def test_the_expected_counts_are_the_mean_of_the_choices() -> None:
    tree = PrefixTreeType.from_json(FIGURE_4)
    devices = [[["i", "went", "home"], ["hello", "world"]], [["a", "b"]], [["i", "got", "home", "a"]]]
    seqs = sequences_of(devices, tree.tokens)
    found = windows(seqs, 3)
    buckets, eligible = tree.buckets_of(found.symbols)
    expected = expected_counts(3, found.device, eligible, buckets, tree.size)
    assert expected[tree.labels.index("i went home")] == pytest.approx(0.5)
    assert expected[tree.labels.index("hello world </s>")] == pytest.approx(0.5)
    assert expected[tree.labels.index("i got home")] == pytest.approx(1.0)
    assert expected[0] == pytest.approx(1.0)  # the second device has no eligible 3-gram


def test_the_sketch_decodes_a_planted_ngram_within_its_error() -> None:
    # Exact (noise-free) cell counts: the count-mean sketch's estimate is unbiased over the hashes,
    # so with 20,000 reports of one 2-gram among 100,000 spread over the others it lands near 20,000
    # up to the collision mass, which its standard error does not count: allow 4 x N/columns.
    tokens = tuple(f"w{i}" for i in range(30))
    sketch = HashedNgramType(tokens=tokens, length=2, rows=4, columns=1024)
    rng = np.random.default_rng(3)
    planted = np.array([[3, 4]])
    others = np.stack([rng.integers(0, 30, 80_000), rng.integers(0, 30, 80_000)], axis=1)
    reports = np.concatenate([np.repeat(planted, 20_000, axis=0), others])
    row = rng.integers(0, 4, reports.shape[0])
    counts = np.bincount(sketch.buckets_of(reports, row), minlength=sketch.size).astype(float)
    estimate, _ = sketch.decode(counts, np.zeros(sketch.size), planted)
    true = 20_000 + int((others == planted).all(axis=1).sum())
    assert abs(estimate[0] - true) < 4 * reports.shape[0] / sketch.columns
    top = sketch.top(counts, np.ones(sketch.size), 1)
    assert top[0][0] == ("w3", "w4")


def test_sketch_shapes_are_checked() -> None:
    with pytest.raises(SchemaError) as refused:
        encoding_from_json({"dataType": "HashedNgrams", "length": 2, "tokens": ["a"], "rows": 2, "columns": 1000})
    assert refused.value.key == "columns"
