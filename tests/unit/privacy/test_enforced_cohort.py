"""Check 3's minimum cohort: which bound is proven for which randomizer, and the cohort it gives.

The stronger (FMT 2022) bound holds for randomizers with R(x) >= (R(x0) + R(x1)) / (e^eps0 + 1) for
all inputs x, x0, x1 (privacy/enforced_cohort.py derives it); the tests below check that condition,
or its failure, on each mechanism's exact output table, then the cohort itself: reference values,
rounding up, monotonicity, the closed form never tighter, and every refusal.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import numpy.typing as npt
import pytest
import scipy.linalg

from privacy.amplification import UnreachableEpsilon, min_cohort_closed_form
from privacy.enforced_cohort import BOUNDS, ONE_BIT_MEAN, EnforcedCohort, bound_for, min_cohort_enforced
from privacy.hadamard_response import HadamardResponse
from privacy.mechanisms import MECHANISMS, AsymmetricOHE, replacement_epsilon0
from privacy.one_bit_mean import OneBitMean
from privacy.randomized_response import BinaryRandomizedResponse, KaryRandomizedResponse, SymmetricRappor
from privacy.rappor_shuffling import symmetric_rappor_min_cohort
from privacy.shuffling import amplified_epsilon, min_cohort

Table = npt.NDArray[np.float64]
EPSILONS0 = [0.1, 1.0, 3.0, 8.0]
SLACK = 1e-12
# Seed 000 Table 1's age field (the demo analysis demo.keyboard): eps0 = 2, eps = 0.3, delta = 1e-6.
DEMO = (2.0, 0.3, 1e-6)
# docs/examples/perplexity.json (asymmetric OHE on the demo.metrics analysis).
PERPLEXITY = (4.0, 1.0, 1e-6)
# The demo range of the issue: every cohort below is computed once per (family, point).
GRID_EPSILONS0 = [0.5, 1.0, 2.0, 4.0, 8.0]
GRID_EPSILONS = [0.1, 0.3, 1.0, 2.0]
GRID_DELTAS = [1e-10, 1e-6, 1e-4]
# Three-bit reports (bit patterns in itertools.product order) to their first two bits.
DROP_LAST_BIT = np.kron(np.eye(4), np.ones((2, 1)))
NEIGHBOURS = [(0, 1), (1, 0)]


def stronger_clone_ratio(table: Table, pairs: list[tuple[int, int]] | None = None) -> float:
    """min over inputs x, pairs (x0, x1) and outputs y of R(x)(y) / (R(x0)(y) + R(x1)(y))."""
    np.testing.assert_allclose(table.sum(axis=1), 1.0, rtol=0, atol=1e-12)
    inputs = range(table.shape[0])
    pairs = pairs or [(a, b) for a, b in itertools.permutations(inputs, 2)]
    return min(float(np.min(table[x] / (table[a] + table[b]))) for x in inputs for a, b in pairs)


def bits_table(rows: list[list[float]]) -> Table:
    """Reports of independent bits: row x gives each bit's probability of 1, over all bit patterns."""
    outputs = np.array(list(itertools.product([0, 1], repeat=len(rows[0]))))
    return np.array([np.prod(np.where(outputs == 1, row, 1 - np.array(row)), axis=1) for row in rows])


def binary_table(epsilon0: float) -> Table:
    p = BinaryRandomizedResponse(epsilon0=epsilon0).p_flip
    return np.array([[1 - p, p], [p, 1 - p]])


def kary_table(epsilon0: float, domain: int) -> Table:
    mechanism = KaryRandomizedResponse(epsilon0=epsilon0)
    return np.where(np.eye(domain, dtype=bool), mechanism.p_keep(domain), mechanism.p_other(domain))


def asymmetric_ohe_table(epsilon0: float, domain: int) -> Table:
    mechanism = AsymmetricOHE(epsilon0=epsilon0)
    return bits_table(
        [[mechanism.p_own if b == x else mechanism.p_other for b in range(domain)] for x in range(domain)]
    )


def symmetric_rappor_table(deletion_epsilon0: float, domain: int) -> Table:
    p = SymmetricRappor(epsilon0=deletion_epsilon0).p_flip
    return bits_table([[1 - p if b == x else p for b in range(domain)] for x in range(domain)])


