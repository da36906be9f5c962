"""The edges of the accepted ranges: refusals where double precision fails, accuracy just inside.

Reference values come from two oracles computed offline, neither a dependency: 80-digit arithmetic
(mpmath 1.3.0: the root of Balle and Wang's Theorem 8, and the exact hockey-stick divergence), and
google's dp_accounting 0.6.0, which cannot be installed beside this project's pins (it requires
attrs < 24; requirements.txt pins attrs 26.1.0).
"""

from __future__ import annotations

import math

import pytest

from privacy.amplification import (
    MIN_DELTA,
    UnreachableEpsilon,
    closed_form_epsilon,
    min_cohort_closed_form,
)
from privacy.composition import (
    DEFAULT_ORDERS,
    ApproximateDP,
    advanced_composition,
    advanced_composition_epsilon,
    gaussian_rdp,
    poisson_sampling,
    pure_dp_rdp,
    rdp_compose,
    rdp_epsilon,
    rdp_to_dp,
)
from privacy.discrete_gaussian import discrete_gaussian_delta, discrete_gaussian_sigma
from privacy.gaussian import analytic_gaussian_delta, analytic_gaussian_sigma, classical_gaussian_sigma
from privacy.shuffling import (
    MAX_EPSILON0,
    METHODS,
    amplified_epsilon,
    clones_2020_epsilon,
    min_cohort,
    stronger_2022_epsilon,
)

SUBNORMAL_OR_TINY = [1e-301, 1e-310, 5e-324]
TOO_LARGE_EPSILON0 = [350.5, 354.9, 355.0, 700.0, 709.78, 710.0, 1e308]

# (epsilon, delta, sensitivity, sigma solving Theorem 8 in 80-digit arithmetic, relative tolerance).
# The tolerance is what double precision allows there: near epsilon = 1e-6, delta = 1e-300 the
# returned sigma is 2e-7 above the root (its true delta is below the target).
EXACT_SIGMAS = [
    (0.317, 1e-9, math.sqrt(2), 23.390729406821748, 1e-12),
    (1.0, 1e-8, 1.0, 5.1003087875299272, 1e-12),
    (0.01, 1e-12, 1.0, 578.99786706141409, 1e-12),
    (4.0, 1e-12, 1.0, 1.7386172391395599, 1e-12),
    (30.0, 0.5, 1.0, 0.12701068162904742, 1e-12),
    (1e-12, 1e-6, 1.0, 398942.08093051901, 1e-9),
    (5e-324, 1e-6, 1.0, 398942.28040132825, 1e-9),
    (1e-6, 1e-12, 1.0, 4122525.4027566017, 1e-8),
    (1e-6, 1e-100, 1.0, 20321506.708410609, 1e-6),
    (1e-4, 1e-300, 1.0, 366017.42525159196, 1e-8),
    (1e-6, 1e-300, 1.0, 36475988.4809531, 1e-6),
    (1e-6, 1e-300, 1e-50, 3.64759884809531e-43, 1e-6),
    (5e-9, 1e-30, 1.0, 1840695214.3358243, 1e-5),
]


@pytest.mark.parametrize(("epsilon", "delta", "sensitivity", "exact", "tolerance"), EXACT_SIGMAS)
def test_analytic_sigma_matches_the_80_digit_root_up_to_the_edge_of_its_range(
    epsilon: float, delta: float, sensitivity: float, exact: float, tolerance: float
) -> None:
    assert analytic_gaussian_sigma(epsilon, delta, sensitivity) == pytest.approx(exact, rel=tolerance)


@pytest.mark.parametrize(
    ("epsilon", "delta"),
    [
        # (the true delta at the sigma returned before this refusal, as a multiple of the target)
        (1e-9, 1e-300),  # 1.12
        (1e-10, 1e-300),  # 4e90
        (1e-12, 1e-300),  # 6e181
        (1e-8, 1e-200),  # 1.001
        (1e-10, 1e-100),  # 1.05
        (1e-12, 1e-100),  # 2e7
        (1e-12, 1e-30),  # 1.56
        (1e-9, 1e-30),
        (5e-324, 1e-300),
    ],
)
def test_analytic_sigma_refuses_an_epsilon_too_small_for_its_delta(epsilon: float, delta: float) -> None:
    with pytest.raises(ValueError, match=r"^epsilon .* too small for delta"):
        analytic_gaussian_sigma(epsilon, delta, 1.0)


def test_analytic_sigma_accepts_the_calculators_whole_range() -> None:
    # analyses/calculators.py accepts epsilon >= 1e-6 and delta >= 1e-300; its corner must not be refused.
    sigma = analytic_gaussian_sigma(1e-6, 1e-300, 1.0)
    assert analytic_gaussian_delta(sigma, 1e-6, 1.0) <= 1e-300


