"""Stream retention: keyboard phrases older than the KeyboardNGrams policy are removed, CSR kept consistent."""

from __future__ import annotations

import numpy as np
import pytest

from devices.synthetic import generate_shard
from pfs_device.streams import RETENTION_DAYS, SECONDS_PER_DAY, STREAMS, apply_retention

NOW = 1_714_521_600.0  # 2024-05-01T00:00:00Z
CUTOFF = int(NOW) - RETENTION_DAYS["KeyboardNGrams"] * SECONDS_PER_DAY


def small_shard() -> dict:
    """Three devices: two phrases (old, recent), none, three (recent, at the cutoff, old)."""
    return {
        "device_id": np.array(["a", "b", "c"]),
        "age": np.array([30, np.nan, 50], dtype=np.float32),
        "locale": np.array([0, 1, 0], dtype=np.int16),
        "perplexity": np.array([40, 50, 60], dtype=np.float32),
        "phrase_start": np.array([0, 2, 2, 5], dtype=np.int64),
        "phrase_time": np.array([CUTOFF - 1, CUTOFF + 10, int(NOW), CUTOFF, 0], dtype=np.int64),
        "token_start": np.array([0, 2, 3, 6, 7, 9], dtype=np.int64),
        "tokens": np.array([1, 2, 3, 4, 5, 6, 7, 8, 9], dtype=np.int32),
    }


def device_phrases(columns: dict) -> list[list[tuple[int, tuple[int, ...]]]]:
    """Each device's (time, tokens) phrases, the slow way (tests may loop)."""
    phrase_start, token_start = columns["phrase_start"], columns["token_start"]
    return [
        [
            (int(columns["phrase_time"][p]), tuple(columns["tokens"][token_start[p] : token_start[p + 1]].tolist()))
            for p in range(phrase_start[d], phrase_start[d + 1])
        ]
        for d in range(phrase_start.size - 1)
    ]


def assert_csr_consistent(columns: dict, devices: int) -> None:
    phrase_start, token_start = columns["phrase_start"], columns["token_start"]
    assert phrase_start.dtype == token_start.dtype == columns["phrase_time"].dtype == np.int64
    assert phrase_start.size == devices + 1
    assert phrase_start[0] == 0 and (np.diff(phrase_start) >= 0).all()
    assert phrase_start[-1] == columns["phrase_time"].size == token_start.size - 1
    assert token_start[0] == 0 and (np.diff(token_start) >= 1).all()
    assert token_start[-1] == columns["tokens"].size


def test_apply_retention_drops_exactly_the_phrases_older_than_the_policy() -> None:
    kept, dropped = apply_retention(small_shard(), now=NOW)
    assert dropped == 2
    assert device_phrases(kept) == [
        [(CUTOFF + 10, (3,))],
        [],
        [(int(NOW), (4, 5, 6)), (CUTOFF, (7,))],  # a phrase exactly at the cutoff is kept
    ]
    assert_csr_consistent(kept, devices=3)


def test_apply_retention_leaves_the_profile_and_metrics_columns_alone() -> None:
    shard = small_shard()
    kept, _ = apply_retention(shard, now=NOW)
    for name in ("device_id", "age", "locale", "perplexity"):
        np.testing.assert_array_equal(kept[name], shard[name])


def test_apply_retention_does_not_modify_its_input() -> None:
    shard = small_shard()
    apply_retention(shard, now=NOW)
    for name, column in small_shard().items():
        np.testing.assert_array_equal(shard[name], column)


def test_apply_retention_with_nothing_expired_drops_nothing() -> None:
    shard = small_shard()
    # The oldest phrase is at t = 0: ten days later, it is within the 30 days.
    kept, dropped = apply_retention(shard, now=10 * SECONDS_PER_DAY)
    assert dropped == 0
    assert device_phrases(kept) == device_phrases(shard)


def test_apply_retention_can_drop_every_phrase() -> None:
    kept, dropped = apply_retention(small_shard(), now=NOW + 1_000 * SECONDS_PER_DAY)
    assert dropped == 5
    assert device_phrases(kept) == [[], [], []]
    assert_csr_consistent(kept, devices=3)


def test_apply_retention_refuses_a_shard_without_phrase_times() -> None:
    shard = small_shard()
    del shard["phrase_time"]
    with pytest.raises(ValueError, match="phrase_time"):
        apply_retention(shard, now=NOW)


@pytest.mark.parametrize("seed", range(20))
def test_apply_retention_keeps_exactly_the_recent_phrases_of_random_shards(seed: int) -> None:
    rng = np.random.default_rng([2024, seed])
    devices = int(rng.integers(1, 60))
    phrases_per_device = rng.poisson(rng.uniform(0.2, 5), size=devices)
    phrase_count = int(phrases_per_device.sum())
    tokens_per_phrase = rng.integers(1, 6, size=phrase_count)
    shard = {
        "age": rng.uniform(13, 90, size=devices).astype(np.float32),
        "phrase_start": np.concatenate([[0], np.cumsum(phrases_per_device)]).astype(np.int64),
        # Unordered times within each device, as an imported file may have them.
        "phrase_time": (NOW - rng.integers(0, 60 * SECONDS_PER_DAY, size=phrase_count)).astype(np.int64),
        "token_start": np.concatenate([[0], np.cumsum(tokens_per_phrase)]).astype(np.int64),
        "tokens": rng.integers(0, 500, size=int(tokens_per_phrase.sum())).astype(np.int32),
    }
    kept, dropped = apply_retention(shard, now=NOW)

    expected = [[phrase for phrase in device if phrase[0] >= CUTOFF] for device in device_phrases(shard)]
    assert device_phrases(kept) == expected
    assert dropped == int((shard["phrase_time"] < CUTOFF).sum())
    assert_csr_consistent(kept, devices=devices)


def test_apply_retention_on_a_synthetic_shard_keeps_about_half_of_sixty_days() -> None:
    shard = generate_shard(5_000, np.random.default_rng(5), now=NOW)
    kept, dropped = apply_retention(shard, now=NOW)
    phrases = shard["phrase_time"].size
    # Uniform times over 60 days: a binomial share of 1/2, within 6 standard errors.
    assert abs(dropped / phrases - 0.5) < 6 * np.sqrt(0.25 / phrases)
    assert kept["phrase_time"].min() >= CUTOFF
    assert_csr_consistent(kept, devices=5_000)


def test_every_stream_has_a_retention_policy() -> None:
    assert set(RETENTION_DAYS) == set(STREAMS)
