"""Microsoft's 1-bit mean (Ding, Kulkarni and Yekhanin, NeurIPS 2017; seed 004, "Differential
Privacy at Microsoft"), fresh and memoized.

Each device holds a bounded number x in [0, m] and sends one bit; the server estimates the mean.
This is not a histogram oracle, so it is not in privacy.mechanisms.MECHANISMS.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from privacy.randomizer_support import COINS_PER_BLOCK, check_epsilon0


@dataclass(frozen=True)
class _OneBitMeanEstimator:
    """The report distribution and the server side, shared by the fresh and memoized variants.

    A device with value x sends Y = 1 with probability
        q(x) = 1/(e^eps0 + 1) + (x/m) (e^eps0 - 1)/(e^eps0 + 1),
    which lies in [1/(e^eps0 + 1), e^eps0/(e^eps0 + 1)]: one report is eps0-LDP in the replacement
    model (ratio at most e^eps0 for any two values, attained by 0 and m).

    Server: with S the number of the n reports equal to 1,
        mu~ = (m/n) sum_i ((e^eps0 + 1) Y_i - 1)/(e^eps0 - 1) = m ((e^eps0 + 1) S/n - 1)/(e^eps0 - 1),
    unbiased because (e^eps0 + 1) q(x) - 1 = (x/m)(e^eps0 - 1). With a = 1/(e^eps0 + 1),
    b = (e^eps0 - 1)/(e^eps0 + 1) and t = x/m, q(1 - q) = a(1 - a) + b^2 t(1 - t), hence
        Var[mu~] = m^2 e^eps0/(n (e^eps0 - 1)^2) + (1/n^2) sum_i x_i (m - x_i)
                 = m^2 e^eps0/(n (e^eps0 - 1)^2) + (m mu - mean_square)/n,
    with mu the mean and mean_square the mean of the x_i^2.
    """

    epsilon0: float
    upper: float

    def __post_init__(self) -> None:
        check_epsilon0(self.epsilon0)
        if not (self.upper > 0 and math.isfinite(self.upper)):
            raise ValueError("upper must be a positive finite number")

    def probability_one(self, values: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        """q(x), the probability that a device with value x reports 1."""
        e = math.exp(self.epsilon0)
        return 1.0 / (e + 1.0) + self._checked(values) / self.upper * (e - 1.0) / (e + 1.0)

    def estimate_mean(self, report_sum: int, n: int) -> float:
        """mu~ = m ((e^eps0 + 1) S/n - 1)/(e^eps0 - 1)."""
        if n < 1:
            raise ValueError("n must be at least 1")
        e = math.exp(self.epsilon0)
        return self.upper * ((e + 1.0) * float(report_sum) / n - 1.0) / (e - 1.0)

    def variance(self, n: int, mean: float, mean_square: float | None = None) -> float:
        """Var[mu~] = m^2 e^eps0/(n (e^eps0 - 1)^2) + (m mean - mean_square)/n.

        Exact given the mean and the mean of squares of the n values. The server knows neither:
        without ``mean_square`` the bound mean_square >= mean^2 (Jensen) is used, which makes the
        result an upper bound, exact when all devices hold the same value. ``mean`` is clipped to
        [0, m] so that an estimate can be passed.
        """
        if n < 1:
            raise ValueError("n must be at least 1")
        e = math.exp(self.epsilon0)
        mean = min(max(float(mean), 0.0), self.upper)
        if mean_square is None:
            mean_square = mean * mean
        spread = max(self.upper * mean - float(mean_square), 0.0)
        return self.upper**2 * e / (n * (e - 1.0) ** 2) + spread / n

    def _checked(self, values: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        values = np.asarray(values, dtype=np.float64)
        if values.size and not (np.all(np.isfinite(values)) and values.min() >= 0 and values.max() <= self.upper):
            raise ValueError("values must be finite numbers in [0, upper]")
        return values


@dataclass(frozen=True)
class OneBitMean(_OneBitMeanEstimator):
    """The 1-bit mean with fresh coins at every report (see ``_OneBitMeanEstimator``).

    Fresh coins compose: a device answering T rounds spends T eps0. ``MemoizedOneBitMean`` avoids it.
    """

    def privatize(self, values: npt.NDArray[np.float64], rng: np.random.Generator) -> npt.NDArray[np.uint8]:
        """One bit per device, Bernoulli(q(x)), each device with its own coin."""
        return (rng.random(np.size(values)) < self.probability_one(values)).astype(np.uint8)

    def privatize_sum(self, values: npt.NDArray[np.float64], rng: np.random.Generator) -> int:
        """The number of devices reporting 1, in bounded memory."""
        values = np.asarray(values, dtype=np.float64)
        total = 0
        for start in range(0, values.size, COINS_PER_BLOCK):
            total += int(self.privatize(values[start : start + COINS_PER_BLOCK], rng).sum())
        return total


@dataclass(frozen=True)
class OneBitMemo:
    """What each device draws once and keeps: its offset and its two memoized answers."""

    offset: npt.NDArray[np.float64]  # alpha_i, uniform on [0, m)
    bit_at_zero: npt.NDArray[np.bool_]  # A_i(0): the 1-bit report of the value 0
    bit_at_upper: npt.NDArray[np.bool_]  # A_i(m): the 1-bit report of the value m

    @property
    def size(self) -> int:
        return int(self.offset.size)


@dataclass(frozen=True)
class MemoizedOneBitMean(_OneBitMeanEstimator):
    """The 1-bit mean memoized by alpha-point rounding (DKY17; seed 004, "Memoization").

    Once per device (``memoize``): draw an offset alpha uniform on [0, m) and the two answers
    A(0) ~ Bernoulli(q(0)) and A(m) ~ Bernoulli(q(m)). At every round (``privatize``): report A(m)
    if x + alpha >= m, else A(0). P(x + alpha >= m) = P(alpha >= m - x) = x/m exactly, so one
    report is Bernoulli((x/m) q(m) + (1 - x/m) q(0)) = Bernoulli(q(x)): the estimator and variance
    of every round are those of the fresh 1-bit mean, and devices stay independent.

    Seed 004 draws alpha from {0, ..., m - 1} and uses x + alpha > m; that rounds up with
    probability (x - 1)/m for an integer x >= 1, not x/m, so its estimate is biased by up to 1.
    Here alpha is continuous and the test is >=, which is exact for every x in [0, m].

    Privacy: one report is eps0-LDP (replacement). While a device's value stays the same, its
    reports repeat one memoized bit, so any number of rounds costs eps0 in total. When the value
    moves, the reports reveal in which rounds x_t + alpha >= m: that pattern is hidden only by
    the random offset, not by eps0 (a report sequence can be impossible for one value sequence
    and possible for another), and both memoized bits may show, worth up to 2 eps0. DKY17 add
    output perturbation for this; it is not implemented here.
    """

    def memoize(self, n: int, rng: np.random.Generator) -> OneBitMemo:
        """Each of n devices draws its offset and its two memoized answers, once."""
        e = math.exp(self.epsilon0)
        return OneBitMemo(
            offset=rng.random(n) * self.upper,
            bit_at_zero=rng.random(n) < 1.0 / (e + 1.0),
            bit_at_upper=rng.random(n) < e / (e + 1.0),
        )

    def privatize(self, values: npt.NDArray[np.float64], memo: OneBitMemo) -> npt.NDArray[np.uint8]:
        """This round's bit of each device: A(m) if x + alpha >= m, else A(0). No new coins."""
        values = self._checked(values)
        if values.shape != memo.offset.shape:
            raise ValueError("values and memo must cover the same devices")
        rounds_up = values + memo.offset >= self.upper
        return np.where(rounds_up, memo.bit_at_upper, memo.bit_at_zero).astype(np.uint8)

    def privatize_sum(self, values: npt.NDArray[np.float64], memo: OneBitMemo) -> int:
        """The number of devices reporting 1 this round."""
        return int(self.privatize(values, memo).sum(dtype=np.int64))
