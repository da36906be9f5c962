"""Numerical amplification by shuffling: published figures, brute force, ordering, min cohorts."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from privacy.amplification import UnreachableEpsilon
from privacy.shuffling import (
    METHODS,
    amplified_epsilon,
    clones_2020_epsilon,
    min_cohort,
    stronger_2022_epsilon,
)


def brute_force_delta(epsilon0: float, n: int, epsilon: float, clone_probability: float) -> float:
    """E_C[D_{e^eps}(P_C || Q_C)] summed over every clone count and every outcome, no shortcuts."""
    a = math.exp(epsilon0) / (math.exp(epsilon0) + 1)
    total = 0.0
    for clones in range(n):
        half = np.array([math.comb(clones, k) for k in range(clones + 1)], dtype=float) / 2.0**clones
        now = np.append(half, 0.0)  # b(k) on k = 0 .. clones + 1
        before = np.insert(half, 0, 0.0)  # b(k - 1)
        p_dist = a * now + (1 - a) * before
        q_dist = (1 - a) * now + a * before
        pair = np.maximum(p_dist - math.exp(epsilon) * q_dist, 0.0).sum()
        total += stats.binom.pmf(clones, n - 1, clone_probability) * pair
    return total


def shuffled_randomized_response_delta(epsilon0: float, n: int, epsilon: float) -> float:
    """Exact delta of summing n eps0-binary-RR bits when one device's bit changes (others all 0)."""
    p = 1 / (math.exp(epsilon0) + 1)
    others = stats.binom.pmf(np.arange(n), n - 1, p)
    one = np.append(p * others, 0.0) + np.insert((1 - p) * others, 0, 0.0)
    zero = np.append((1 - p) * others, 0.0) + np.insert(p * others, 0, 0.0)
    forward = np.maximum(one - math.exp(epsilon) * zero, 0.0).sum()
    backward = np.maximum(zero - math.exp(epsilon) * one, 0.0).sum()
    return max(forward, backward)


def test_stronger_2022_bound_reproduces_seed_003_example_4() -> None:
    # eps0 = 4, B = 10,000, delta = 1e-10 "satisfies (0.61, 1e-10)-DP" (two decimals).
    epsilon = stronger_2022_epsilon(4.0, 10_000, 1e-10)
    assert epsilon == pytest.approx(0.61, abs=0.005)
    assert epsilon == pytest.approx(0.6052560, rel=1e-6)


def test_clones_2020_bound_lies_within_the_published_bracket() -> None:
    # apple/ml-shuffling-amplification README: eps between 0.1675385583317841 and 0.172790550755978.
    epsilon = clones_2020_epsilon(4.0, 100_000, 1e-6)
    assert 0.1675385583317841 <= epsilon <= 0.172790550755978
    assert amplified_epsilon(4.0, 100_000, 1e-6, method="closed-form") <= 0.5378040242374512


@pytest.mark.parametrize(
    ("epsilon0", "n", "delta", "method", "probability"),
    [
        (1.0, 40, 1e-3, "stronger-2022", 2 / (math.e + 1)),
        (3.0, 120, 1e-4, "stronger-2022", 2 / (math.exp(3.0) + 1)),
        (3.0, 120, 1e-4, "clones-2020", math.exp(-3.0)),
        (0.5, 25, 1e-2, "clones-2020", math.exp(-0.5)),
    ],
)
def test_numerical_bound_matches_a_brute_force_sum_and_is_not_rounded_down(
    epsilon0: float, n: int, delta: float, method: str, probability: float
) -> None:
    epsilon = amplified_epsilon(epsilon0, n, delta, method=method)
    assert brute_force_delta(epsilon0, n, epsilon, probability) <= delta
    assert brute_force_delta(epsilon0, n, epsilon * (1 - 1e-6), probability) > delta


@pytest.mark.parametrize(("epsilon0", "n", "delta"), [(1.0, 50, 1e-3), (3.0, 300, 1e-5), (5.0, 2_000, 1e-6)])
def test_stronger_2022_bound_covers_exactly_computed_shuffled_randomized_response(
    epsilon0: float, n: int, delta: float
) -> None:
    epsilon = stronger_2022_epsilon(epsilon0, n, delta)
    assert shuffled_randomized_response_delta(epsilon0, n, epsilon) <= delta


@pytest.mark.parametrize("epsilon0", [0.5, 2.0, 4.0, 8.0])
@pytest.mark.parametrize("n", [100, 3_000, 200_000])
@pytest.mark.parametrize("delta", [1e-6, 1e-10])
def test_stronger_2022_is_at_most_clones_2020_is_at_most_closed_form(epsilon0: float, n: int, delta: float) -> None:
    stronger = stronger_2022_epsilon(epsilon0, n, delta)
    clones = clones_2020_epsilon(epsilon0, n, delta)
    closed = amplified_epsilon(epsilon0, n, delta, method="closed-form")
    assert stronger <= clones <= min(closed, epsilon0)