def hadamard_table(epsilon0: float, domain: int) -> Table:
    mechanism = HadamardResponse(epsilon0=epsilon0)
    order = mechanism.report_length(domain)
    rows = scipy.linalg.hadamard(order)[1 : domain + 1]
    return np.where(rows == 1, 2 / order * mechanism.p_inside, 2 / order * (1 - mechanism.p_inside))


def threshold(epsilon0: float) -> float:
    return 1 / (math.exp(epsilon0) + 1)


@pytest.mark.parametrize("epsilon0", EPSILONS0)
def test_binary_and_kary_randomized_response_meet_the_stronger_clone_condition(epsilon0: float) -> None:
    assert stronger_clone_ratio(binary_table(epsilon0)) >= threshold(epsilon0) - SLACK
    assert stronger_clone_ratio(kary_table(epsilon0, 6)) == pytest.approx(threshold(epsilon0), rel=1e-12)


@pytest.mark.parametrize("epsilon0", EPSILONS0)
def test_asymmetric_ohe_meets_the_condition_on_the_two_bits_neighbours_change(epsilon0: float) -> None:
    # Neighbours x0 = 0, x1 = 1; value 2 stands for every other value. Bits 0 and 1 only:
    two_bits = asymmetric_ohe_table(epsilon0, 3) @ DROP_LAST_BIT
    assert stronger_clone_ratio(two_bits, NEIGHBOURS) == pytest.approx(threshold(epsilon0), rel=1e-12)
    # The whole report does not meet it (the other value's own bit): hence the reduction.
    assert stronger_clone_ratio(asymmetric_ohe_table(epsilon0, 3), NEIGHBOURS) < threshold(epsilon0)


@pytest.mark.parametrize("deletion_epsilon0", EPSILONS0)
def test_symmetric_rappor_meets_the_condition_at_twice_its_deletion_epsilon0(deletion_epsilon0: float) -> None:
    charged = replacement_epsilon0(SymmetricRappor(epsilon0=deletion_epsilon0))
    assert charged == 2 * deletion_epsilon0
    two_bits = symmetric_rappor_table(deletion_epsilon0, 3) @ DROP_LAST_BIT
    assert stronger_clone_ratio(two_bits, NEIGHBOURS) >= threshold(charged) - SLACK
    assert stronger_clone_ratio(symmetric_rappor_table(deletion_epsilon0, 3), NEIGHBOURS) < threshold(charged)


@pytest.mark.parametrize("epsilon0", EPSILONS0)
def test_one_bit_mean_is_a_mixture_of_randomized_response_that_meets_the_condition(epsilon0: float) -> None:
    mechanism = OneBitMean(epsilon0=epsilon0, upper=10.0)
    values = np.linspace(0.0, 10.0, 41)
    ones = mechanism.probability_one(values)
    table = np.column_stack([1 - ones, ones])
    # Each report mixes the reports of 0 and of m (weights 1 - x/m, x/m): that is binary RR of a
    # Bernoulli(x/m) bit, and the pair to compare is (0, m) by joint convexity.
    np.testing.assert_allclose(
        table, np.outer(1 - values / 10, table[0]) + np.outer(values / 10, table[-1]), atol=1e-15
    )
    np.testing.assert_allclose(table[[0, -1]], binary_table(epsilon0), atol=1e-15)
    assert (
        stronger_clone_ratio(table, pairs=[(0, len(values) - 1), (len(values) - 1, 0)]) >= threshold(epsilon0) - SLACK
    )


@pytest.mark.parametrize("epsilon0", EPSILONS0)
@pytest.mark.parametrize("domain", [4, 7, 20])
def test_hadamard_response_fails_the_stronger_condition_and_meets_the_2020_one(epsilon0: float, domain: int) -> None:
    table = hadamard_table(epsilon0, domain)
    ratio = stronger_clone_ratio(table)
    assert ratio == pytest.approx(math.exp(-epsilon0) / 2, rel=1e-12)  # each other report a clone w.p. e^-eps0
    assert ratio < threshold(epsilon0)


