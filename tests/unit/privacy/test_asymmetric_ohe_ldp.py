"""Exact local-DP check of asymmetric OHE: enumerate every output on a small domain."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from privacy.mechanisms import AsymmetricOHE, mechanism_get


def output_probability(mechanism: AsymmetricOHE, value: int, output: tuple[int, ...]) -> float:
    probability = 1.0
    for bucket, bit in enumerate(output):
        p_one = mechanism.p_own if bucket == value else mechanism.p_other
        probability *= p_one if bit else 1 - p_one
    return probability


@pytest.mark.parametrize("epsilon0", [0.1, 1.0, 3.0])
def test_every_likelihood_ratio_is_within_e_to_the_epsilon0(epsilon0: float) -> None:
    mechanism = AsymmetricOHE(epsilon0=epsilon0)
    domain = 4
    worst = 0.0
    for output in itertools.product([0, 1], repeat=domain):
        probabilities = [output_probability(mechanism, value, output) for value in range(domain)]
        worst = max(worst, math.log(max(probabilities) / min(probabilities)))
    assert worst <= epsilon0 + 1e-12
    assert worst == pytest.approx(epsilon0)  # the bound is tight: no privacy is wasted


def test_output_distribution_sums_to_one() -> None:
    mechanism = AsymmetricOHE(epsilon0=2.0)
    total = sum(output_probability(mechanism, 1, o) for o in itertools.product([0, 1], repeat=3))
    assert total == pytest.approx(1.0)


def test_sampler_matches_the_stated_bit_probabilities() -> None:
    mechanism = AsymmetricOHE(epsilon0=2.0)
    reports = mechanism.privatize(np.zeros(100_000, dtype=np.int64), 2, np.random.default_rng(5))
    own, other = reports.mean(axis=0)
    n = reports.shape[0]
    assert abs(own - 0.5) <= 4 * math.sqrt(0.25 / n)
    p = mechanism.p_other
    assert abs(other - p) <= 4 * math.sqrt(p * (1 - p) / n)


@pytest.mark.parametrize("epsilon0", [0.0, -1.0, math.inf, math.nan])
def test_rejects_a_non_positive_or_non_finite_epsilon0(epsilon0: float) -> None:
    with pytest.raises(ValueError, match="epsilon0"):
        AsymmetricOHE(epsilon0=epsilon0)


def test_mechanism_get_names_the_unknown_mechanism() -> None:
    with pytest.raises(KeyError, match="laplace"):
        mechanism_get("laplace", 1.0)


def test_privatize_rejects_values_outside_the_domain() -> None:
    with pytest.raises(ValueError, match="bucket indices"):
        AsymmetricOHE(epsilon0=1.0).privatize(np.array([3]), 3, np.random.default_rng(0))