# dp_accounting 0.6.0: gaussian_mechanism.get_sigma_gaussian(epsilon, delta) (sensitivity 1, Brent's
# method to 1e-12 absolute).
@pytest.mark.parametrize(
    ("epsilon", "delta", "dp_accounting_sigma"),
    [
        (0.317, 1e-9, 16.539743380463264),
        (1.0, 1e-8, 5.100308787529954),
        (0.01, 1e-12, 578.9978670612963),
        (4.0, 1e-12, 1.7386172391395602),
        (0.05, 1e-5, 57.77069524456458),
        (2.0, 1e-6, 2.2304762711864172),
    ],
)
def test_analytic_sigma_agrees_with_dp_accounting(epsilon: float, delta: float, dp_accounting_sigma: float) -> None:
    assert analytic_gaussian_sigma(epsilon, delta, 1.0) == pytest.approx(dp_accounting_sigma, rel=1e-12)


# dp_accounting 0.6.0: RdpAccountant(orders=DEFAULT_ORDERS), compose(GaussianDpEvent(sigma), steps),
# get_epsilon(delta). Both convert by Canonne, Kamath, Steinke 2020, Proposition 12.
@pytest.mark.parametrize(
    ("sigma", "steps", "delta", "dp_accounting_epsilon"),
    [
        (5.0, 1, 1e-6, 0.8999385041732184),
        (20.0, 100, 1e-8, 2.8616953588434946),
        (1.0, 10, 1e-5, 19.05359753163139),
        (50.0, 1000, 1e-10, 4.18034719393332),
    ],
)
def test_gaussian_rdp_composition_agrees_with_dp_accounting(
    sigma: float, steps: int, delta: float, dp_accounting_epsilon: float
) -> None:
    epsilon = rdp_epsilon(rdp_compose([gaussian_rdp(sigma, 1.0, DEFAULT_ORDERS)] * steps), delta)
    assert epsilon == pytest.approx(dp_accounting_epsilon, rel=1e-14)
    assert epsilon >= dp_accounting_epsilon  # rounded up, never down


# dp_accounting 0.6.0: PLDAccountant(value_discretization_interval=1e-4), compose(LaplaceDpEvent(1 /
# epsilon), steps), get_epsilon(delta): the tight epsilon of composed Laplace noise, itself
# epsilon-DP, which no general composition bound may undercut.
@pytest.mark.parametrize(
    ("epsilon", "steps", "delta", "tight"),
    [(0.1, 100, 1e-6, 4.6926674386475), (0.5, 20, 1e-8, 9.989972397412314), (1.0, 10, 1e-5, 9.989962316985146)],
)
def test_composition_bounds_stay_above_dp_accountings_tight_laplace_epsilon(
    epsilon: float, steps: int, delta: float, tight: float
) -> None:
    assert advanced_composition(ApproximateDP(epsilon), steps, delta).epsilon >= tight
    assert rdp_epsilon(rdp_compose([pure_dp_rdp(epsilon)] * steps), delta) >= tight


@pytest.mark.parametrize("delta", SUBNORMAL_OR_TINY)
@pytest.mark.parametrize(
    "call",
    [
        lambda delta: analytic_gaussian_sigma(1.0, delta, 1.0),
        lambda delta: classical_gaussian_sigma(0.5, delta, 1.0),
        lambda delta: closed_form_epsilon(2.0, 10_000, delta),
        lambda delta: min_cohort_closed_form(2.0, 0.3, delta),
        lambda delta: stronger_2022_epsilon(2.0, 10_000, delta),
        lambda delta: clones_2020_epsilon(2.0, 10_000, delta),
        *(lambda delta, method=method: amplified_epsilon(2.0, 10_000, delta, method=method) for method in METHODS),
        *(lambda delta, method=method: min_cohort(2.0, 0.3, delta, method=method) for method in METHODS),
    ],
)
def test_a_delta_below_1e_300_is_refused(call, delta: float) -> None:
    with pytest.raises(ValueError, match=r"^delta must be at least 1e-300"):
        call(delta)


def test_the_delta_floor_itself_is_accepted() -> None:
    assert MIN_DELTA == 1e-300
    assert analytic_gaussian_sigma(1.0, MIN_DELTA, 1.0) == pytest.approx(36.86549789410492, rel=1e-12)
    assert closed_form_epsilon(2.0, 10**7, MIN_DELTA) < 2.0
    for method in METHODS:
        assert amplified_epsilon(2.0, 10**7, MIN_DELTA, method=method) < 2.0
        assert min_cohort(2.0, 1.0, MIN_DELTA, method=method) > 1


