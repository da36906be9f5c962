"""Seeded proof that the sparse unary sampler (only the ones drawn) has the distribution of per-bit coins.

Asymmetric OHE and symmetric RAPPOR draw a device's report as Geometric gaps between its ones
(``privacy.randomizer_support.unary_ones``) instead of one uniform per bit. Three checks:

- exact enumeration: on k <= 4 buckets every one of the 2^k report vectors has a known probability
  (a product of p_own / p_other factors); a large seeded sample matches it by a chi-square test
  and, cell by cell, within 4 standard errors;
- the old sampler, kept here as the oracle (``random((n, k)) < p_other``, the own bit by its own
  uniform): at k = 1,024 both samplers' per-device weights, offsets of the ones from the own
  bucket and gaps between consecutive ones agree by two-sample chi-square tests;
- cost: the sampler draws about n (1 + (k - 1) p_other) variates, never n k.

Every level is the two-sided probability of a 4-standard-error normal deviation (about 6e-5), as in
tests/stats/test_sum_sampling.py; cells with fewer than 5 expected draws are pooled so that the
chi-square approximation holds.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import numpy.typing as npt
import pytest
from scipy import stats

from privacy import randomizer_support
from privacy.mechanisms import AsymmetricOHE
from privacy.randomized_response import SymmetricRappor

ALPHA = 2 * stats.norm.sf(4.0)
EPSILONS = [0.5, 4.0]
MECHANISMS = [AsymmetricOHE, SymmetricRappor]

Mechanism = AsymmetricOHE | SymmetricRappor


def bit_probabilities(mechanism: Mechanism) -> tuple[float, float]:
    """(P[own bit = 1], P[other bit = 1]) from the mechanisms' definitions (seed 000, Appendices A, C.1)."""
    p0 = 1.0 / (math.exp(mechanism.epsilon0) + 1.0)
    if isinstance(mechanism, AsymmetricOHE):
        return 0.5, p0
    return 1.0 - p0, p0


def old_privatize(
    values: npt.NDArray[np.int64], k: int, p_own: float, p_other: float, rng: np.random.Generator
) -> npt.NDArray[np.uint8]:
    """The sampler the product used before: one uniform per device and bucket (the oracle)."""
    bits = rng.random((values.size, k)) < p_other
    bits[np.arange(values.size), values] = rng.random(values.size) < p_own
    return bits.astype(np.uint8)


def exact_vector_probabilities(value: int, k: int, p_own: float, p_other: float) -> npt.NDArray[np.float64]:
    """P(report = b | value) for every b in itertools.product([0, 1], repeat=k) order."""
    probabilities = []
    for bits in itertools.product([0, 1], repeat=k):
        probability = 1.0
        for bucket, bit in enumerate(bits):
            p = p_own if bucket == value else p_other
            probability *= p if bit else 1.0 - p
        probabilities.append(probability)
    return np.array(probabilities)


def vector_index(reports: npt.NDArray[np.uint8]) -> npt.NDArray[np.int64]:
    weights = 1 << np.arange(reports.shape[1] - 1, -1, -1)
    return reports.astype(np.int64) @ weights


def pooled(observed: npt.NDArray[np.float64], expected: npt.NDArray[np.float64]) -> tuple[np.ndarray, np.ndarray]:
    """Cells with fewer than 5 expected draws merged into one; if that one is still below 5, into the
    smallest other cell as well (totals are kept, as the chi-square test needs)."""
    small = expected < 5
    if not small.any():
        return observed.astype(float), expected.astype(float)
    observed_kept, expected_kept = observed[~small].astype(float), expected[~small].astype(float)
    observed_small, expected_small = observed[small].sum(), expected[small].sum()
    if expected_small >= 5:
        return np.append(observed_kept, observed_small), np.append(expected_kept, expected_small)
    smallest = int(np.argmin(expected_kept))
    observed_kept[smallest] += observed_small
    expected_kept[smallest] += expected_small
    return observed_kept, expected_kept


