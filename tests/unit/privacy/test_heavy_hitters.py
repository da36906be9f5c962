"""privacy.heavy_hitters: a word as Poplar1's measurement, and each aggregator's noise per level."""

from __future__ import annotations

import pytest

from privacy.aggregator_noise import AggregatorGaussian
from privacy.heavy_hitters import level_sigma, prefix_text, walk_epsilon, word_bits


def test_one_level_costs_the_epsilon_aggregator_noise_is_calibrated_to() -> None:
    # One level is aggregator_noise.py's histogram release: its sigma for (1, 1e-6) composes to epsilon 1.
    assert walk_epsilon(AggregatorGaussian(1.0, 1e-6).sigma, 1, 1e-6) == pytest.approx(1.0, abs=1e-3)


@pytest.mark.parametrize(("epsilon", "levels"), [(2.0, 8), (8.0, 2), (0.5, 3)])
def test_level_sigma_is_the_smallest_noise_within_the_total_epsilon(epsilon, levels) -> None:
    sigma = level_sigma(epsilon, 1e-6, levels)
    assert walk_epsilon(sigma, levels, 1e-6) <= epsilon < walk_epsilon(sigma / 1.002, levels, 1e-6)
    assert level_sigma(epsilon, 1e-6, 2 * levels) > sigma  # more levels, more noise each


@pytest.mark.parametrize(("epsilon", "delta", "levels"), [(0.0, 1e-6, 2), (1.0, 0.0, 2), (1.0, 1e-6, 0)])
def test_level_sigma_refuses_a_budget_that_calibrates_nothing(epsilon, delta, levels) -> None:
    with pytest.raises(ValueError):
        level_sigma(epsilon, delta, levels)


def test_a_word_is_its_utf8_bytes_cut_and_padded_and_reads_back_from_any_whole_byte_prefix() -> None:
    bits = word_bits("héllo", 32)  # é is two bytes: h, 0xC3, 0xA9, l
    assert len(bits) == 32 and prefix_text(bits) == "hél"
    assert prefix_text(word_bits("to", 32)) == "to" and prefix_text(word_bits("to", 32)[:8]) == "t"
    assert prefix_text(word_bits("héllo", 32)[:16]) == "h\ufffd"  # half a character reads as U+FFFD
    with pytest.raises(ValueError):
        word_bits("to", 12)
