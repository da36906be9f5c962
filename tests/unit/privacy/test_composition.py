"""Composition, Renyi accounting and Poisson sampling, checked against exact mechanisms."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from privacy.composition import (
    DEFAULT_ORDERS,
    ApproximateDP,
    RenyiDP,
    advanced_composition,
    basic_composition,
    gaussian_rdp,
    poisson_sampling,
    pure_dp_rdp,
    rdp_compose,
    rdp_epsilon,
    rdp_to_dp,
)
from privacy.gaussian import analytic_gaussian_delta


def composed_randomized_response_delta(epsilon: float, steps: int, target: float) -> float:
    """Exact delta at ``target`` of ``steps`` eps-randomized-response answers about one bit."""
    agree = stats.binom.pmf(np.arange(steps + 1), steps, math.exp(epsilon) / (1 + math.exp(epsilon)))
    # With j agreeing answers the likelihood ratio is e^((2j - T) eps); under the other input j flips.
    return float(np.maximum(agree - math.exp(target) * agree[::-1], 0.0).sum())


def test_basic_composition_adds_epsilons_and_deltas() -> None:
    total = basic_composition([ApproximateDP(0.5, 1e-7), ApproximateDP(1.25, 2e-7), ApproximateDP(0.25)])
    assert total.epsilon == pytest.approx(2.0, rel=1e-15)
    assert total.delta == pytest.approx(3e-7, rel=1e-15)
    assert total.epsilon >= 2.0


@pytest.mark.parametrize(
    ("epsilon", "delta", "steps", "delta_prime", "expected_epsilon"),
    [
        (0.1, 1e-8, 100, 1e-6, 6.308230950513408),
        (0.5, 0.0, 10, 1e-5, 10.830742000426373),
    ],
)
def test_advanced_composition_follows_seed_003_theorem_3(
    epsilon: float, delta: float, steps: int, delta_prime: float, expected_epsilon: float
) -> None:
    total = advanced_composition(ApproximateDP(epsilon, delta), steps, delta_prime)
    assert total.epsilon == pytest.approx(expected_epsilon, rel=1e-12)
    assert total.delta == pytest.approx(steps * delta + delta_prime, rel=1e-12)


@pytest.mark.parametrize(("epsilon", "steps", "delta_prime"), [(0.1, 100, 1e-6), (0.05, 400, 1e-9), (0.3, 30, 1e-3)])
def test_advanced_composition_covers_exactly_composed_randomized_response(
    epsilon: float, steps: int, delta_prime: float
) -> None:
    total = advanced_composition(ApproximateDP(epsilon), steps, delta_prime)
    assert composed_randomized_response_delta(epsilon, steps, total.epsilon) <= delta_prime


def test_advanced_composition_beats_basic_composition_for_many_small_steps() -> None:
    assert advanced_composition(ApproximateDP(0.05), 400, 1e-9).epsilon < 400 * 0.05


def test_rdp_to_dp_uses_the_canonne_kamath_steinke_conversion() -> None:
    assert rdp_to_dp(1.0, 8.0, 1e-6) == pytest.approx(2.543049895416111, rel=1e-14)
    mironov = 1.0 + math.log(1e6) / 7.0
    assert rdp_to_dp(1.0, 8.0, 1e-6) < mironov


@pytest.mark.parametrize(("sigma", "steps", "delta"), [(20.0, 50, 1e-6), (5.0, 4, 1e-9), (100.0, 1_000, 1e-8)])
def test_composed_gaussian_rdp_epsilon_is_an_upper_bound_on_the_exact_one(
    sigma: float, steps: int, delta: float
) -> None:
    composed = rdp_compose([gaussian_rdp(sigma)] * steps)
    assert composed.rhos == pytest.approx(gaussian_rdp(sigma / math.sqrt(steps)).rhos, rel=1e-12)
    epsilon = rdp_epsilon(composed, delta)
    # T Gaussian steps are one Gaussian with sigma / sqrt(T): its exact delta (Balle-Wang) at our epsilon.
    assert analytic_gaussian_delta(sigma / math.sqrt(steps), epsilon, 1.0) <= delta
    assert analytic_gaussian_delta(sigma / math.sqrt(steps), 0.8 * epsilon, 1.0) > delta  # and not far off


def test_pure_dp_as_rdp_takes_the_smaller_of_the_two_bounds() -> None:
    curve = pure_dp_rdp(0.5, orders=(2.0, 4.0, 10.0))
    assert curve.rhos == pytest.approx((0.25, 0.5, 0.5), rel=1e-15)


def test_rdp_compose_refuses_curves_on_different_orders() -> None:
    with pytest.raises(ValueError, match="orders"):
        rdp_compose([gaussian_rdp(1.0, orders=(2.0, 3.0)), gaussian_rdp(1.0, orders=(2.0, 4.0))])


@pytest.mark.parametrize(("epsilon", "rate"), [(2.0, 0.01), (0.5, 0.3), (5.0, 1e-4), (1.0, 1.0)])
def test_poisson_sampling_bound_is_exact_for_sampled_randomized_response(epsilon: float, rate: float) -> None:
    # One device answers eps-RR about its presence; it is sampled with probability `rate`.
    e = math.exp(epsilon)
    present = np.array([rate * e / (1 + e) + (1 - rate) / (1 + e), rate / (1 + e) + (1 - rate) * e / (1 + e)])
    absent = np.array([1 / (1 + e), e / (1 + e)])
    worst = float(np.max(np.abs(np.log(present / absent))))
    amplified = poisson_sampling(ApproximateDP(epsilon), rate)
    assert amplified.epsilon == pytest.approx(worst, rel=1e-12)
    assert amplified.epsilon >= worst * (1 - 1e-15)


def test_poisson_sampling_scales_delta_and_follows_seed_003_theorem_4() -> None:
    amplified = poisson_sampling(ApproximateDP(2.0, 1e-6), 0.01)
    assert amplified.epsilon == pytest.approx(0.06193252941633182, rel=1e-14)
    assert amplified.delta == pytest.approx(1e-8, rel=1e-14)


def test_default_orders_are_all_above_one_and_increasing() -> None:
    assert all(alpha > 1 for alpha in DEFAULT_ORDERS)
    assert list(DEFAULT_ORDERS) == sorted(set(DEFAULT_ORDERS))


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda: ApproximateDP(-0.1, 0.0), "epsilon"),
        (lambda: ApproximateDP(1.0, 1.5), "delta"),
        (lambda: basic_composition([]), "events"),
        (lambda: advanced_composition(ApproximateDP(0.1), 0, 1e-6), "steps"),
        (lambda: advanced_composition(ApproximateDP(0.1), 10, 0.0), "delta_prime"),
        (lambda: rdp_to_dp(1.0, 1.0, 1e-6), "alpha"),
        (lambda: rdp_to_dp(-1.0, 2.0, 1e-6), "rho"),
        (lambda: rdp_to_dp(1.0, 2.0, 0.0), "delta"),
        (lambda: gaussian_rdp(0.0), "sigma"),
        (lambda: gaussian_rdp(1.0, sensitivity=-1.0), "sensitivity"),
        (lambda: pure_dp_rdp(math.inf), "epsilon"),
        (lambda: poisson_sampling(ApproximateDP(1.0), 1.5), "sampling_rate"),
        (lambda: RenyiDP((0.5,), (1.0,)), "every order"),
    ],
)
def test_invalid_parameters_raise_value_error_naming_the_parameter(call, name: str) -> None:
    with pytest.raises(ValueError, match=rf"^{name} "):
        call()
