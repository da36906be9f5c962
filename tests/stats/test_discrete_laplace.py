"""Seeded statistical checks of the exact discrete Laplace sampler against its exact pmf."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from privacy.aggregator_noise import AggregatorLaplace
from privacy.gaussian import sample_discrete_laplace

SAMPLES = 20_000
# Scales with s = 1 (the discrete Gaussian's proposal), s > 1 and t < s (b below 1), and the scale
# an aggregator draws at epsilon = 0.3 (a float epsilon: t and s of 55 bits).
SCALES = [Fraction(3), Fraction(7, 3), Fraction(1, 2), 2 / Fraction(0.3)]


def exact_pmf(scale: Fraction) -> tuple[np.ndarray, np.ndarray]:
    """Support and pmf (1 - q) / (1 + q) q^|x|, q = e^(-1/b), truncated where the mass is below 1e-300."""
    q = math.exp(-1 / float(scale))
    reach = math.ceil(700 * float(scale)) + 5
    support = np.arange(-reach, reach + 1)
    return support, (1 - q) / (1 + q) * q ** np.abs(support).astype(float)


@pytest.mark.parametrize(("scale", "seed"), list(zip(SCALES, range(31, 35), strict=True)))
def test_pmf_passes_a_chi_square_test(scale: Fraction, seed: int) -> None:
    support, pmf = exact_pmf(scale)
    samples = sample_discrete_laplace(scale, SAMPLES, np.random.default_rng(seed))
    # Cells: each value whose expected count is at least 5 (a symmetric range), and the two tails.
    edge = int(max(x for x, p in zip(support, pmf, strict=True) if p * SAMPLES >= 5 and x >= 0))
    inner = np.arange(-edge, edge + 1)
    expected = [pmf[support < -edge].sum(), *(pmf[support == x].sum() for x in inner), pmf[support > edge].sum()]
    observed = [np.sum(samples < -edge), *(np.sum(samples == x) for x in inner), np.sum(samples > edge)]
    assert math.isclose(sum(expected), 1.0, rel_tol=1e-12)
    result = stats.chisquare(observed, np.array(expected) * SAMPLES)
    assert result.pvalue > 1e-6


@pytest.mark.parametrize(("scale", "seed"), list(zip(SCALES, range(41, 45), strict=True)))
def test_sample_mean_and_variance_match_the_exact_moments(scale: Fraction, seed: int) -> None:
    support, pmf = exact_pmf(scale)
    variance = float(np.dot(pmf, support.astype(float) ** 2))  # the mean is exactly 0 by symmetry
    fourth = float(np.dot(pmf, support.astype(float) ** 4))
    samples = sample_discrete_laplace(scale, SAMPLES, np.random.default_rng(seed)).astype(float)
    assert abs(samples.mean()) <= 4 * math.sqrt(variance / SAMPLES)
    assert abs(float(np.mean(samples**2)) - variance) <= 4 * math.sqrt((fourth - variance**2) / SAMPLES)


@pytest.mark.parametrize(("epsilon", "seed"), [(1.0, 51), (0.3, 52)])
def test_release_intervals_cover_both_aggregators_noise_at_their_level(epsilon: float, seed: int) -> None:
    noise = AggregatorLaplace(epsilon)
    rng = np.random.default_rng(seed)
    total = noise.noise(SAMPLES, rng) + noise.noise(SAMPLES, rng)  # what a released count is off by
    half_width = noise.interval_half_width(0.05)
    missed = float(np.mean(np.abs(total) > half_width))
    assert missed <= 0.05 + 4 * math.sqrt(0.05 * 0.95 / SAMPLES)
    # The normal approximation's 1.96 standard errors would miss more than 5%.
    assert float(np.mean(np.abs(total) > 1.96 * noise.standard_error())) > 0.05