@pytest.mark.parametrize("epsilon0", EPSILONS0)
@pytest.mark.parametrize("domain", [2, 3])
def test_hadamard_response_meets_the_stronger_condition_on_domains_of_at_most_3_values(
    epsilon0: float, domain: int
) -> None:
    table = hadamard_table(epsilon0, domain)
    assert table.shape == (domain, 4)  # K = 4
    ratio = stronger_clone_ratio(table)
    assert ratio >= threshold(epsilon0) - SLACK
    assert ratio == pytest.approx(threshold(epsilon0), rel=1e-12)  # equality: an output in x0's set alone


@pytest.mark.parametrize("epsilon0", EPSILONS0)
def test_hadamard_response_fails_the_stronger_condition_from_4_values(epsilon0: float) -> None:
    table = hadamard_table(epsilon0, 4)
    assert table.shape == (4, 8)  # K = 8
    assert stronger_clone_ratio(table) < threshold(epsilon0)
    # The first failure: inputs 0, 1, 2 (rows 1, 2, 3) are the 3-value domain, which meets it.
    assert stronger_clone_ratio(table[:3]) >= threshold(epsilon0) - SLACK


@pytest.mark.parametrize(
    ("domain_size", "method"),
    [(None, "clones-2020"), (1, "stronger-2022"), (2, "stronger-2022"), (3, "stronger-2022"), (4, "clones-2020")]
    + [(size, "clones-2020") for size in (7, 20, 1_024)],
)
def test_hadamard_response_uses_the_stronger_bound_exactly_when_the_domain_has_at_most_3_values(
    domain_size: int | None, method: str
) -> None:
    result = min_cohort_enforced(
        mechanism="hadamard_response", epsilon0=2.0, epsilon=0.3, delta=1e-6, domain_size=domain_size
    )
    assert result.method == method
    assert result.min_cohort == {"stronger-2022": 1_670, "clones-2020": 2_944}[method]
    assert bound_for("hadamard_response", domain_size)[0] == method


@pytest.mark.parametrize("mechanism", sorted(set(BOUNDS) - {"hadamard_response"}))
def test_the_domain_size_changes_no_other_mechanism_bound(mechanism: str) -> None:
    for domain_size in (None, 1, 2, 3, 4, 1_024):
        assert bound_for(mechanism, domain_size) == BOUNDS[mechanism]


@pytest.mark.parametrize("domain_size", [0, -3, 2.5, True, "3", math.nan])
def test_min_cohort_refuses_a_domain_size_that_is_not_a_positive_integer(domain_size: object) -> None:
    with pytest.raises(ValueError, match=r"^domain_size must be an integer of at least 1 or None"):
        min_cohort_enforced(
            mechanism="hadamard_response", epsilon0=2.0, epsilon=0.3, delta=1e-6, domain_size=domain_size
        )


def test_every_recipe_mechanism_and_the_one_bit_mean_have_a_bound() -> None:
    assert set(BOUNDS) == set(MECHANISMS) | {ONE_BIT_MEAN}
    assert {name: method for name, (method, _) in BOUNDS.items()} == {
        "asymmetric_ohe": "stronger-2022",
        "symmetric_rappor": "stronger-2022-per-coordinate",
        "binary_rr": "stronger-2022",
        "kary_rr": "stronger-2022",
        "one_bit_mean": "stronger-2022",
        "hadamard_response": "clones-2020",
    }


@pytest.mark.parametrize(
    ("mechanism", "parameters", "expected"),
    [
        # privacy.shuffling.min_cohort, computed once and kept; the closed form gives 19,485 and 8,762.
        ("binary_rr", DEMO, 1_670),
        ("asymmetric_ohe", DEMO, 1_670),
        ("hadamard_response", DEMO, 2_944),
        ("asymmetric_ohe", PERPLEXITY, 2_203),
        ("hadamard_response", PERPLEXITY, 4_330),
        ("kary_rr", (3.0, 1.0, 1e-6), 736),
        ("kary_rr", (4.0, 0.61, 1e-10), 9_861),
        ("hadamard_response", (1.0, 0.1, 1e-8), 4_908),
    ],
)
def test_min_cohort_reproduces_reference_values(mechanism: str, parameters: tuple, expected: int) -> None:
    epsilon0, epsilon, delta = parameters
    result = min_cohort_enforced(mechanism=mechanism, epsilon0=epsilon0, epsilon=epsilon, delta=delta)
    assert result == EnforcedCohort(expected, BOUNDS[mechanism][0], BOUNDS[mechanism][1])
    assert result.min_cohort == min_cohort(epsilon0, epsilon, delta, method=result.method)


