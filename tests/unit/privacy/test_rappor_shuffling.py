"""Symmetric RAPPOR's aggregate bound (privacy/rappor_shuffling.py) against the exact delta of summed reports.

The bound is D_{e^eps}(P x P || Q x Q) for FMT 2022's clone pair at the deletion epsilon0. The tests
below check (1) that it is never below the TRUE delta of the sum of n symmetric RAPPOR reports,
computed by exact enumeration over every dataset of small size (every multiset of the other
devices' values: the sum does not depend on their order; the changed device's value 0 against 1,
every other pair of values being a relabelling of the coordinates), on the whole k-dimensional sum;
(2) that its numerics only round up, against the same quantity computed without any window, block
or grid; (3) the cohorts it gives, tighter than FMT 2022 at the replacement epsilon0 2 eps0.
"""

from __future__ import annotations

import functools
import itertools
import math

import numpy as np
import numpy.typing as npt
import pytest
from scipy import special, stats

from privacy.randomized_response import SymmetricRappor
from privacy.rappor_shuffling import (
    symmetric_rappor_delta,
    symmetric_rappor_epsilon,
    symmetric_rappor_min_cohort,
)
from privacy.shuffling import min_cohort, stronger_2022_epsilon

Distribution = npt.NDArray[np.float64]


def report_distribution(value: int, domain: int, deletion_epsilon0: float) -> Distribution:
    """P(report = bits) over {0, 1}^domain, as an array of shape (2,) * domain: each bit flipped w.p. p."""
    p = SymmetricRappor(epsilon0=deletion_epsilon0).p_flip
    table = np.ones((2,) * domain)
    for bits in itertools.product([0, 1], repeat=domain):
        table[bits] = math.prod((1 - p if bit == (d == value) else p) for d, bit in enumerate(bits))
    return table


def sum_distribution(values: tuple[int, ...], domain: int, deletion_epsilon0: float) -> Distribution:
    """P(sum of the reports = s) over s in {0..n}^domain, by adding the devices one at a time (no
    independence between coordinates assumed: each device's whole report distribution is convolved)."""
    n = len(values)
    total = np.zeros((n + 1,) * domain)
    total[(0,) * domain] = 1.0
    for value in values:
        report = report_distribution(value, domain, deletion_epsilon0)
        new = np.zeros_like(total)
        for bits in itertools.product([0, 1], repeat=domain):
            source = tuple(slice(0, n + 1 - b) for b in bits)
            target = tuple(slice(b, n + 1) for b in bits)
            new[target] += report[bits] * total[source]
        total = new
    return total


def hockey_stick(first: Distribution, second: Distribution, epsilon: float) -> float:
    return float(np.maximum(first - math.exp(epsilon) * second, 0.0).sum())


@functools.cache
def neighbouring_sums(n: int, domain: int, deletion_epsilon0: float) -> list[tuple[Distribution, Distribution]]:
    """For every dataset of n devices (one device's value 0 against 1, every multiset of the others'
    values), the laws of the summed reports in the two worlds."""
    return [
        (
            sum_distribution((0, *others), domain, deletion_epsilon0),
            sum_distribution((1, *others), domain, deletion_epsilon0),
        )
        for others in itertools.combinations_with_replacement(range(domain), n - 1)
    ]


def true_delta(n: int, domain: int, deletion_epsilon0: float, epsilon: float) -> float:
    """max over every dataset and both orders of D_{e^eps} between the laws of the summed reports."""
    return max(
        max(hockey_stick(world0, world1, epsilon), hockey_stick(world1, world0, epsilon))
        for world0, world1 in neighbouring_sums(n, domain, deletion_epsilon0)
    )


