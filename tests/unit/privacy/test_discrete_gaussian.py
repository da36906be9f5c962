"""The discrete Gaussian's exact delta and calibration (privacy.discrete_gaussian), against published
calibrations, brute-force hockey-stick sums and the continuous Gaussian it approaches."""

from __future__ import annotations

import math

import numpy as np
import pytest

from privacy.discrete_gaussian import SIGMA_EXACT_MAX, discrete_gaussian_delta, discrete_gaussian_sigma
from privacy.gaussian import analytic_gaussian_delta

# Frozen from Google's dp-accounting (google/differential-privacy, python/dp_accounting/pld/
# privacy_loss_mechanism_test.py, test_discrete_gaussian_from_privacy_parameters, sampling_prob 1):
# (sensitivity, epsilon, delta, sigma to 3 decimals) for one integer coordinate shifted by the
# sensitivity. dp-accounting itself cannot be installed beside the lock (its attrs pin).
DP_ACCOUNTING = [
    (1, 1.0, 0.12693674, 1.041),
    (2, 1.0, 0.12693674, 1.972),
    (3, 1.0, 0.78760074, 0.993),
    (6, 1.0, 0.78760074, 2.014),
    (1, 2.0, 0.02092364, 1.038),
    (5, 2.0, 0.02092364, 5.008),
    (1, 16.0, 1e-5, 0.306),
    (2, 16.0, 1e-5, 0.703),
]


@pytest.mark.parametrize(("sensitivity", "epsilon", "delta", "sigma"), DP_ACCOUNTING)
def test_calibration_matches_dp_accounting(sensitivity: int, epsilon: float, delta: float, sigma: float) -> None:
    assert discrete_gaussian_sigma(epsilon, delta, sensitivity=sensitivity, coordinates=1) == pytest.approx(
        sigma, abs=5e-4
    )


def _pmf(sigma: float, reach: int) -> tuple[np.ndarray, np.ndarray]:
    x = np.arange(-reach, reach + 1)
    weights = np.exp(-(x.astype(float) ** 2) / (2 * sigma * sigma))
    return x, weights / math.fsum(weights)


def _brute_force_delta(sigma: float, epsilon: float, sensitivity: int, coordinates: int) -> float:
    """sum_y max(0, P(y) - e^eps Q(y)) over the integer grid (1 or 2 coordinates), the definition."""
    reach = math.ceil(40 * sigma) + 2 * sensitivity + 2
    x, p = _pmf(sigma, reach)
    q = np.zeros_like(p)
    q[sensitivity:] = p[:-sensitivity]  # Q(y) = P(y - Delta)
    if coordinates == 1:
        return math.fsum(np.maximum(p - math.exp(epsilon) * q, 0.0))
    q_minus = np.zeros_like(p)
    q_minus[:-sensitivity] = p[sensitivity:]  # the other coordinate moves by -Delta
    joint_p = np.outer(p, p)
    joint_q = np.outer(q, q_minus)
    return math.fsum(np.maximum(joint_p - math.exp(epsilon) * joint_q, 0.0).ravel())


@pytest.mark.parametrize("coordinates", [1, 2])
@pytest.mark.parametrize("sensitivity", [1, 2])
@pytest.mark.parametrize(("sigma", "epsilon"), [(0.5, 0.5), (1.0, 1.0), (1.7, 0.3), (3.0, 2.0), (6.0, 0.7)])
def test_delta_is_the_hockey_stick_sum_rounded_up(sigma: float, epsilon: float, sensitivity: int, coordinates: int):
    exact = _brute_force_delta(sigma, epsilon, sensitivity, coordinates)
    computed = discrete_gaussian_delta(sigma, epsilon, sensitivity=sensitivity, coordinates=coordinates)
    assert exact <= computed <= exact * (1 + 1e-8) + 1e-300


def test_one_coordinate_is_a_post_processing_of_two() -> None:
    for sigma in (0.8, 2.0, 9.0, 40.0):
        for epsilon in (0.1, 1.0, 3.0):
            assert discrete_gaussian_delta(sigma, epsilon, coordinates=1) <= discrete_gaussian_delta(sigma, epsilon)


@pytest.mark.parametrize("sigma", [3.0, 10.0, 30.0, 200.0, 5000.0])
def test_large_sigma_approaches_the_continuous_gaussian(sigma: float) -> None:
    """CKS20: the discrete Gaussian's delta tends to the continuous one (Balle-Wang, sensitivity
    sqrt 2) as sigma grows. In standard units the noise lives on a lattice of step 1/sigma, and a
    lattice sum of a smooth tail differs from its integral at second order in the step: within
    1/sigma^2 relatively (the difference measured is about 0.44/sigma^2, the discrete one below)."""
    epsilon = 4.0 / sigma  # delta about 1e-3 .. 1e-7: neither rounding-level nor trivial
    continuous = analytic_gaussian_delta(sigma, epsilon, math.sqrt(2.0))
    assert abs(discrete_gaussian_delta(sigma, epsilon) / continuous - 1) <= 1 / sigma**2


def test_calibration_is_the_smallest_sigma_and_holds() -> None:
    for epsilon, delta in [(1.0, 1e-6), (0.3, 1e-9), (0.05, 1e-7), (3.0, 1e-12)]:
        sigma = discrete_gaussian_sigma(epsilon, delta)
        assert discrete_gaussian_delta(sigma, epsilon) <= delta
        assert discrete_gaussian_delta(sigma * (1 - 1e-7), epsilon) > delta


def test_beyond_the_exact_range_the_zcdp_bound_is_used_and_is_sound() -> None:
    # Just inside the exact range the zCDP bound (CKS20 Thm 14 + Prop 12) is above the exact delta.
    from privacy.discrete_gaussian import _zcdp_delta

    for sigma in (50.0, 1000.0, SIGMA_EXACT_MAX):
        epsilon = 5.0 / sigma
        assert _zcdp_delta(sigma, epsilon, 1, 2) >= discrete_gaussian_delta(sigma, epsilon)
    above = SIGMA_EXACT_MAX * 1.5
    assert discrete_gaussian_delta(above, 5.0 / above) == _zcdp_delta(above, 5.0 / above, 1, 2)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: discrete_gaussian_sigma(0.0, 1e-6), "epsilon"),
        (lambda: discrete_gaussian_sigma(math.nan, 1e-6), "epsilon"),
        (lambda: discrete_gaussian_sigma(1.0, 0.0), "delta"),
        (lambda: discrete_gaussian_sigma(1.0, 5e-324), "delta"),  # subnormal
        (lambda: discrete_gaussian_sigma(1e-12, 1e-300), "no sigma"),
        (lambda: discrete_gaussian_delta(0.0, 1.0), "sigma"),
        (lambda: discrete_gaussian_delta(math.inf, 1.0), "sigma"),
        (lambda: discrete_gaussian_delta(1.0, -1.0), "epsilon"),
        (lambda: discrete_gaussian_delta(1.0, 1.0, sensitivity=0), "sensitivity"),
        (lambda: discrete_gaussian_delta(1.0, 1.0, sensitivity=1.5), "sensitivity"),  # type: ignore[arg-type]
        (lambda: discrete_gaussian_delta(1.0, 1.0, coordinates=3), "coordinates"),
    ],
)
def test_out_of_range_inputs_are_refused(call, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()
