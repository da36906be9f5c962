"""Aggregator randomization: each aggregator adds discrete Gaussian or Laplace noise to its aggregate share.

The alternative to client noise (seed 001, Section 6.1.2). Devices send their one-hot value with no
local randomizer; the leader and the helper each add independent discrete Gaussian noise
N_Z(0, sigma^2) to every coordinate of their aggregate share before it leaves them. sigma is the
discrete Gaussian's own calibration (privacy.discrete_gaussian.discrete_gaussian_sigma: its exact
privacy loss, CKS20 Theorem 7 summed over the integers) for the recipe's (epsilon, delta) and a
histogram under replacement: one report moves from one bucket to another, two coordinates change
by 1 (L2 sensitivity sqrt(2)); that also covers adding or removing one report (one coordinate).
The noise's bits come from the operating system's CSPRNG (privacy.gaussian.sample_discrete_gaussian).

Trust model (seed 001, OAOC): the guarantee holds as long as one aggregator is honest, because its
noise alone is calibrated to (epsilon, delta). With both honest the sum carries both noises, so the
estimate's standard deviation is sigma * sqrt(2) — seed 001 Table 2's two columns.

Below MIN_SIGMA the noise is mostly zeros (P[X = 0] > 0.4): the exact calibration still holds
there, but recipes are refused as a floor of the product (a smaller epsilon or delta is asked for).

The discrete Laplace (AggregatorLaplace; DP-for-DAP draft, Section 4.1) gives pure epsilon-DP
instead: P[X = x] proportional to exp(-|x| / b) on each coordinate changes by at most a factor
e^(Delta_1 / b) when the true counts move by Delta_1 in L1 norm, so b = Delta_1 / epsilon with
Delta_1 = 2 (one report moving between two buckets). A recipe asks for it by its noise distribution
and carries delta = 0; delta = 0 is what selects it here (aggregator_noise), since no Gaussian is
pure DP. The same trust model holds: each aggregator's noise alone is calibrated to epsilon.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from privacy.discrete_gaussian import discrete_gaussian_sigma
from privacy.gaussian import sample_discrete_gaussian, sample_discrete_laplace

# Changing one report of a one-hot histogram moves a 1 from one coordinate to another.
HISTOGRAM_L2_SENSITIVITY = math.sqrt(2.0)
HISTOGRAM_L1_SENSITIVITY = 2
# Each of the two aggregators adds its own noise.
NOISING_AGGREGATORS = 2
# A recipe's choice of aggregator noise ("noiseDistribution"): the discrete Gaussian, (epsilon, delta)-DP,
# or the discrete Laplace, pure epsilon-DP (delta = 0).
GAUSSIAN = "gaussian"
LAPLACE = "laplace"
DISTRIBUTIONS = (GAUSSIAN, LAPLACE)
# The smallest sigma a recipe may have (module docstring: a floor, not a condition of the bound).
MIN_SIGMA = 1.0


@dataclass(frozen=True)
class AggregatorGaussian:
    """The noise each aggregator adds for an (epsilon, delta)-DP histogram release."""

    epsilon: float
    delta: float

    @property
    def sigma(self) -> float:
        """Per-aggregator sigma: the discrete Gaussian's exact calibration for (epsilon, delta), one report
        moving between two buckets (memoized by privacy.discrete_gaussian)."""
        return discrete_gaussian_sigma(self.epsilon, self.delta, sensitivity=1, coordinates=2)

    def check(self) -> None:
        """Raise ValueError when the calibration falls where the discrete Gaussian is not trusted."""
        if self.sigma < MIN_SIGMA:
            raise ValueError(
                f"sigma {self.sigma:.3g} is below {MIN_SIGMA:g}, the smallest noise aggregators add (most "
                "counts would be released unchanged); choose a smaller epsilon or delta"
            )

    def noise(self, length: int, rng: np.random.Generator | None = None) -> npt.NDArray[np.int64]:
        """One aggregator's noise vector: ``length`` exact samples of N_Z(0, sigma^2), from the OS
        CSPRNG; ``rng``, a seeded Generator, replays a draw in tests only."""
        return sample_discrete_gaussian(self.sigma**2, length, rng)

    def standard_error(self) -> float:
        """Standard deviation of each released count, both aggregators' noise together.

        The discrete Gaussian's variance is below sigma^2 (Canonne, Kamath, Steinke 2020), so this
        bound is conservative: intervals built on it cover at least their nominal level.
        """
        return self.sigma * math.sqrt(NOISING_AGGREGATORS)


@dataclass(frozen=True)
class AggregatorLaplace:
    """The noise each aggregator adds for a pure epsilon-DP histogram release (delta = 0)."""

    epsilon: float
    delta: float = 0.0

    def __post_init__(self) -> None:
        if self.delta != 0:
            raise ValueError("the discrete Laplace is pure epsilon-DP: its delta is 0")

    @property
    def scale(self) -> Fraction:
        """Per-aggregator scale b = Delta_1 / epsilon, exactly (epsilon read as the rational it denotes):
        the privacy loss of any output is at most Delta_1 / b = epsilon."""
        if not (self.epsilon > 0 and math.isfinite(self.epsilon)):
            raise ValueError("epsilon must be a positive finite number")
        return HISTOGRAM_L1_SENSITIVITY / Fraction(self.epsilon)

    def check(self) -> None:
        """Raise ValueError when one aggregator's noise has a standard deviation below MIN_SIGMA (the
        Gaussian's floor: below it most counts would be released unchanged)."""
        deviation = math.sqrt(discrete_laplace_variance(self.scale))
        if deviation < MIN_SIGMA:
            raise ValueError(
                f"the discrete Laplace's standard deviation {deviation:.3g} is below {MIN_SIGMA:g}, the smallest "
                "noise aggregators add (most counts would be released unchanged); choose a smaller epsilon"
            )

    def noise(self, length: int, rng: np.random.Generator | None = None) -> npt.NDArray[np.int64]:
        """One aggregator's noise vector: ``length`` exact samples of the discrete Laplace of scale b,
        from the OS CSPRNG; ``rng``, a seeded Generator, replays a draw in tests only."""
        return sample_discrete_laplace(self.scale, length, rng)

    def standard_error(self) -> float:
        """Standard deviation of each released count, both aggregators' noise together (exact)."""
        return math.sqrt(NOISING_AGGREGATORS * discrete_laplace_variance(self.scale))

    def interval_half_width(self, miss: float) -> int:
        """The smallest integer m with P[|X_1 + X_2| > m] <= ``miss``, X_1 and X_2 the two aggregators'
        noise: the count +- m covers the true count with probability at least 1 - miss, exactly. A
        normal quantile would not: the Laplace's tails are heavier (m = 1.96 standard errors misses
        5.9% of the time, not 5%)."""
        if not 0 < miss < 1:
            raise ValueError("miss must lie strictly between 0 and 1")
        high = 1
        while _laplace_sum_tail(self.scale, high) > miss:
            high *= 2
        low = -1  # invariant: tail(low) > miss >= tail(high); the tail at -1 is 1
        while high - low > 1:
            middle = (low + high) // 2
            low, high = (middle, high) if _laplace_sum_tail(self.scale, middle) > miss else (low, middle)
        return high