def clone_pair_product_delta(deletion_epsilon0: float, n: int, epsilon: float) -> float:
    """D_{e^eps}(P x P || Q x Q) for the clone pair, from every outcome: no window, block or grid.

    The pair's outcomes (c, k) have losses l = log(P/Q); under P x P the loss is l1 + l2, and
    delta = sum_{i, j} w_i w_j (1 - e^(eps - l_i - l_j))_+, summed over sorted losses exactly.
    """
    a = special.expit(deletion_epsilon0)
    q = 2 * special.expit(-deletion_epsilon0)
    losses, masses = [], []
    for c in range(n):
        b = stats.binom.pmf(np.arange(c + 1), c, 0.5)
        now, before = np.append(b, 0.0), np.insert(b, 0, 0.0)
        p_mass, q_mass = a * now + (1 - a) * before, (1 - a) * now + a * before
        kept = (p_mass > 0) & (q_mass > 0)  # far in the tails b underflows to 0: no mass left to count
        losses.append(np.log(p_mass[kept] / q_mass[kept]))
        masses.append(stats.binom.pmf(c, n - 1, q) * p_mass[kept])
    loss, mass = np.concatenate(losses), np.concatenate(masses)
    order = np.argsort(loss)
    loss, mass = loss[order], mass[order]
    above = np.cumsum(mass[::-1])[::-1]  # sum over j >= index
    above_scaled = np.cumsum((mass * np.exp(-loss))[::-1])[::-1]
    first = np.searchsorted(loss, epsilon - loss, side="right")  # first j with l_j > eps - l_i
    inside = first < loss.size
    index = np.minimum(first, loss.size - 1)
    per_i = np.where(inside, above[index] - np.exp(epsilon - loss) * above_scaled[index], 0.0)
    return float(np.dot(mass, per_i))


# (n, domain, deletion epsilon0): every dataset of n devices on the whole domain-dimensional sum.
ENUMERATED = [(n, 3, e) for n in range(2, 8) for e in (0.5, 1.0, 2.0)] + [(n, 4, 1.0) for n in range(2, 6)]


@pytest.mark.parametrize(("n", "domain", "deletion_epsilon0"), ENUMERATED)
@pytest.mark.parametrize("delta", [0.1, 1e-3])
def test_the_bound_is_never_below_the_exact_delta_of_the_summed_reports(
    n: int, domain: int, deletion_epsilon0: float, delta: float
) -> None:
    epsilon = symmetric_rappor_epsilon(deletion_epsilon0, n, delta)
    assert true_delta(n, domain, deletion_epsilon0, epsilon) <= delta * (1 + 1e-9)
    # And as a delta at fixed epsilons.
    for fixed in (0.25 * deletion_epsilon0, deletion_epsilon0, 1.5 * deletion_epsilon0):
        exact = true_delta(n, domain, deletion_epsilon0, fixed)
        assert exact <= symmetric_rappor_delta(deletion_epsilon0, n, fixed) * (1 + 1e-9)


@pytest.mark.parametrize("deletion_epsilon0", [0.5, 1.0, 2.0])
def test_the_bound_is_tighter_than_fmt_2022_at_twice_the_epsilon0_already_at_small_n(deletion_epsilon0: float) -> None:
    for n in (5, 7):
        new = symmetric_rappor_epsilon(deletion_epsilon0, n, 1e-2)
        assert new < stronger_2022_epsilon(2 * deletion_epsilon0, n, 1e-2)


@pytest.mark.parametrize(
    ("deletion_epsilon0", "n", "epsilon"),
    [(e, n, eps) for e, n in [(0.5, 4), (1.0, 30), (2.0, 60), (1.0, 300)] for eps in (0.05, 0.2, 0.6)]
    + [(2.0, 1_500, 0.2)],  # clone counts in blocks, values of A in windows
)
def test_windows_blocks_and_grid_only_round_up(deletion_epsilon0: float, n: int, epsilon: float) -> None:
    exact = clone_pair_product_delta(deletion_epsilon0, n, epsilon)
    bound = symmetric_rappor_delta(deletion_epsilon0, n, epsilon)
    assert exact <= bound
    # Not loose either: the grid costs at most 2 epsilon / 1024 in epsilon, the blocks little more.
    assert bound <= clone_pair_product_delta(deletion_epsilon0, n, epsilon * (1 - 4 / 1024)) * 1.5