@pytest.mark.parametrize("epsilon0", TOO_LARGE_EPSILON0)
@pytest.mark.parametrize(
    "call",
    [
        lambda epsilon0: stronger_2022_epsilon(epsilon0, 1_000, 1e-6),
        lambda epsilon0: clones_2020_epsilon(epsilon0, 1_000, 1e-6),
        *(
            lambda epsilon0, method=method: amplified_epsilon(epsilon0, 1_000, 1e-6, method=method)
            for method in METHODS
        ),
        *(lambda epsilon0, method=method: min_cohort(epsilon0, 1.0, 1e-6, method=method) for method in METHODS),
    ],
)
def test_shuffling_refuses_an_epsilon0_whose_exponential_overflows(call, epsilon0: float) -> None:
    # Before the refusal these raised OverflowError (from math.expm1, or scipy's incomplete beta).
    with pytest.raises(ValueError, match=r"^epsilon0 must be at most 350"):
        call(epsilon0)


@pytest.mark.parametrize("method", ["stronger-2022", "clones-2020"])
def test_shuffling_works_at_the_epsilon0_cap(method: str) -> None:
    assert MAX_EPSILON0 == 350.0
    for n in (1, 1_000, 10**12):
        epsilon = amplified_epsilon(MAX_EPSILON0, n, 1e-300, method=method)
        assert 0 < epsilon <= MAX_EPSILON0
    assert min_cohort(MAX_EPSILON0, MAX_EPSILON0, 1e-6, method=method) == 1
    with pytest.raises(UnreachableEpsilon):
        min_cohort(MAX_EPSILON0, 1.0, 1e-6, method=method)


@pytest.mark.parametrize("epsilon0", TOO_LARGE_EPSILON0)
def test_closed_form_never_overflows_it_says_nothing_above_its_validity_condition(epsilon0: float) -> None:
    # Theorem 3.1 needs epsilon0 <= log(n / (8 log(2/delta)) - 1) < 28 for n <= 1e12: infinity, and
    # an unreachable epsilon (a ValueError), not OverflowError.
    assert closed_form_epsilon(epsilon0, 10**12, 1e-6) == math.inf
    with pytest.raises(UnreachableEpsilon):
        min_cohort_closed_form(epsilon0, 1.0, 1e-6)


# ---------------------------------------------------------------- composition, Renyi, Gaussian: the same refusals


@pytest.mark.parametrize("delta", SUBNORMAL_OR_TINY)
@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda delta: advanced_composition(ApproximateDP(0.1), 10, delta), "delta_prime"),
        (lambda delta: advanced_composition_epsilon(0.1, 0.01, delta), "delta_prime"),
        (lambda delta: rdp_to_dp(1.0, 2.0, delta), "delta"),
        (lambda delta: discrete_gaussian_sigma(1.0, delta), "delta"),
    ],
)
def test_composition_and_the_discrete_gaussian_refuse_a_delta_below_1e_300(call, name: str, delta: float) -> None:
    # rdp_to_dp(1, 2, 5e-324) returned 744.05 and advanced_composition_epsilon(..., 5e-324) infinity.
    with pytest.raises(ValueError, match=rf"^{name} must be at least 1e-300"):
        call(delta)


@pytest.mark.parametrize("epsilon", [700.5, 709.9, 710.0, 1e300])
@pytest.mark.parametrize(
    "call",
    [
        lambda epsilon: advanced_composition(ApproximateDP(epsilon), 2, 1e-6),
        lambda epsilon: poisson_sampling(ApproximateDP(epsilon), 0.5),
        lambda epsilon: pure_dp_rdp(epsilon),
        lambda epsilon: analytic_gaussian_sigma(epsilon, 1e-6, 1.0),
        lambda epsilon: analytic_gaussian_delta(1.0, epsilon, 1.0),
        lambda epsilon: discrete_gaussian_sigma(epsilon, 1e-6),
    ],
)
def test_an_epsilon_whose_exponential_overflows_is_refused(call, epsilon: float) -> None:
    # Before the refusal these raised OverflowError (math.expm1, exp, or a power).
    with pytest.raises(ValueError, match=r"^epsilon must be at most 700"):
        call(epsilon)


def test_the_epsilon_cap_itself_is_accepted() -> None:
    assert poisson_sampling(ApproximateDP(700.0), 0.5).epsilon == pytest.approx(700 + math.log(0.5), rel=1e-12)
    assert math.isfinite(advanced_composition(ApproximateDP(700.0), 1, 1e-6).epsilon)
    assert analytic_gaussian_sigma(700.0, 1e-6, 1.0) > 0
    assert discrete_gaussian_delta(discrete_gaussian_sigma(700.0, 1e-6), 700.0) <= 1e-6


def test_a_gaussian_rdp_curve_that_overflows_is_refused() -> None:
    with pytest.raises(ValueError, match="overflows"):
        gaussian_rdp(1e-200)  # was ZeroDivisionError
    with pytest.raises(ValueError, match="overflows"):
        gaussian_rdp(1.0, 1e200)
