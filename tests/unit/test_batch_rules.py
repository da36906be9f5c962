"""Rate validation's arithmetic (seed 003, Section 4.8)."""

from __future__ import annotations

import numpy as np
import pytest

from aggregation.batch_rules import busiest_window, rate_exceeded


def test_busiest_window_counts_arrivals_in_half_open_windows() -> None:
    assert busiest_window([], 10) == 0
    assert busiest_window([0, 1, 2, 10, 11], 10) == 3  # [0, 10) holds 0, 1, 2; [1, 11) holds 1, 2, 10
    assert busiest_window([5, 5, 5], 1) == 3


def test_a_steady_stream_passes_and_a_burst_of_more_than_twice_the_rate_fails() -> None:
    steady = np.arange(0, 600, 1.0)  # 1 per second for 10 minutes
    assert not rate_exceeded(steady, expected_rate=1.0, window=60)
    # Twice the rate exactly is allowed; one more report in a window is not.
    assert not rate_exceeded(np.arange(0, 60, 0.5), expected_rate=1.0, window=60)
    assert rate_exceeded(np.append(np.arange(0, 60, 0.5), 59.9), expected_rate=1.0, window=60)


def test_rates_must_be_positive() -> None:
    with pytest.raises(ValueError):
        rate_exceeded([1.0], expected_rate=0, window=60)