@pytest.mark.parametrize(
    ("deletion_epsilon0", "epsilon", "delta", "before", "after"),
    [
        # Before: privacy.shuffling.min_cohort at the replacement epsilon0 2 eps0 (check 3 until now).
        (1.0, 0.3, 1e-6, 1_670, 543),
        (2.0, 0.3, 1e-6, 17_745, 3_322),  # the audit's case: seed 000 Table 1's age field at eps0 = 2
        (2.0, 1.0, 1e-6, 2_203, 370),
        (4.0, 0.3, 1e-6, 1_022_743, 35_249),
    ],
)
def test_min_cohort_reproduces_reference_values(
    deletion_epsilon0: float, epsilon: float, delta: float, before: int, after: int
) -> None:
    assert min_cohort(2 * deletion_epsilon0, epsilon, delta, method="stronger-2022") == before
    assert symmetric_rappor_min_cohort(deletion_epsilon0, epsilon, delta) == after


@pytest.mark.parametrize(
    ("deletion_epsilon0", "epsilon", "delta"), [(1.0, 0.3, 1e-6), (2.0, 0.3, 1e-6), (0.5, 0.1, 1e-8)]
)
def test_min_cohort_reaches_epsilon_and_one_fewer_report_does_not(
    deletion_epsilon0: float, epsilon: float, delta: float
) -> None:
    n = symmetric_rappor_min_cohort(deletion_epsilon0, epsilon, delta)
    assert symmetric_rappor_delta(deletion_epsilon0, n, epsilon, target_delta=delta) <= delta
    assert symmetric_rappor_delta(deletion_epsilon0, n - 1, epsilon, target_delta=delta) > delta


def test_the_audit_case_epsilon_at_17745_reports() -> None:
    # The audit: at 17,745 reports (the FMT 2022 cohort at 2 eps0 = 4) the true epsilon is about 0.09.
    old = stronger_2022_epsilon(4.0, 17_745, 1e-6)
    new = symmetric_rappor_epsilon(2.0, 17_745, 1e-6)
    assert old == pytest.approx(0.3, abs=1e-4)
    assert 0.09 < new < 0.13


def test_deltas_near_the_smallest_double_stay_a_bound() -> None:
    # The windows then reach where the binomial pmf underflows: those outcomes are charged in full.
    tiny = symmetric_rappor_delta(1.0, 100_000, 0.3, target_delta=1e-300)
    assert 0 < tiny < 1e-250
    cohort = symmetric_rappor_min_cohort(1.0, 0.5, 1e-200)
    assert cohort <= min_cohort(2.0, 0.5, 1e-200, method="stronger-2022")
    assert symmetric_rappor_delta(1.0, cohort, 0.5, target_delta=1e-200) <= 1e-200


def test_one_report_is_enough_when_epsilon_is_the_replacement_epsilon0() -> None:
    assert symmetric_rappor_min_cohort(1.0, 2.0, 1e-6) == 1


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: symmetric_rappor_delta(0.0, 10, 0.1), "deletion_epsilon0"),
        (lambda: symmetric_rappor_delta(176.0, 10, 0.1), "deletion_epsilon0"),
        (lambda: symmetric_rappor_delta(1.0, 0, 0.1), "n"),
        (lambda: symmetric_rappor_delta(1.0, 2.5, 0.1), "n"),
        (lambda: symmetric_rappor_delta(1.0, 10, math.nan), "epsilon"),
        (lambda: symmetric_rappor_epsilon(1.0, 10, 0.0), "delta"),
        (lambda: symmetric_rappor_min_cohort(math.inf, 0.3, 1e-6), "epsilon0"),  # the replacement one, 2 eps0
        (lambda: symmetric_rappor_min_cohort(0.0, 0.3, 1e-6), "epsilon0"),
        (lambda: symmetric_rappor_min_cohort(1.0, 0.0, 1e-6), "epsilon"),
        (lambda: symmetric_rappor_min_cohort(1.0, 0.3, 1.0), "delta"),
    ],
)
def test_invalid_parameters_raise_value_error_naming_the_parameter(call, message: str) -> None:
    with pytest.raises(ValueError, match=rf"^{message} "):
        call()
