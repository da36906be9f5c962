"""Aggregator randomization: each aggregator adds discrete Gaussian noise to its aggregate share.

The alternative to client noise (seed 001, Section 6.1.2). Devices send their one-hot value with no
local randomizer; the leader and the helper each add independent discrete Gaussian noise
N_Z(0, sigma^2) to every coordinate of their aggregate share before it leaves them. sigma is the
analytic Gaussian calibration (Balle and Wang 2018, privacy.gaussian.analytic_gaussian_sigma) for
the recipe's (epsilon, delta) and the L2 sensitivity sqrt(2) of a histogram under replacement (one
report moves from one bucket to another: two coordinates change by 1).

Trust model (seed 001, OAOC): the guarantee holds as long as one aggregator is honest, because its
noise alone is calibrated to (epsilon, delta). With both honest the sum carries both noises, so the
estimate's standard deviation is sigma * sqrt(2) — seed 001 Table 2's two columns.

Discretisation: CKS20 (Theorem 7) shows the discrete Gaussian's guarantee matches the continuous
one for large sigma and differs slightly for small sigma; recipes whose sigma falls below
MIN_SIGMA are refused rather than trusted to the continuous calibration.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from privacy.gaussian import analytic_gaussian_sigma, sample_discrete_gaussian

# Changing one report of a one-hot histogram moves a 1 from one coordinate to another.
HISTOGRAM_L2_SENSITIVITY = math.sqrt(2.0)
# Each of the two aggregators adds its own noise.
NOISING_AGGREGATORS = 2
# Below this sigma the discrete and continuous Gaussians' guarantees part measurably (CKS20,
# Figure 1 shows them indistinguishable from sigma of about 1 up).
MIN_SIGMA = 1.0


@dataclass(frozen=True)
class AggregatorGaussian:
    """The noise each aggregator adds for an (epsilon, delta)-DP histogram release."""

    epsilon: float
    delta: float

    @property
    def sigma(self) -> float:
        """Per-aggregator standard deviation: analytic Gaussian for (epsilon, delta), sensitivity sqrt(2)."""
        return analytic_gaussian_sigma(self.epsilon, self.delta, HISTOGRAM_L2_SENSITIVITY)

    def check(self) -> None:
        """Raise ValueError when the calibration falls where the discrete Gaussian is not trusted."""
        if self.sigma < MIN_SIGMA:
            raise ValueError(
                f"sigma {self.sigma:.3g} is below {MIN_SIGMA:g}, where the discrete Gaussian's guarantee "
                "departs from the continuous calibration; choose a smaller epsilon or delta"
            )

    def noise(self, length: int, rng: np.random.Generator) -> npt.NDArray[np.int64]:
        """One aggregator's noise vector: ``length`` exact samples of N_Z(0, sigma^2)."""
        return sample_discrete_gaussian(self.sigma**2, length, rng)

    def standard_error(self) -> float:
        """Standard deviation of each released count, both aggregators' noise together.

        The discrete Gaussian's variance is below sigma^2 (Canonne, Kamath, Steinke 2020), so this
        bound is conservative: intervals built on it cover at least their nominal level.
        """
        return self.sigma * math.sqrt(NOISING_AGGREGATORS)
