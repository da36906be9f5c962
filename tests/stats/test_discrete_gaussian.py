"""Seeded statistical checks of the exact discrete Gaussian sampler against its exact pmf."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from privacy.gaussian import _bernoulli_exp_minus, _RandomBits, sample_discrete_gaussian

SAMPLES = 20_000


def exact_pmf(sigma2: float) -> tuple[np.ndarray, np.ndarray]:
    """Support and pmf of N_Z(0, sigma^2), truncated where the mass is below 1e-300."""
    reach = math.ceil(40 * math.sqrt(sigma2)) + 5
    support = np.arange(-reach, reach + 1)
    weights = np.exp(-(support.astype(float) ** 2) / (2 * sigma2))
    return support, weights / weights.sum()


@pytest.mark.parametrize(("sigma2", "seed"), [(Fraction(1, 2), 11), (Fraction(107, 10), 12), (Fraction(250_000), 13)])
def test_sample_mean_and_variance_match_the_exact_moments(sigma2: Fraction, seed: int) -> None:
    support, pmf = exact_pmf(float(sigma2))
    variance = float(np.dot(pmf, support.astype(float) ** 2))  # the mean is exactly 0 by symmetry
    fourth = float(np.dot(pmf, support.astype(float) ** 4))
    samples = sample_discrete_gaussian(sigma2, SAMPLES, np.random.default_rng(seed)).astype(float)
    assert abs(samples.mean()) <= 4 * math.sqrt(variance / SAMPLES)
    spread = float(np.mean(samples**2))
    assert abs(spread - variance) <= 4 * math.sqrt((fourth - variance**2) / SAMPLES)
    assert variance <= float(sigma2)  # CKS20: the discrete Gaussian's variance is at most sigma^2


@pytest.mark.parametrize(("sigma2", "edges", "seed"), [(Fraction(1, 2), 2, 21), (Fraction(107, 10), 5, 22)])
def test_pmf_passes_a_chi_square_test_on_a_few_points(sigma2: Fraction, edges: int, seed: int) -> None:
    support, pmf = exact_pmf(float(sigma2))
    samples = sample_discrete_gaussian(sigma2, SAMPLES, np.random.default_rng(seed))
    # Cells: x <= -edges, each of -edges+1 .. edges-1, x >= edges.
    inner = np.arange(-edges + 1, edges)
    expected = [pmf[support <= -edges].sum(), *(pmf[support == x].sum() for x in inner), pmf[support >= edges].sum()]
    observed = [np.sum(samples <= -edges), *(np.sum(samples == x) for x in inner), np.sum(samples >= edges)]
    result = stats.chisquare(observed, np.array(expected) * SAMPLES)
    assert result.pvalue > 1e-6


@pytest.mark.parametrize(("numerator", "denominator"), [(1, 3), (0, 1), (5, 2), (7, 1)])
def test_bernoulli_exp_minus_gamma_has_the_right_frequency(numerator: int, denominator: int) -> None:
    bits = _RandomBits(np.random.default_rng(numerator * 100 + denominator))
    probability = math.exp(-numerator / denominator)
    hits = sum(_bernoulli_exp_minus(numerator, denominator, bits) for _ in range(SAMPLES))
    assert abs(hits / SAMPLES - probability) <= 4 * math.sqrt(probability * (1 - probability) / SAMPLES) + 1e-12
