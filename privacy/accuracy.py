"""A recipe's expected error per bucket, before anything runs: what an analyst reasons in.

One bucket's released count is an unbiased estimate of the number of reporting devices in it; its
error is the recipe's noise. This module states that error from the estimators the release uses,
never re-derived by hand:

- client noise: the mechanism's own variance (``FrequencyOracle.variance``, the one a release's
  standard errors come from) at epsilon0 for ``reports`` reports, in a bucket holding
  ``reports / buckets`` of them (a uniform spread: the *typical* bucket; for most mechanisms the
  variance grows a little with the count, so a fuller bucket's is a little larger);
- aggregator noise: both aggregators' noise together (``privacy.aggregator_noise``: the discrete
  Gaussian's standard error, a bound, or the discrete Laplace's, exact), the same in every bucket.

The 95% half-width is 1.96 standard errors (the normal approximation, as ``privacy.intervals``
shows releases), except for the discrete Laplace, whose exact quantile is used (its tails are heavier).

"Too noisy" (``ExpectedError.too_noisy``): the half-width is at least the count of a bucket under a
uniform spread, ``reports / buckets``. The average bucket's count is then inside its own 95% noise
interval: it cannot be told from an empty bucket, and since a skewed spread leaves most buckets
below the average, most buckets cannot either. The issue's case: 100,000 reports over 20,000
buckets is 5 a bucket, against a half-width of about ±527 (asymmetric OHE at epsilon0 = 2).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Final

import numpy as np

from privacy.aggregator_noise import AggregatorLaplace, aggregator_noise
from privacy.mechanisms import mechanism_get
from privacy.parameters import PrivacyParameters

LEVEL: Final = 0.95
# Phi^-1(0.975), the two-sided 95% normal quantile (scipy.stats.norm.ppf(0.975) = 1.959963985).
Z_95: Final = 1.959963984540054


@dataclass(frozen=True)
class ExpectedError:
    """The expected error of one bucket's released count, in devices, at the 95% level."""

    reports: float  # the reports expected (fleet x sampling rate)
    buckets: int
    per_bucket: float  # reports / buckets: a bucket's count under a uniform spread
    standard_error: float
    half_width: float  # the count is within +- half_width of the truth with probability 0.95

    @property
    def too_noisy(self) -> bool:
        """The half-width reaches a uniform bucket's count: most buckets cannot be told from empty."""
        return self.half_width >= self.per_bucket

    @property
    def relative_error(self) -> float:
        """The half-width over a uniform bucket's count (inf with no report)."""
        return self.half_width / self.per_bucket if self.per_bucket > 0 else math.inf

    def as_json(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "level": LEVEL,
            "relative_error": self.relative_error if math.isfinite(self.relative_error) else None,
            "too_noisy": self.too_noisy,
        }


def expected_error(privacy: PrivacyParameters, *, buckets: int, reports: float) -> ExpectedError:
    """The expected error per bucket of a release of ``buckets`` buckets over ``reports`` reports.

    Client noise: Var = ``mechanism.variance`` at epsilon0 with n = ``reports`` (rounded to a whole
    number of reports) and every bucket at n / buckets; half-width = 1.96 sqrt(Var). Aggregator noise:
    the standard error of the sum of both aggregators' noise (privacy.aggregator_noise), half-width
    1.96 of them for the discrete Gaussian, the exact 95% quantile of |X_1 + X_2| for the discrete Laplace.
    """
    if buckets < 1:
        raise ValueError("a release has at least one bucket")
    if not (reports >= 0 and math.isfinite(reports)):
        raise ValueError("reports must be a finite number, not negative")
    per_bucket = reports / buckets
    if privacy.aggregator_noise:
        noise = aggregator_noise(privacy.epsilon, privacy.delta)
        error = noise.standard_error()
        if isinstance(noise, AggregatorLaplace):
            half_width = float(noise.interval_half_width(1 - LEVEL))
        else:
            half_width = Z_95 * error
    else:
        oracle = mechanism_get(privacy.mechanism, privacy.epsilon0)
        n = round(reports)
        uniform = np.full(buckets, n / buckets, dtype=np.float64)
        error = math.sqrt(float(oracle.variance(uniform, n, buckets)[0]))
        half_width = Z_95 * error
    return ExpectedError(
        reports=reports, buckets=buckets, per_bucket=per_bucket, standard_error=error, half_width=half_width
    )
