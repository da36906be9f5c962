"""Analytic and classical Gaussian calibration; the discrete Gaussian sampler's contract."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import integrate, stats

from privacy.gaussian import (
    analytic_gaussian_delta,
    analytic_gaussian_sigma,
    classical_gaussian_sigma,
    sample_discrete_gaussian,
)


def integrated_delta(sigma: float, epsilon: float, sensitivity: float) -> float:
    """Hockey-stick divergence of N(0, sigma^2) and N(Delta, sigma^2) by numerical integration."""
    crossing = (sensitivity**2 - 2 * sigma**2 * epsilon) / (2 * sensitivity)  # density ratio = e^eps here

    def gap(x: float) -> float:
        return stats.norm.pdf(x, 0, sigma) - math.exp(epsilon) * stats.norm.pdf(x, sensitivity, sigma)

    value, _ = integrate.quad(gap, crossing - 40 * sigma, crossing, epsabs=0, epsrel=1e-12, limit=500)
    return value


# seed 001 Table 2, OAOC column: L2 sensitivity sqrt(2), delta = 1e-9.
TABLE_2 = [(0.317, 23.3903), (0.906, 8.5402), (1.528, 5.1904)]


@pytest.mark.parametrize(("epsilon", "published_sigma"), TABLE_2)
def test_analytic_sigma_matches_seed_001_table_2(epsilon: float, published_sigma: float) -> None:
    assert analytic_gaussian_sigma(epsilon, 1e-9, math.sqrt(2)) == pytest.approx(published_sigma, rel=1e-4)


def test_analytic_sigma_matches_seed_003_example_3() -> None:
    # "Using the better numerical bounds from [Balle2018] the same privacy bound holds for sigma = 5.1."
    assert analytic_gaussian_sigma(1.0, 1e-8, 1.0) == pytest.approx(5.1, abs=0.01)


def test_classical_sigma_matches_seed_003_example_3() -> None:
    # sigma = 7 gives epsilon = sqrt(2 log(1.25 / delta)) / sigma at delta = 1e-8, below 1.
    epsilon = math.sqrt(2 * math.log(1.25e8)) / 7
    assert classical_gaussian_sigma(epsilon, 1e-8, 1.0) == pytest.approx(7.0, rel=1e-15)
    assert analytic_gaussian_delta(7.0, 1.0, 1.0) <= 1e-8


@pytest.mark.parametrize(
    ("epsilon", "delta", "sensitivity"),
    [(0.317, 1e-9, math.sqrt(2)), (1.0, 1e-8, 1.0), (0.05, 1e-5, 3.0), (4.0, 1e-12, 1.0)],
)
def test_analytic_sigma_is_the_smallest_sigma_meeting_delta_by_numerical_integration(
    epsilon: float, delta: float, sensitivity: float
) -> None:
    sigma = analytic_gaussian_sigma(epsilon, delta, sensitivity)
    assert integrated_delta(sigma, epsilon, sensitivity) == pytest.approx(delta, rel=1e-6)
    assert analytic_gaussian_delta(sigma, epsilon, sensitivity) <= delta
    assert analytic_gaussian_delta(sigma * (1 - 1e-9), epsilon, sensitivity) > delta


@pytest.mark.parametrize("epsilon", [0.01, 0.1, 0.5, 0.99])
@pytest.mark.parametrize("delta", [1e-5, 1e-10])
def test_analytic_sigma_never_exceeds_the_classical_one(epsilon: float, delta: float) -> None:
    assert analytic_gaussian_sigma(epsilon, delta, 1.0) <= classical_gaussian_sigma(epsilon, delta, 1.0)


def test_analytic_sigma_stays_finite_at_extreme_parameters() -> None:
    small = analytic_gaussian_sigma(1e-4, 1e-300, 1.0)
    large = analytic_gaussian_sigma(30.0, 0.5, 1.0)
    assert math.isfinite(small) and small > 0 and analytic_gaussian_delta(small, 1e-4, 1.0) <= 1e-300
    assert math.isfinite(large) and large > 0 and analytic_gaussian_delta(large, 30.0, 1.0) <= 0.5


def test_sampler_is_reproducible_from_its_seed() -> None:
    first = sample_discrete_gaussian(Fraction(9, 4), 200, np.random.default_rng(7))
    second = sample_discrete_gaussian(2.25, 200, np.random.default_rng(7))
    assert first.dtype == np.int64 and first.shape == (200,)
    assert np.array_equal(first, second)
    assert sample_discrete_gaussian(1, 0, np.random.default_rng(7)).shape == (0,)


def test_sampler_requires_a_numpy_generator() -> None:
    with pytest.raises(TypeError, match="rng"):
        sample_discrete_gaussian(1.0, 3, np.random.RandomState(1))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda: analytic_gaussian_sigma(0.0, 1e-6, 1.0), "epsilon"),
        (lambda: analytic_gaussian_sigma(1.0, 0.0, 1.0), "delta"),
        (lambda: analytic_gaussian_sigma(1.0, 1.0, 1.0), "delta"),
        (lambda: analytic_gaussian_sigma(1.0, 1e-6, 0.0), "sensitivity"),
        (lambda: classical_gaussian_sigma(1.0, 1e-6, 1.0), "epsilon"),
        (lambda: classical_gaussian_sigma(0.5, 2.0, 1.0), "delta"),
        (lambda: analytic_gaussian_delta(-1.0, 1.0, 1.0), "sigma"),
        (lambda: analytic_gaussian_delta(1.0, -1.0, 1.0), "epsilon"),
        (lambda: sample_discrete_gaussian(0.0, 3, np.random.default_rng(1)), "sigma2"),
        (lambda: sample_discrete_gaussian(math.nan, 3, np.random.default_rng(1)), "sigma2"),
        (lambda: sample_discrete_gaussian(True, 3, np.random.default_rng(1)), "sigma2"),
        (lambda: sample_discrete_gaussian(Fraction(-1, 2), 3, np.random.default_rng(1)), "sigma2"),
        (lambda: sample_discrete_gaussian(1.0, -1, np.random.default_rng(1)), "size"),
    ],
)
def test_invalid_parameters_raise_value_error_naming_the_parameter(call, name: str) -> None:
    with pytest.raises(ValueError, match=rf"^{name} "):
        call()