def two_sample_pvalue(first: npt.NDArray[np.int64], second: npt.NDArray[np.int64]) -> float:
    """Chi-square test that two histograms over the same cells come from one distribution."""
    first, second = np.asarray(first, dtype=float), np.asarray(second, dtype=float)
    total = first + second
    keep = total * min(first.sum(), second.sum()) / (first.sum() + second.sum()) >= 5
    table = np.array([first[keep], second[keep]])
    if (~keep).any() and total[~keep].sum() >= 10:
        table = np.column_stack([table, [first[~keep].sum(), second[~keep].sum()]])
    return float(stats.chi2_contingency(table, correction=False).pvalue)


@pytest.mark.parametrize("epsilon0", EPSILONS)
@pytest.mark.parametrize("domain", [1, 2, 3, 4])
@pytest.mark.parametrize("cls", MECHANISMS)
def test_every_report_vector_has_its_exact_probability(cls: type[Mechanism], domain: int, epsilon0: float) -> None:
    mechanism = cls(epsilon0=epsilon0)
    p_own, p_other = bit_probabilities(mechanism)
    rng = np.random.default_rng(20261125)
    devices = 60_000  # several blocks of the sampler, so block edges are crossed
    for value in range(domain):
        reports = mechanism.privatize(np.full(devices, value), domain, rng)
        observed = np.bincount(vector_index(reports), minlength=2**domain).astype(float)
        probabilities = exact_vector_probabilities(value, domain, p_own, p_other)
        expected = devices * probabilities
        standard_error = np.sqrt(devices * probabilities * (1 - probabilities))
        assert np.all(np.abs(observed - expected) <= 4 * standard_error + 1e-9), (observed, expected)
        if domain > 1:
            observed_cells, expected_cells = pooled(observed, expected)
            assert stats.chisquare(observed_cells, expected_cells).pvalue > ALPHA