def test_amplified_epsilon_falls_with_the_cohort_size() -> None:
    values = [stronger_2022_epsilon(3.0, n, 1e-8) for n in (10, 100, 1_000, 10_000, 10**6, 10**9)]
    assert values == sorted(values, reverse=True)
    assert values[-1] < 1e-3


def test_a_single_report_gets_the_exact_randomized_response_epsilon() -> None:
    # One report: D_{e^eps}(Bern(a) || Bern(1 - a)) = a (1 - e^(eps - eps0)) = delta, a = e^eps0 / (e^eps0 + 1).
    a = math.exp(2.0) / (math.exp(2.0) + 1)
    exact = 2.0 + math.log1p(-1e-6 / a)
    assert stronger_2022_epsilon(2.0, 1, 1e-6) == pytest.approx(exact, rel=1e-9)
    assert stronger_2022_epsilon(2.0, 1, 1e-6) >= exact
    assert min_cohort(2.0, 2.0, 1e-6) == 1


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize(("epsilon0", "epsilon", "delta"), [(3.0, 1.0, 1e-6), (4.0, 0.61, 1e-10), (1.0, 0.2, 1e-8)])
def test_min_cohort_is_the_smallest_n_whose_epsilon_is_at_most_the_target(
    method: str, epsilon0: float, epsilon: float, delta: float
) -> None:
    n = min_cohort(epsilon0, epsilon, delta, method=method)
    assert amplified_epsilon(epsilon0, n, delta, method=method) <= epsilon
    assert amplified_epsilon(epsilon0, n - 1, delta, method=method) > epsilon


def test_min_cohort_orders_the_methods_and_matches_seed_000_closed_form() -> None:
    cohorts = {method: min_cohort(3.0, 1.0, 1e-6, method=method) for method in METHODS}
    assert cohorts["closed-form"] == 2_935  # seed 000 Theorem 3.1, as privacy.amplification computes it
    assert cohorts["stronger-2022"] <= cohorts["clones-2020"] <= cohorts["closed-form"]
    # seed 000 Figure 1: with eps0 = 3 the numerical bound gives (1, 1e-6) "once n > 1,000".
    assert cohorts["stronger-2022"] <= 1_000


def test_min_cohort_reaches_very_large_cohorts() -> None:
    n = min_cohort(8.0, 0.01, 1e-10)
    assert 10**9 < n < 10**10
    assert stronger_2022_epsilon(8.0, n, 1e-10) <= 0.01 < stronger_2022_epsilon(8.0, n - 1, 1e-10)


@pytest.mark.parametrize("method", ["stronger-2022", "clones-2020"])
def test_min_cohort_refuses_an_epsilon_no_cohort_reaches(method: str) -> None:
    with pytest.raises(UnreachableEpsilon):
        min_cohort(10.0, 1e-5, 1e-12, method=method)


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda: stronger_2022_epsilon(0.0, 100, 1e-6), "epsilon0"),
        (lambda: clones_2020_epsilon(-1.0, 100, 1e-6), "epsilon0"),
        (lambda: amplified_epsilon(math.nan, 100, 1e-6), "epsilon0"),
        (lambda: stronger_2022_epsilon(1.0, 100, 0.0), "delta"),
        (lambda: stronger_2022_epsilon(1.0, 100, 1.0), "delta"),
        (lambda: amplified_epsilon(1.0, 100, 1.5, method="closed-form"), "delta"),
        (lambda: stronger_2022_epsilon(1.0, 0, 1e-6), "n"),
        (lambda: amplified_epsilon(1.0, 0, 1e-6, method="closed-form"), "n"),
        (lambda: clones_2020_epsilon(1.0, 2.5, 1e-6), "n"),
        (lambda: min_cohort(0.0, 1.0, 1e-6), "epsilon0"),
        (lambda: min_cohort(1.0, 0.0, 1e-6), "epsilon"),
        (lambda: min_cohort(1.0, 0.5, 2.0), "delta"),
        (lambda: min_cohort(1.0, 0.5, 1e-6, method="laplace"), "method"),
        (lambda: amplified_epsilon(1.0, 10, 1e-6, method="laplace"), "method"),
    ],
)
def test_invalid_parameters_raise_value_error_naming_the_parameter(call, name: str) -> None:
    with pytest.raises(ValueError, match=rf"^{name} "):
        call()
