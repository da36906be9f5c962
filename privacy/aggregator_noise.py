"""Aggregator randomization: each aggregator adds discrete Gaussian noise to its aggregate share.

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
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from privacy.discrete_gaussian import discrete_gaussian_sigma
from privacy.gaussian import sample_discrete_gaussian

# Changing one report of a one-hot histogram moves a 1 from one coordinate to another.
HISTOGRAM_L2_SENSITIVITY = math.sqrt(2.0)
# Each of the two aggregators adds its own noise.
NOISING_AGGREGATORS = 2
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