def test_demo_cohort_is_far_below_the_closed_form_the_devices_use_today() -> None:
    assert min_cohort_closed_form(*DEMO) == 19_485
    assert min_cohort_enforced(mechanism="asymmetric_ohe", epsilon0=2.0, epsilon=0.3, delta=1e-6).min_cohort == 1_670


@pytest.mark.parametrize(
    ("deletion_epsilon0", "epsilon", "before", "after"),
    [(1.0, 0.3, 1_670, 543), (2.0, 0.3, 17_745, 3_322), (2.0, 1.0, 2_203, 370)],  # (2, 0.3): the audit's case
)
def test_symmetric_rappor_takes_the_replacement_epsilon0_and_the_per_coordinate_bound(
    deletion_epsilon0: float, epsilon: float, before: int, after: int
) -> None:
    charged = replacement_epsilon0(SymmetricRappor(epsilon0=deletion_epsilon0))
    rappor = min_cohort_enforced(mechanism="symmetric_rappor", epsilon0=charged, epsilon=epsilon, delta=1e-6)
    # Before: FMT 2022 at the replacement epsilon0 (binary RR at that epsilon0 has the same cohort).
    binary = min_cohort_enforced(mechanism="binary_rr", epsilon0=charged, epsilon=epsilon, delta=1e-6)
    assert binary.min_cohort == before
    assert rappor == EnforcedCohort(after, "stronger-2022-per-coordinate", BOUNDS["symmetric_rappor"][1])
    assert rappor.min_cohort == symmetric_rappor_min_cohort(deletion_epsilon0, epsilon, 1e-6)
    assert "deletion epsilon0" in rappor.reason


@pytest.mark.parametrize(
    ("mechanism", "parameters"),
    [
        ("asymmetric_ohe", DEMO),
        ("hadamard_response", DEMO),
        ("asymmetric_ohe", PERPLEXITY),
        ("hadamard_response", PERPLEXITY),
        ("kary_rr", (0.5, 0.1, 1e-10)),
        ("hadamard_response", (8.0, 2.0, 1e-4)),
        ("binary_rr", (8.0, 0.1, 1e-6)),
    ],
)
def test_min_cohort_reaches_epsilon_and_one_fewer_report_does_not(mechanism: str, parameters: tuple) -> None:
    epsilon0, epsilon, delta = parameters
    result = min_cohort_enforced(mechanism=mechanism, epsilon0=epsilon0, epsilon=epsilon, delta=delta)
    assert amplified_epsilon(epsilon0, result.min_cohort, delta, method=result.method) <= epsilon
    assert amplified_epsilon(epsilon0, result.min_cohort - 1, delta, method=result.method) > epsilon


def test_one_report_is_enough_when_epsilon_is_the_local_epsilon() -> None:
    for mechanism in BOUNDS:
        assert min_cohort_enforced(mechanism=mechanism, epsilon0=2.0, epsilon=2.0, delta=1e-6).min_cohort == 1


@pytest.fixture(scope="module")
def grid() -> dict[tuple[str, float, float, float], int]:
    """Cohorts over the demo range for one mechanism of each bound, and the closed form's."""
    cohorts = {}
    for point in itertools.product(GRID_EPSILONS0, GRID_EPSILONS, GRID_DELTAS):
        epsilon0, epsilon, delta = point
        for mechanism in ("kary_rr", "hadamard_response"):
            cohorts[(mechanism, *point)] = min_cohort_enforced(
                mechanism=mechanism, epsilon0=epsilon0, epsilon=epsilon, delta=delta
            ).min_cohort
        cohorts[("closed-form", *point)] = min_cohort_closed_form(epsilon0, epsilon, delta)
    return cohorts


