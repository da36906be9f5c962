"""Exact local-DP checks: enumerate every output of every mechanism on a small domain.

Each table below holds a mechanism's exact output distribution, one row per input, computed from
its stated probabilities (for Hadamard response from scipy's Hadamard matrix, independently of the
mechanism's bit tricks). A seeded chi-square test ties every table to the mechanism's sampler.
Replacement model: every ratio between two inputs is within e^epsilon0. Deletion model: every
ratio between an input and the reference distribution is.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

import numpy as np
import numpy.typing as npt
import pytest
import scipy.linalg
import scipy.stats

from privacy.hadamard_response import HadamardResponse
from privacy.mechanisms import MECHANISMS, AsymmetricOHE, FrequencyOracle, mechanism_get
from privacy.one_bit_mean import MemoizedOneBitMean, OneBitMean
from privacy.randomized_response import BinaryRandomizedResponse, KaryRandomizedResponse, SymmetricRappor

EPSILONS = [0.1, 1.0, 3.0]
SLACK = 1e-12
Table = npt.NDArray[np.float64]


def worst_replacement_log_ratio(table: Table) -> float:
    """max over outputs and pairs of inputs of ln(P(output | a)/P(output | b)); inf if one is 0."""
    np.testing.assert_allclose(table.sum(axis=1), 1.0, rtol=0, atol=1e-12)
    high, low = table.max(axis=0), table.min(axis=0)
    if np.any((low == 0) & (high > 0)):
        return math.inf
    seen = high > 0
    return float(np.max(np.log(high[seen] / low[seen])))


def worst_deletion_log_ratio(table: Table, reference: npt.NDArray[np.float64]) -> float:
    """max over outputs and inputs of |ln(P(output | input)/R(output))|; inf if only one is 0."""
    np.testing.assert_allclose(table.sum(axis=1), 1.0, rtol=0, atol=1e-12)
    assert reference.sum() == pytest.approx(1.0, abs=1e-12)
    if np.any((table == 0) != (reference == 0)):
        return math.inf
    seen = reference > 0
    return float(np.max(np.abs(np.log(table[:, seen] / reference[seen]))))


def unary_encoding_table(p_own: float, p_other: float, domain: int) -> Table:
    """Bitwise randomized one-hot: bit d is 1 w.p. p_own if d is the value, else p_other."""
    outputs = np.array(list(itertools.product([0, 1], repeat=domain)))
    table = np.ones((domain, outputs.shape[0]))
    for value in range(domain):
        for bucket in range(domain):
            p_one = p_own if bucket == value else p_other
            table[value] *= np.where(outputs[:, bucket] == 1, p_one, 1 - p_one)
    return table


def hadamard_table(mechanism: HadamardResponse, domain: int) -> Table:
    order = mechanism.report_length(domain)
    rows = scipy.linalg.hadamard(order)[1 : domain + 1]
    inside, outside = 2 / order * mechanism.p_inside, 2 / order * (1 - mechanism.p_inside)
    return np.where(rows == 1, inside, outside)


def kary_table(mechanism: KaryRandomizedResponse, domain: int) -> Table:
    p, q = mechanism.p_keep(domain), mechanism.p_other(domain)
    return np.where(np.eye(domain, dtype=bool), p, q)


def binary_table(mechanism: BinaryRandomizedResponse, domain: int) -> Table:
    p = mechanism.p_flip
    return np.array([[1 - p, p], [p, 1 - p]])


# name -> (domain used, exact table, index of each privatize() report row in the table's outputs)
EXACT: dict[str, tuple[int, Callable[..., Table], Callable[[npt.NDArray[np.uint8]], npt.NDArray[np.int64]]]] = {
    "asymmetric_ohe": (4, lambda m, k: unary_encoding_table(m.p_own, m.p_other, k), lambda r: _bits_index(r)),
    "symmetric_rappor": (4, lambda m, k: unary_encoding_table(1 - m.p_flip, m.p_flip, k), lambda r: _bits_index(r)),
    "binary_rr": (2, binary_table, lambda r: r[:, 0].astype(np.int64)),
    "kary_rr": (4, kary_table, lambda r: r.argmax(axis=1)),
    "hadamard_response": (3, hadamard_table, lambda r: r.argmax(axis=1)),
}


def _bits_index(reports: npt.NDArray[np.uint8]) -> npt.NDArray[np.int64]:
    """The row of a bit vector in itertools.product([0, 1], repeat=k) order."""
    weights = 1 << np.arange(reports.shape[1] - 1, -1, -1)
    return reports.astype(np.int64) @ weights


def exact_table(mechanism: FrequencyOracle) -> Table:
    domain, build, _ = EXACT[mechanism.name]
    return build(mechanism, domain)


def test_every_registered_mechanism_has_an_exact_distribution() -> None:
    assert set(EXACT) == set(MECHANISMS)


@pytest.mark.parametrize("epsilon0", EPSILONS)
@pytest.mark.parametrize("name", sorted(n for n, cls in MECHANISMS.items() if cls.privacy_model == "replacement"))
def test_replacement_mechanism_is_epsilon0_ldp_and_tight(name: str, epsilon0: float) -> None:
    worst = worst_replacement_log_ratio(exact_table(mechanism_get(name, epsilon0)))
    assert worst <= epsilon0 + SLACK
    assert worst == pytest.approx(epsilon0)  # no privacy is wasted


@pytest.mark.parametrize("epsilon0", EPSILONS)
def test_symmetric_rappor_is_epsilon0_ldp_in_the_deletion_model(epsilon0: float) -> None:
    mechanism = SymmetricRappor(epsilon0=epsilon0)
    assert mechanism.privacy_model == "deletion"
    # The reference distribution: the all-zero vector with every bit flipped (no data at all).
    reference = unary_encoding_table(mechanism.p_flip, mechanism.p_flip, 4)[0]
    worst = worst_deletion_log_ratio(exact_table(mechanism), reference)
    assert worst <= epsilon0 + SLACK
    assert worst == pytest.approx(epsilon0)


@pytest.mark.parametrize("epsilon0", EPSILONS)
def test_symmetric_rappor_costs_exactly_twice_epsilon0_in_the_replacement_model(epsilon0: float) -> None:
    mechanism = SymmetricRappor(epsilon0=epsilon0)
    worst = worst_replacement_log_ratio(exact_table(mechanism))
    assert worst == pytest.approx(mechanism.replacement_epsilon0) == pytest.approx(2 * epsilon0)


def _misparameterized_unary_encodings(epsilon0: float) -> list[tuple[float, float, float]]:
    """(p_own, p_other, true worst log-ratio) of unary encodings wrongly sold as epsilon0-LDP."""
    e = math.exp(epsilon0)
    return [
        # Symmetric per-bit randomized response at epsilon0 per bit: two bits change, 2 epsilon0.
        (e / (e + 1), 1 / (e + 1), 2 * epsilon0),
        # Asymmetric OHE with the own bit kept at 3/4 instead of 1/2.
        (0.75, 1 / (e + 1), math.log(3) + epsilon0),
    ]


@pytest.mark.parametrize("epsilon0", EPSILONS)
def test_a_misparameterized_unary_encoding_is_caught(epsilon0: float) -> None:
    for p_own, p_other, true_worst in _misparameterized_unary_encodings(epsilon0):
        worst = worst_replacement_log_ratio(unary_encoding_table(p_own, p_other, 3))
        assert worst > epsilon0 + 0.05
        assert worst == pytest.approx(true_worst)
    correct = AsymmetricOHE(epsilon0=epsilon0)
    assert worst_replacement_log_ratio(unary_encoding_table(correct.p_own, correct.p_other, 3)) <= epsilon0 + SLACK


def test_the_deletion_check_catches_a_reference_that_is_too_far() -> None:
    mechanism = SymmetricRappor(epsilon0=1.0)
    uniform = np.full(16, 1 / 16)
    assert worst_deletion_log_ratio(exact_table(mechanism), uniform) > 1.0 + 0.05


@pytest.mark.parametrize("name", sorted(EXACT))
def test_sampler_matches_the_exact_distribution(name: str) -> None:
    mechanism = mechanism_get(name, 1.0)
    domain, _, to_index = EXACT[name]
    table = exact_table(mechanism)
    rng = np.random.default_rng(20240611)
    devices = 20_000
    for value in range(domain):
        reports = mechanism.privatize(np.full(devices, value), domain, rng)
        assert reports.shape == (devices, mechanism.report_length(domain))
        observed = np.bincount(to_index(reports), minlength=table.shape[1])
        assert scipy.stats.chisquare(observed, devices * table[value]).pvalue > 1e-6


# 1-bit mean: values in [0, UPPER]; the grid includes both ends, where the ratio is attained.
UPPER = 4.0
GRID = np.linspace(0.0, UPPER, 9)


def one_bit_table(mechanism: OneBitMean | MemoizedOneBitMean, values: npt.NDArray[np.float64]) -> Table:
    q = mechanism.probability_one(values)
    return np.stack([1 - q, q], axis=1)


@pytest.mark.parametrize("epsilon0", EPSILONS)
@pytest.mark.parametrize("cls", [OneBitMean, MemoizedOneBitMean])
def test_one_bit_mean_report_is_epsilon0_ldp_and_tight(cls: type, epsilon0: float) -> None:
    worst = worst_replacement_log_ratio(one_bit_table(cls(epsilon0=epsilon0, upper=UPPER), GRID))
    assert worst <= epsilon0 + SLACK
    assert worst == pytest.approx(epsilon0)


def memoized_sequence_table(mechanism: MemoizedOneBitMean, sequences: list[tuple[float, ...]]) -> Table:
    """Exact distribution of a device's reports over T rounds, given its T values.

    The coins are alpha ~ U[0, m) and the memoized bits A(0), A(m). The set of rounds that use
    A(m), {t : alpha >= m - x_t}, is constant between consecutive cut points m - x_t.
    """
    upper = mechanism.upper
    q_zero, q_upper = mechanism.probability_one(np.array([0.0, upper]))
    rounds = len(sequences[0])
    table = np.zeros((len(sequences), 2**rounds))
    for row, values in enumerate(sequences):
        cuts = sorted({0.0, upper, *(upper - x for x in values)})
        for low, high in zip(cuts, cuts[1:]):
            alpha = (low + high) / 2
            uses_upper = [x + alpha >= upper for x in values]
            for bit_zero, bit_upper in itertools.product([0, 1], repeat=2):
                p_bits = (q_zero if bit_zero else 1 - q_zero) * (q_upper if bit_upper else 1 - q_upper)
                output = [bit_upper if up else bit_zero for up in uses_upper]
                table[row, int("".join(map(str, output)), 2)] += (high - low) / upper * p_bits
    return table


@pytest.mark.parametrize("epsilon0", EPSILONS)
def test_memoized_reports_of_a_steady_value_cost_epsilon0_over_many_rounds(epsilon0: float) -> None:
    mechanism = MemoizedOneBitMean(epsilon0=epsilon0, upper=UPPER)
    steady = [(x, x, x, x) for x in GRID]
    worst = worst_replacement_log_ratio(memoized_sequence_table(mechanism, steady))
    assert worst <= epsilon0 + SLACK
    assert worst == pytest.approx(epsilon0)


def test_memoized_reports_of_a_moving_value_are_not_covered_by_epsilon0() -> None:
    # The documented limitation: a crossing of m - alpha is hidden by the offset, not by epsilon0.
    mechanism = MemoizedOneBitMean(epsilon0=1.0, upper=UPPER)
    steady_and_moving = memoized_sequence_table(mechanism, [(0.0, 0.0), (0.0, UPPER)])
    assert worst_replacement_log_ratio(steady_and_moving) == math.inf
    both_bits_shown = memoized_sequence_table(mechanism, [(0.0, UPPER), (UPPER, 0.0)])
    assert worst_replacement_log_ratio(both_bits_shown) == pytest.approx(2.0)


def test_memoized_sampler_matches_the_exact_sequence_distribution() -> None:
    mechanism = MemoizedOneBitMean(epsilon0=1.0, upper=UPPER)
    values = (1.5, 3.0)
    expected = memoized_sequence_table(mechanism, [values])[0]
    devices = 40_000
    memo = mechanism.memoize(devices, np.random.default_rng(11))
    first, second = (mechanism.privatize(np.full(devices, x), memo) for x in values)
    observed = np.bincount(2 * first.astype(np.int64) + second, minlength=4)
    assert scipy.stats.chisquare(observed, devices * expected).pvalue > 1e-6


def test_one_bit_sampler_matches_the_exact_distribution() -> None:
    mechanism = OneBitMean(epsilon0=1.0, upper=UPPER)
    rng = np.random.default_rng(12)
    devices = 20_000
    for value, (p_zero, p_one) in zip(GRID, one_bit_table(mechanism, GRID)):
        ones = int(mechanism.privatize(np.full(devices, value), rng).sum())
        assert abs(ones - devices * p_one) <= 4 * math.sqrt(devices * p_zero * p_one)


def test_memoized_reports_repeat_while_the_value_stays() -> None:
    mechanism = MemoizedOneBitMean(epsilon0=1.0, upper=UPPER)
    memo = mechanism.memoize(1_000, np.random.default_rng(2))
    values = np.random.default_rng(3).uniform(0, UPPER, size=1_000)
    np.testing.assert_array_equal(mechanism.privatize(values, memo), mechanism.privatize(values, memo))


@pytest.mark.parametrize("epsilon0", [0.0, -1.0, math.inf, math.nan])
@pytest.mark.parametrize("name", sorted(MECHANISMS))
def test_every_mechanism_rejects_a_non_positive_or_non_finite_epsilon0(name: str, epsilon0: float) -> None:
    with pytest.raises(ValueError, match="epsilon0"):
        mechanism_get(name, epsilon0)


@pytest.mark.parametrize("cls", [OneBitMean, MemoizedOneBitMean])
def test_one_bit_mean_rejects_a_bad_epsilon0_or_upper_bound(cls: type) -> None:
    with pytest.raises(ValueError, match="epsilon0"):
        cls(epsilon0=0.0, upper=1.0)
    with pytest.raises(ValueError, match="upper"):
        cls(epsilon0=1.0, upper=0.0)


@pytest.mark.parametrize("values", [[-0.5], [UPPER + 1], [math.nan]])
def test_one_bit_mean_rejects_values_outside_the_range(values: list[float]) -> None:
    with pytest.raises(ValueError, match=r"\[0, upper\]"):
        OneBitMean(epsilon0=1.0, upper=UPPER).privatize(np.array(values), np.random.default_rng(0))


def test_memoized_one_bit_mean_rejects_values_for_other_devices() -> None:
    mechanism = MemoizedOneBitMean(epsilon0=1.0, upper=UPPER)
    memo = mechanism.memoize(3, np.random.default_rng(0))
    with pytest.raises(ValueError, match="same devices"):
        mechanism.privatize(np.zeros(4), memo)


@pytest.mark.parametrize("domain_size", [1, 3])
def test_binary_randomized_response_rejects_a_domain_other_than_two(domain_size: int) -> None:
    with pytest.raises(ValueError, match="exactly 2"):
        BinaryRandomizedResponse(epsilon0=1.0).privatize(np.array([0]), domain_size, np.random.default_rng(0))


def test_kary_randomized_response_rejects_a_domain_of_one() -> None:
    with pytest.raises(ValueError, match="at least 2"):
        KaryRandomizedResponse(epsilon0=1.0).privatize(np.array([0]), 1, np.random.default_rng(0))


@pytest.mark.parametrize("name", sorted(MECHANISMS))
def test_every_mechanism_rejects_values_outside_the_domain(name: str) -> None:
    domain = EXACT[name][0]
    with pytest.raises(ValueError, match="bucket indices"):
        mechanism_get(name, 1.0).privatize(np.array([domain]), domain, np.random.default_rng(0))
