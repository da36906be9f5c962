"""The exact discrete Laplace sampler: its law, computed exactly from the code's own branches, and its contract."""

from __future__ import annotations

import math
from collections import defaultdict
from fractions import Fraction

import numpy as np
import pytest

from privacy import gaussian
from privacy.gaussian import sample_discrete_laplace

# Paths of the sampler less likely than this are not followed; their total mass bounds the error.
PRUNE = 1e-13


class _Branch(Exception):
    """The sampler asked for a draw the script does not hold yet: its outcomes and their probabilities."""

    def __init__(self, outcomes: list[tuple[object, float]]) -> None:
        self.outcomes = outcomes


class _Restart(Exception):
    """The sampler rejected its first attempt and starts another, identical and independent one."""


class _ScriptedBits:
    """Stands in for the sampler's random source: replays a script of outcomes, then branches.

    An attempt of Algorithm 2 draws U (``below``), then the coin exp(-U / t), then the geometric's coins,
    then the sign (``below``): an attempt ends at a failed first coin or at the sign, and the sampler's
    law is that of one attempt given it is accepted (the rejection loop repeats it independently)."""

    def __init__(self, script: list[object]) -> None:
        self.script = script
        self.position = 0
        self.first_coin_pending = False
        self.attempt_ended = False

    def draw(self, outcomes: list[tuple[object, float]]) -> object:
        if self.position == len(self.script):
            raise _Branch(outcomes)
        self.position += 1
        return self.script[self.position - 1]

    def below(self, bound: int) -> int:
        if self.attempt_ended:
            raise _Restart
        uniform = not self.first_coin_pending and self.position > 0  # U is the first draw; the sign ends it
        value = self.draw([(value, 1.0 / bound) for value in range(bound)])
        self.attempt_ended = uniform
        self.first_coin_pending = not uniform
        return value

    def coin(self, heads: float) -> bool:
        value = self.draw([(True, heads), (False, 1.0 - heads)])
        if self.first_coin_pending and not value:
            self.attempt_ended = True
        self.first_coin_pending = False
        return value


def _scripted_coin(numerator: int, denominator: int, bits: _ScriptedBits) -> bool:
    # Bernoulli(exp(-gamma)) is exact by Algorithm 1 (tests/stats/test_discrete_gaussian.py checks
    # its frequencies): here it is one branch of those two probabilities.
    return bits.coin(math.exp(-numerator / denominator))


def sampler_law(numerator: int, denominator: int) -> tuple[dict[int, float], float]:
    """P[output = y] of gaussian._discrete_laplace(numerator, denominator), by following every path of
    one attempt more likely than PRUNE, given the attempt is accepted; and a bound on the error."""
    law: dict[int, float] = defaultdict(float)
    pruned = 0.0
    pending: list[tuple[list[object], float]] = [([], 1.0)]
    while pending:
        script, probability = pending.pop()
        try:
            output = gaussian._discrete_laplace(numerator, denominator, _ScriptedBits(script))
        except _Restart:
            continue
        except _Branch as branch:
            for outcome, chance in branch.outcomes:
                if probability * chance >= PRUNE:
                    pending.append(([*script, outcome], probability * chance))
                else:
                    pruned += probability * chance
            continue
        law[output] += probability
    accepted = math.fsum(law.values())
    return {x: p / accepted for x, p in law.items()}, pruned / accepted


def laplace_pmf(scale: Fraction, x: int) -> float:
    q = math.exp(-1 / float(scale))
    return (1 - q) / (1 + q) * q ** abs(x)


@pytest.mark.parametrize(("numerator", "denominator"), [(1, 1), (3, 2), (1, 2), (2, 3)])
def test_the_samplers_law_is_the_discrete_laplace_of_scale_t_over_s(monkeypatch, numerator, denominator) -> None:
    monkeypatch.setattr(gaussian, "_bernoulli_exp_minus", _scripted_coin)
    law, pruned = sampler_law(numerator, denominator)
    scale = Fraction(numerator, denominator)
    assert pruned < 1e-10
    for x in range(-12, 13):
        # The pruned paths move each probability by at most twice their mass (the normalisation included).
        assert abs(law.get(x, 0.0) - laplace_pmf(scale, x)) <= 2 * pruned + 1e-14


def test_the_pmf_formula_sums_to_one_and_falls_by_e_to_the_minus_one_over_b() -> None:
    scale = Fraction(7, 3)
    total = math.fsum(laplace_pmf(scale, x) for x in range(-2000, 2001))
    assert total == pytest.approx(1.0, rel=1e-14)
    assert laplace_pmf(scale, 5) / laplace_pmf(scale, 4) == pytest.approx(math.exp(-3 / 7), rel=1e-14)


def test_sampler_is_reproducible_from_its_seed_and_reads_floats_exactly() -> None:
    first = sample_discrete_laplace(Fraction(5, 2), 200, np.random.default_rng(7))
    second = sample_discrete_laplace(2.5, 200, np.random.default_rng(7))
    assert first.dtype == np.int64 and first.shape == (200,)
    assert np.array_equal(first, second)
    assert sample_discrete_laplace(1, 0, np.random.default_rng(7)).shape == (0,)


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda: sample_discrete_laplace(0.0, 3, np.random.default_rng(1)), "scale"),
        (lambda: sample_discrete_laplace(math.inf, 3, np.random.default_rng(1)), "scale"),
        (lambda: sample_discrete_laplace(True, 3, np.random.default_rng(1)), "scale"),
        (lambda: sample_discrete_laplace(Fraction(-1, 2), 3, np.random.default_rng(1)), "scale"),
        (lambda: sample_discrete_laplace(2.0**51, 3, np.random.default_rng(1)), "scale"),
        (lambda: sample_discrete_laplace(1.0, -1, np.random.default_rng(1)), "size"),
    ],
)
def test_invalid_parameters_raise_value_error_naming_the_parameter(call, name: str) -> None:
    with pytest.raises(ValueError, match=rf"^{name} "):
        call()
