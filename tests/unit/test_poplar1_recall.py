"""The pure parts of bench/poplar1_recall.py: the word encoding, the simulated counts against real Poplar1, the accounting."""

from __future__ import annotations

import importlib.util
import random
import sys
from pathlib import Path

import numpy as np
import pytest

from devices.synthetic import TOKENS
from privacy.shuffling import amplified_epsilon
from privacy.vdaf.poplar1 import Poplar1

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _load(name: str):  # noqa: ANN202 - a module loaded from bench/, which is no package
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


recall_bench = _load("poplar1_recall")
poplar1_bench = _load("poplar1")

WORDS = ["hello", "world", "hello", "help", "i", "together", "hello", "world"]


def test_every_demo_word_round_trips_through_its_64_bit_code() -> None:
    codes = [recall_bench.encode_word(word) for word in TOKENS]

    assert all(0 <= code < 2**64 for code in codes)
    assert len(set(codes)) == len(TOKENS)
    assert [recall_bench.decode_word(code) for code in codes] == list(TOKENS)


def test_a_word_longer_than_8_bytes_is_cut_to_its_first_8() -> None:
    assert recall_bench.decode_word(recall_bench.encode_word("sentences")) == "sentence"
    assert recall_bench.encode_word("hé") == int.from_bytes("hé".encode().ljust(8, b"\0"), "big")


def test_prefix_bits_reads_the_most_significant_bit_first() -> None:
    assert recall_bench.prefix_bits(0b1011, 4) == (True, False, True, True)
    letter = tuple(b == "1" for b in f"{ord('i'):08b}")
    measurement = recall_bench.prefix_bits(recall_bench.encode_word("i"), 64)

    assert measurement[:8] == letter  # the word's first byte leads the 64-bit string
    assert measurement[8:] == (False,) * 56  # then the padding
    assert recall_bench.prefix_bits(recall_bench.encode_word("i") >> 56, 8) == letter


def test_simulated_counts_equal_what_poplar1_aggregates_from_real_reports() -> None:
    vdaf = Poplar1(64)
    rng = random.Random(7)
    verify_key = rng.randbytes(vdaf.VERIFY_KEY_SIZE)
    codes = np.array([recall_bench.encode_word(w) for w in WORDS], dtype=np.uint64)
    reports = poplar1_bench.shard_all(vdaf, [recall_bench.prefix_bits(int(c), 64) for c in codes], rng)

    # A walk's first two byte steps: every first byte, then the children of two of them ("h", and "w").
    first = np.arange(256, dtype=np.uint64)
    second = np.sort(((np.array([ord("h"), ord("w")], dtype=np.uint64) << np.uint64(8))[:, None] | first).ravel())
    previous = []
    for length, candidates in ((8, first), (16, second)):
        agg_param = (length - 1, [recall_bench.prefix_bits(int(p), length) for p in candidates])
        assert vdaf.is_valid(agg_param, previous)
        counts = poplar1_bench.prepare_all(vdaf, verify_key, agg_param, reports)
        previous.append(agg_param)

        assert counts == recall_bench.exact_counts(codes, length, candidates).tolist()
    assert counts[int(np.searchsorted(second, (ord("h") << 8) | ord("e")))] == 4


def test_a_walk_with_negligible_noise_finds_every_word_with_its_count() -> None:
    codes = np.array([recall_bench.encode_word(w) for w in WORDS], dtype=np.uint64)

    walk = recall_bench.poplar1_walk(
        codes, sigma=0.01, bits_per_step=8, z_score=3.0, max_per_level=100, rng=np.random.default_rng(1)
    )

    assert walk.found == {"hello": 3.0, "world": 2.0, "help": 1.0, "i": 1.0, "together": 1.0}
    assert walk.candidates[0] == 256


def test_one_local_round_costs_what_the_shuffling_bound_gives() -> None:
    assert recall_bench.local_epsilon(4.0, 10_000, 1) == pytest.approx(
        amplified_epsilon(4.0, 10_000, 1e-6, "stronger-2022"), rel=1e-2
    )


def test_local_epsilon0_is_the_largest_within_the_total_epsilon() -> None:
    epsilon0 = recall_bench.local_epsilon0(1.0, 10_000, 8)

    assert recall_bench.local_epsilon(epsilon0, 10_000, 8) <= 1.0
    assert recall_bench.local_epsilon(epsilon0 * 1.002, 10_000, 8) > 1.0


def test_character_sequences_hold_each_device_word() -> None:
    alphabet = tuple(sorted({c for w in TOKENS for c in w}))
    index = {w: i for i, w in enumerate(TOKENS)}
    words = np.array([index[w] for w in WORDS], dtype=np.int64)

    sequences = recall_bench.character_sequences(words, list(TOKENS), alphabet)

    spelled = [
        "".join(alphabet[s] for s in sequences.symbols[sequences.sequence_start[i] : sequences.sequence_start[i + 1]])
        for i in range(sequences.devices)
    ]
    assert spelled == WORDS


def test_recall_counts_the_true_top_among_the_largest_estimates() -> None:
    found = {"a": 10.0, "b": 9.0, "z": 8.0, "c": 1.0}

    assert recall_bench.recall(found, ["a", "b", "c"], 2) == 1.0
    assert recall_bench.recall(found, ["a", "b", "c"], 3) == pytest.approx(2 / 3)