@pytest.mark.parametrize("cls", MECHANISMS)
def test_neighbouring_devices_with_different_values_get_independent_exact_reports(cls: type[Mechanism]) -> None:
    """Devices of every value interleaved: each (value, report) pair has its exact probability, and a
    device's report says nothing about its neighbour's (the skip method lays devices end to end)."""
    mechanism = cls(epsilon0=1.0)
    p_own, p_other = bit_probabilities(mechanism)
    domain, devices = 3, 90_000
    values = np.tile(np.arange(domain), devices // domain)
    reports = mechanism.privatize(values, domain, np.random.default_rng(99))
    index = vector_index(reports)
    for value in range(domain):
        observed = np.bincount(index[values == value], minlength=2**domain).astype(float)
        expected = (devices // domain) * exact_vector_probabilities(value, domain, p_own, p_other)
        assert stats.chisquare(*pooled(observed, expected)).pvalue > ALPHA
    # Pairs of consecutive devices (value 0 then value 1): the joint of their reports is the product.
    first, second = index[0::domain], index[1::domain]
    joint = np.zeros((2**domain, 2**domain))
    np.add.at(joint, (first, second), 1)
    assert stats.chi2_contingency(joint[joint.sum(axis=1) > 0][:, joint.sum(axis=0) > 0]).pvalue > ALPHA


def per_device_summaries(
    reports: npt.NDArray[np.uint8], values: npt.NDArray[np.int64], k: int
) -> dict[str, np.ndarray]:
    """Histograms that a wrong sparse sampler would distort: weights, offsets of ones from the own
    bucket (the skip of the own position), and gaps between consecutive ones within a device."""
    rows, buckets = np.nonzero(reports)
    gaps = np.diff(buckets)[np.diff(rows) == 0]
    return {
        "weight": np.bincount(reports.sum(axis=1), minlength=k + 1),
        "offset": np.bincount((buckets - values[rows]) % k, minlength=k),
        "gap": np.bincount(gaps, minlength=k),
        "bucket": np.bincount(buckets, minlength=k),
    }


@pytest.mark.parametrize("epsilon0", EPSILONS)
@pytest.mark.parametrize("cls", MECHANISMS)
def test_the_sparse_sampler_matches_the_old_per_bit_sampler(cls: type[Mechanism], epsilon0: float) -> None:
    mechanism = cls(epsilon0=epsilon0)
    p_own, p_other = bit_probabilities(mechanism)
    k, devices = 1_024, 6_000
    values = np.random.default_rng(5).zipf(1.3, size=devices) % k
    new = per_device_summaries(mechanism.privatize(values, k, np.random.default_rng(6)), values, k)
    old = per_device_summaries(old_privatize(values, k, p_own, p_other, np.random.default_rng(7)), values, k)
    for name in new:
        assert two_sample_pvalue(new[name], old[name]) > ALPHA, name


@pytest.mark.parametrize("cls", MECHANISMS)
def test_a_device_weight_is_one_own_coin_plus_a_binomial_of_the_others(cls: type[Mechanism]) -> None:
    mechanism = cls(epsilon0=4.0)
    p_own, p_other = bit_probabilities(mechanism)
    k, devices = 1_024, 40_000
    values = np.random.default_rng(8).integers(0, k, size=devices)
    weights = mechanism.privatize(values, k, np.random.default_rng(9)).sum(axis=1)
    others = stats.binom.pmf(np.arange(k + 1), k - 1, p_other)
    exact = (1 - p_own) * others + p_own * np.concatenate([[0.0], others[:-1]])
    observed = np.bincount(weights, minlength=k + 1).astype(float)
    assert stats.chisquare(*pooled(observed, devices * exact)).pvalue > ALPHA


@pytest.mark.parametrize("cls", MECHANISMS)
def test_the_sum_is_the_sum_of_the_reports_across_many_blocks(cls: type[Mechanism]) -> None:
    mechanism = cls(epsilon0=4.0)
    k = 64
    values = np.random.default_rng(10).integers(0, k, size=100_000)
    block = randomizer_support.unary_devices_per_block(k, bit_probabilities(mechanism)[1])
    assert values.size > 2 * block
    summed = mechanism.privatize_sum(values, k, np.random.default_rng(11))
    reports = mechanism.privatize(values, k, np.random.default_rng(11))
    np.testing.assert_array_equal(summed, reports.sum(axis=0))


class CountingGenerator:
    """A numpy Generator that counts the variates it hands out and refuses a per-bit draw."""

    def __init__(self, rng: np.random.Generator, refuse_above: int) -> None:
        self.rng, self.refuse_above, self.variates = rng, refuse_above, 0

    def _count(self, size: int) -> None:
        self.variates += int(size)
        assert size <= self.refuse_above, f"one call drew {size} variates"

    def geometric(self, p: float, size: int) -> npt.NDArray[np.int64]:
        self._count(size)
        return self.rng.geometric(p, size=size)

    def random(self, size: int) -> npt.NDArray[np.float64]:
        self._count(size)
        return self.rng.random(size)


@pytest.mark.parametrize("cls", MECHANISMS)
def test_the_per_device_sum_draws_about_the_ones_not_one_coin_per_bit(
    cls: type[Mechanism], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(randomizer_support, "EXACT_SUM_ABOVE", 1 << 40)  # per-device coins, not the exact sum
    mechanism = cls(epsilon0=4.0)
    p_other = bit_probabilities(mechanism)[1]
    k, devices = 1_024, 200_000
    values = np.random.default_rng(12).integers(0, k, size=devices)
    rng = CountingGenerator(np.random.default_rng(13), refuse_above=devices * k // 100)
    report_sum = mechanism.privatize_sum(values, k, rng)  # type: ignore[arg-type]
    expected_draws = devices * (1 + (k - 1) * p_other)
    assert expected_draws < devices * k / 40  # the promise is worth testing: 1 + 1023 p0 ~ 19.7 << 1,024
    assert expected_draws <= rng.variates <= 1.05 * expected_draws
    assert report_sum.sum() > 0


def test_a_domain_of_one_bucket_and_an_empty_fleet_are_drawn() -> None:
    mechanism = AsymmetricOHE(epsilon0=1.0)
    rng = np.random.default_rng(14)
    assert mechanism.privatize(np.zeros(0, dtype=np.int64), 8, rng).shape == (0, 8)
    np.testing.assert_array_equal(mechanism.privatize_sum(np.zeros(0, dtype=np.int64), 8, rng), np.zeros(8))
    ones = mechanism.privatize(np.zeros(40_000, dtype=np.int64), 1, rng)
    assert ones.shape == (40_000, 1)
    assert abs(ones.mean() - 0.5) <= 4 * math.sqrt(0.25 / 40_000)


class SplitGenerator:
    """Geometric gaps from one numpy Generator, at most ``most`` per call (as if every batch of the
    sampler fell short and had to be continued), and the own bits' uniforms from another."""

    def __init__(self, gaps: np.random.Generator, own: np.random.Generator, most: int) -> None:
        self.gaps, self.own, self.most = gaps, own, most

    def geometric(self, p: float, size: int) -> npt.NDArray[np.int64]:
        return self.gaps.geometric(p, size=min(size, self.most))

    def random(self, size: int) -> npt.NDArray[np.float64]:
        return self.own.random(size)


@pytest.mark.parametrize("cls", MECHANISMS)
def test_a_batch_of_gaps_that_falls_short_is_continued_where_it_stopped(cls: type[Mechanism]) -> None:
    """The ones are a function of the i.i.d. gap stream, however it is cut into batches: the same
    seeds give the same reports when every batch holds 3 gaps as when it covers the whole block."""
    mechanism = cls(epsilon0=2.0)
    k = 16
    values = np.random.default_rng(15).integers(0, k, size=2_000)

    def reports(most: int) -> npt.NDArray[np.uint8]:
        rng = SplitGenerator(np.random.default_rng(16), np.random.default_rng(17), most)
        return mechanism.privatize(values, k, rng)  # type: ignore[arg-type]

    np.testing.assert_array_equal(reports(3), reports(1 << 30))


def test_blocks_too_long_for_32_bit_positions_draw_the_same_reports(monkeypatch: pytest.MonkeyPatch) -> None:
    """A block whose positions pass 2^32 (large k at large epsilon0) divides in 64 bits instead."""
    mechanism = AsymmetricOHE(epsilon0=3.0)
    values = np.random.default_rng(18).integers(0, 100, size=30_000)
    narrow = mechanism.privatize(values, 100, np.random.default_rng(19))
    monkeypatch.setattr(randomizer_support, "_UINT32_MAX", -1)
    np.testing.assert_array_equal(mechanism.privatize(values, 100, np.random.default_rng(19)), narrow)


@pytest.mark.parametrize("cls", MECHANISMS)
def test_the_exact_sum_path_draws_no_per_device_variate(cls: type[Mechanism], monkeypatch: pytest.MonkeyPatch) -> None:
    """Above EXACT_SUM_ABOVE the sum comes from binomials alone: no gap and no own-bit uniform is drawn
    (tests/stats/test_sum_sampling.py forbids ``privatize``, which the per-device sum no longer calls)."""

    class BinomialsOnly:
        def __init__(self) -> None:
            self.rng = np.random.default_rng(20)

        def binomial(self, n: npt.NDArray[np.int64], p: float) -> npt.NDArray[np.int64]:
            return self.rng.binomial(n, p)

    values = np.random.default_rng(21).integers(0, 64, size=5_000)
    monkeypatch.setattr(randomizer_support, "EXACT_SUM_ABOVE", 0)
    report_sum = cls(epsilon0=2.0).privatize_sum(values, 64, BinomialsOnly())  # type: ignore[arg-type]
    assert report_sum.shape == (64,)
    monkeypatch.setattr(randomizer_support, "EXACT_SUM_ABOVE", values.size * 64)
    with pytest.raises(AttributeError):  # at the threshold, per-device: the gaps need geometric()
        cls(epsilon0=2.0).privatize_sum(values, 64, BinomialsOnly())  # type: ignore[arg-type]
