from __future__ import annotations

import math

import pytest

from privacy.amplification import UnreachableEpsilon, closed_form_epsilon, min_cohort_closed_form


@pytest.mark.parametrize(
    ("epsilon0", "n", "delta", "expected"),
    [
        # eqn (1) of seed 000 evaluated in 40-digit decimal arithmetic.
        (4.0, 100_000, 1e-6, 0.40779258716111255),
        (3.0, 2_935, 1e-6, 0.99994364208146003),
    ],
)
def test_closed_form_matches_theorem_3_1(epsilon0: float, n: int, delta: float, expected: float) -> None:
    e0 = math.exp(epsilon0)
    by_hand = math.log(1 + (e0 - 1) * (4 * math.sqrt(2 * math.log(4 / delta)) / math.sqrt((e0 + 1) * n) + 4 / n))
    assert closed_form_epsilon(epsilon0, n, delta) == pytest.approx(by_hand, rel=1e-12)
    assert closed_form_epsilon(epsilon0, n, delta) == pytest.approx(expected, rel=1e-12)


def test_closed_form_never_rounds_below_the_formula() -> None:
    e0 = math.exp(4.0)
    by_hand = math.log1p((e0 - 1) * (4 * math.sqrt(2 * math.log(4 / 1e-6)) / math.sqrt((e0 + 1) * 1e5) + 4e-5))
    assert closed_form_epsilon(4.0, 100_000, 1e-6) >= by_hand


def test_closed_form_is_at_most_the_published_0_5378_for_4_1e5_1e6() -> None:
    assert closed_form_epsilon(4.0, 100_000, 1e-6) <= 0.5378


def test_closed_form_is_infinite_outside_its_validity_condition() -> None:
    # eps0 <= log(n / (8 log(2/delta)) - 1) fails for eps0 = 8 at n = 10,000.
    assert closed_form_epsilon(8.0, 10_000, 1e-6) == math.inf


@pytest.mark.parametrize(("epsilon0", "epsilon", "delta"), [(3.0, 1.0, 1e-6), (2.0, 0.3, 1e-6), (6.0, 2.0, 1e-8)])
def test_min_cohort_is_the_smallest_cohort_that_reaches_epsilon(epsilon0: float, epsilon: float, delta: float) -> None:
    m = min_cohort_closed_form(epsilon0, epsilon, delta)
    assert closed_form_epsilon(epsilon0, m, delta) <= epsilon
    assert closed_form_epsilon(epsilon0, m - 1, delta) > epsilon


def test_min_cohort_reproduces_figure_1_of_seed_000() -> None:
    # "a 3-DP local randomizer ... is at most (1, 1e-6)-DP once n > 1,000" with the numerical
    # bound; the looser closed form needs more, but the same order of magnitude.
    assert 1_000 < min_cohort_closed_form(3.0, 1.0, 1e-6) < 10_000


def test_min_cohort_refuses_an_unreachable_epsilon() -> None:
    with pytest.raises(UnreachableEpsilon):
        min_cohort_closed_form(1.0, 1e-9, 1e-12)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"epsilon0": 0.0, "epsilon": 1.0, "delta": 1e-6}, "epsilon0"),
        ({"epsilon0": 1.0, "epsilon": 1.0, "delta": 1.0}, "delta"),
        ({"epsilon0": 1.0, "epsilon": 1.0, "delta": 0.0}, "delta"),
        ({"epsilon0": 1.0, "epsilon": -1.0, "delta": 1e-6}, "epsilon"),
    ],
)
def test_min_cohort_names_the_invalid_parameter(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        min_cohort_closed_form(**kwargs)