def discrete_laplace_variance(scale: Fraction | float) -> float:
    """Variance of the discrete Laplace of scale b: 2 q / (1 - q)^2 with q = e^(-1/b), written
    1 / (2 sinh^2(1 / (2 b))) so that it keeps its accuracy when q is near 1 (large b)."""
    return 1.0 / (2.0 * math.sinh(1.0 / (2.0 * float(scale))) ** 2)


def _laplace_sum_tail(scale: Fraction, m: int) -> float:
    """P[|X_1 + X_2| > m] for two independent discrete Laplace of scale b, m >= 0.

    With q = e^(-1/b) and c = (1 - q) / (1 + q), P[X_1 + X_2 = s] = c^2 q^|s| (|s| + A), A = (1 + q^2) / (1 - q^2)
    (the sum over x of q^(|x| + |s - x|): s + 1 terms between 0 and s, a geometric series outside). Summed
    over s > m, n = m + 1: c^2 q^n ((n (1 - q) + q) / (1 - q)^2 + A / (1 - q)), twice for both signs.
    """
    if m < 0:
        return 1.0
    q, gap = math.exp(-1 / float(scale)), -math.expm1(-1 / float(scale))  # gap = 1 - q, accurately
    c = gap / (1 + q)
    n = m + 1
    a = (1 + q * q) / (gap * (1 + q))
    return 2 * c * c * q**n * ((n * gap + q) / gap**2 + a / gap)


AggregatorNoise = AggregatorGaussian | AggregatorLaplace


def aggregator_noise(epsilon: float, delta: float) -> AggregatorNoise:
    """The noise of an aggregator-noise release at (epsilon, delta): the discrete Laplace for pure
    epsilon-DP (delta = 0), the discrete Gaussian otherwise."""
    return AggregatorLaplace(epsilon) if delta == 0 else AggregatorGaussian(epsilon, delta)
