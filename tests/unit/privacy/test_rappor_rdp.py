"""Symmetric RAPPOR through Renyi DP: seed 001 Table 1, and brute force over every bit pattern."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import special, stats

from privacy.rappor_rdp import (
    binary_rr_rdp,
    symmetric_rappor_epsilon,
    symmetric_rappor_rdp,
    symmetric_rappor_std,
)

# seed 001 Table 1: n = 100,000, delta = 1e-9; epsilon as printed (rounded up) and standard deviation.
TABLE_1 = [
    (5.0, 0.317, 26.1337),
    (6.5, 0.906, 12.2800),
    (7.0, 1.528, 9.5580),
]
INTEGER_ORDERS = tuple(float(alpha) for alpha in range(2, 257))


def renyi(p_dist: np.ndarray, q_dist: np.ndarray, alpha: float) -> float:
    keep = (p_dist > 0) & (q_dist > 0)  # underflowed terms are below 1e-300 * e^((alpha-1) eps0)
    terms = alpha * np.log(p_dist[keep]) + (1 - alpha) * np.log(q_dist[keep])
    return float(special.logsumexp(terms)) / (alpha - 1)


def pattern_divergences(epsilon0: float, n: int, ones: int, alpha: float) -> tuple[float, float]:
    """Both directions of the divergence when ``ones`` of the other n - 1 devices hold bit 1."""
    p = 1 / (math.exp(epsilon0) + 1)
    others = np.convolve(
        stats.binom.pmf(np.arange(n - ones), n - 1 - ones, p), stats.binom.pmf(np.arange(ones + 1), ones, 1 - p)
    )
    one = np.append(p * others, 0.0) + np.insert((1 - p) * others, 0, 0.0)
    zero = np.append((1 - p) * others, 0.0) + np.insert(p * others, 0, 0.0)
    return renyi(one, zero, alpha), renyi(zero, one, alpha)


@pytest.mark.parametrize(("epsilon0", "published_epsilon", "published_std"), TABLE_1)
def test_standard_deviation_matches_seed_001_table_1(
    epsilon0: float, published_epsilon: float, published_std: float
) -> None:
    # The draft rounds up to four decimals (26.13364 is printed 26.1337).
    assert published_std - 1e-4 <= symmetric_rappor_std(epsilon0, 100_000) <= published_std


@pytest.mark.parametrize(("epsilon0", "published_epsilon", "published_std"), TABLE_1)
def test_aggregate_epsilon_matches_seed_001_table_1_with_integer_orders(
    epsilon0: float, published_epsilon: float, published_std: float
) -> None:
    epsilon = symmetric_rappor_epsilon(epsilon0, 100_000, 1e-9, orders=INTEGER_ORDERS, refine=False)
    # The draft rounds up to three decimals.
    assert published_epsilon - 1e-3 <= epsilon <= published_epsilon


@pytest.mark.parametrize(("epsilon0", "expected"), [(5.0, 0.31602445), (6.5, 0.90561256), (7.0, 1.51901789)])
def test_refined_orders_give_an_epsilon_no_larger_than_the_table(epsilon0: float, expected: float) -> None:
    refined = symmetric_rappor_epsilon(epsilon0, 100_000, 1e-9)
    integer = symmetric_rappor_epsilon(epsilon0, 100_000, 1e-9, orders=INTEGER_ORDERS, refine=False)
    assert refined <= integer
    assert refined == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("epsilon0", [0.5, 2.0, 4.0])
@pytest.mark.parametrize("alpha", [1.5, 2.0, 7.5, 30.0])
def test_rho_is_the_worst_case_over_every_bit_pattern_and_direction(epsilon0: float, alpha: float) -> None:
    n = 12
    worst = max(max(pattern_divergences(epsilon0, n, ones, alpha)) for ones in range(n))
    assert binary_rr_rdp(epsilon0, n, alpha) == pytest.approx(worst, rel=1e-9)
    assert binary_rr_rdp(epsilon0, n, alpha) >= worst * (1 - 1e-13)


def test_rho_of_a_large_cohort_matches_a_direct_sum_over_the_whole_support() -> None:
    epsilon0, n, alpha = 3.0, 20_000, 12.0
    direct = max(pattern_divergences(epsilon0, n, 0, alpha))
    assert binary_rr_rdp(epsilon0, n, alpha) == pytest.approx(direct, rel=1e-9)


def test_rho_of_one_report_is_the_randomized_response_divergence() -> None:
    epsilon0, alpha = 2.0, 3.0
    p = special.expit(-epsilon0)
    exact = math.log((1 - p) ** alpha * p ** (1 - alpha) + p**alpha * (1 - p) ** (1 - alpha)) / (alpha - 1)
    assert binary_rr_rdp(epsilon0, 1, alpha) == pytest.approx(exact, rel=1e-12)


def test_symmetric_rappor_rdp_is_twice_the_per_coordinate_bound() -> None:
    assert symmetric_rappor_rdp(4.0, 5_000, 8.0) == 2 * binary_rr_rdp(4.0, 5_000, 8.0)


def test_standard_deviation_is_the_exact_spread_of_the_debiased_sum() -> None:
    epsilon0, n, true_count = 1.5, 60, 17
    p = 1 / (math.exp(epsilon0) + 1)
    reported = np.convolve(
        stats.binom.pmf(np.arange(true_count + 1), true_count, 1 - p),
        stats.binom.pmf(np.arange(n - true_count + 1), n - true_count, p),
    )
    e = math.exp(epsilon0)
    estimate = (1 + e) / (e - 1) * np.arange(n + 1) - n / (e - 1)  # seed 000 Algorithm 4
    assert float(np.dot(reported, estimate)) == pytest.approx(true_count, rel=1e-12)
    variance = float(np.dot(reported, (estimate - true_count) ** 2))
    assert symmetric_rappor_std(epsilon0, n) == pytest.approx(math.sqrt(variance), rel=1e-10)


def test_aggregate_epsilon_falls_with_the_cohort_size() -> None:
    values = [symmetric_rappor_epsilon(4.0, n, 1e-8) for n in (1_000, 10_000, 100_000, 10**7)]
    assert values == sorted(values, reverse=True)


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda: symmetric_rappor_epsilon(0.0, 1_000, 1e-9), "epsilon0"),
        (lambda: symmetric_rappor_epsilon(1.0, 0, 1e-9), "n"),
        (lambda: symmetric_rappor_epsilon(1.0, 1_000, 0.0), "delta"),
        (lambda: symmetric_rappor_epsilon(1.0, 1_000, 1e-9, orders=[0.5, 2.0]), "orders"),
        (lambda: binary_rr_rdp(1.0, 1_000, 1.0), "alpha"),
        (lambda: symmetric_rappor_std(-1.0, 1_000), "epsilon0"),
        (lambda: symmetric_rappor_std(1.0, 1.5), "n"),
    ],
)
def test_invalid_parameters_raise_value_error_naming_the_parameter(call, name: str) -> None:
    with pytest.raises(ValueError, match=rf"^{name} "):
        call()