@pytest.mark.parametrize("family", ["kary_rr", "hadamard_response", "closed-form"])
def test_min_cohort_falls_with_epsilon_and_rises_with_epsilon0_and_with_smaller_delta(grid, family: str) -> None:
    for epsilon0, delta in itertools.product(GRID_EPSILONS0, GRID_DELTAS):
        by_epsilon = [grid[(family, epsilon0, epsilon, delta)] for epsilon in GRID_EPSILONS]
        assert by_epsilon == sorted(by_epsilon, reverse=True)
    for epsilon, delta in itertools.product(GRID_EPSILONS, GRID_DELTAS):
        by_epsilon0 = [grid[(family, epsilon0, epsilon, delta)] for epsilon0 in GRID_EPSILONS0]
        assert by_epsilon0 == sorted(by_epsilon0)
    for epsilon0, epsilon in itertools.product(GRID_EPSILONS0, GRID_EPSILONS):
        by_delta = [grid[(family, epsilon0, epsilon, delta)] for delta in GRID_DELTAS]
        assert by_delta == sorted(by_delta, reverse=True)


def test_stronger_bound_is_never_looser_than_clones_and_the_closed_form_never_tighter(grid) -> None:
    for point in itertools.product(GRID_EPSILONS0, GRID_EPSILONS, GRID_DELTAS):
        assert grid[("kary_rr", *point)] <= grid[("hadamard_response", *point)] <= grid[("closed-form", *point)]


def test_min_cohort_refuses_an_epsilon_no_cohort_reaches() -> None:
    with pytest.raises(UnreachableEpsilon):
        min_cohort_enforced(mechanism="kary_rr", epsilon0=10.0, epsilon=1e-5, delta=1e-12)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"mechanism": "laplace"}, r"^mechanism must be one of asymmetric_ohe, binary_rr, "),
        ({"mechanism": None}, r"^mechanism must be one of"),
        ({"epsilon0": 0.0}, r"^epsilon0 must be a positive finite number"),
        ({"epsilon0": -1.0}, r"^epsilon0 must be a positive finite number"),
        ({"epsilon0": math.nan}, r"^epsilon0 must be a finite real number"),
        ({"epsilon0": math.inf}, r"^epsilon0 must be a finite real number"),
        ({"epsilon0": True}, r"^epsilon0 must be a finite real number"),
        ({"epsilon0": "2"}, r"^epsilon0 must be a finite real number"),
        ({"epsilon0": 350.5}, r"^epsilon0 must be at most 350"),
        ({"epsilon0": 700.0}, r"^epsilon0 must be at most 350"),
        ({"epsilon0": 710.0}, r"^epsilon0 must be at most 350"),
        ({"epsilon0": 1e308}, r"^epsilon0 must be at most 350"),
        ({"epsilon": 0.0}, r"^epsilon must be a positive finite number"),
        ({"epsilon": -0.3}, r"^epsilon must be a positive finite number"),
        ({"epsilon": math.nan}, r"^epsilon must be a finite real number"),
        ({"epsilon": math.inf}, r"^epsilon must be a finite real number"),
        ({"delta": 0.0}, r"^delta must lie strictly between 0 and 1"),
        ({"delta": 1.0}, r"^delta must lie strictly between 0 and 1"),
        ({"delta": 1.5}, r"^delta must lie strictly between 0 and 1"),
        ({"delta": -1e-6}, r"^delta must lie strictly between 0 and 1"),
        ({"delta": math.nan}, r"^delta must be a finite real number"),
        ({"delta": 1e-301}, r"^delta must be at least 1e-300"),
        ({"delta": 1e-310}, r"^delta must be at least 1e-300"),
        ({"delta": 5e-324}, r"^delta must be at least 1e-300"),
    ],
)
def test_min_cohort_refuses_invalid_parameters(changes: dict, message: str) -> None:
    arguments = {"mechanism": "asymmetric_ohe", "epsilon0": 2.0, "epsilon": 0.3, "delta": 1e-6} | changes
    with pytest.raises(ValueError, match=message):
        min_cohort_enforced(**arguments)


def test_the_valid_arguments_shared_with_the_refusals_give_the_demo_cohort() -> None:
    # The refusals above change one argument of this call, so they fail for that argument alone.
    assert min_cohort_enforced(mechanism="asymmetric_ohe", epsilon0=2.0, epsilon=0.3, delta=1e-6).min_cohort == 1_670
