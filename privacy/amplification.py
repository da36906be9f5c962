"""Privacy amplification by aggregation, and the minimum cohort it implies.

A device that answers with an eps0-DP local randomizer is (eps, delta)-DP in the aggregate
model once its report is summed with enough others. The aggregators refuse to release a batch
smaller than the minimum cohort m, so the cohort-aggregate guarantee holds whatever the turnout.

Which randomizers the closed form covers: seed 000 states Theorem 3.1 "due to [31]", Feldman,
McMillan and Talwar's "Stronger privacy amplification by shuffling" (2022; its clone probability
2/(e^eps0 + 1) is what the validity condition below encodes). That paper's errata restricts its
general bounds to a class of local randomizers (privacy/enforced_cohort.py says which of ours
qualify, and why); for any other eps0-DP randomizer the proven bound is the 2020 one
(privacy/shuffling.py, "clones-2020").
"""

from __future__ import annotations

import math
from typing import Final


class UnreachableEpsilon(ValueError):
    """No cohort size up to the search limit reaches the requested aggregate epsilon."""


# The minimum-cohort search stops here: a cohort larger than any fleet is no answer.
MAX_COHORT = 10**12
# The smallest delta accepted here, in privacy.shuffling and in privacy.gaussian. Below the smallest
# normal double (2.2e-308) a delta loses significant bits (5e-324 has one), so it is no longer the
# number the caller meant; and the numerical shuffling bounds set aside 1e-4 * delta for their
# tail, which must itself stay a normal double.
MIN_DELTA: Final = 1e-300


def closed_form_epsilon(epsilon0: float, n: int, delta: float) -> float:
    """Aggregate epsilon of n eps0-DP (replacement) reports: seed 000 Theorem 3.1, eqn (1).

        eps <= log(1 + (e^eps0 - 1) (4 sqrt(2 log(4/delta)) / sqrt((e^eps0 + 1) n) + 4/n)),

    valid when eps0 <= log(n / (8 log(2/delta)) - 1). Outside that condition the theorem says
    nothing, and this returns infinity (fail closed) rather than a number.
    """
    _check(epsilon0=epsilon0, delta=delta)
    if n < 1:
        raise ValueError("n must be at least 1")
    ratio = n / (8.0 * math.log(2.0 / delta)) - 1.0
    if ratio <= 0 or epsilon0 > math.log(ratio):
        return math.inf
    e0 = math.exp(epsilon0)
    term = 4.0 * math.sqrt(2.0 * math.log(4.0 / delta)) / math.sqrt((e0 + 1.0) * n) + 4.0 / n
    # Round the last bit up: a bound must never come out below the true value.
    return math.nextafter(math.log1p((e0 - 1.0) * term), math.inf)


def min_cohort_closed_form(epsilon0: float, epsilon: float, delta: float) -> int:
    """Smallest n for which Theorem 3.1 gives an aggregate epsilon of at most ``epsilon``.

    The bound decreases in n once valid, so the smallest such n is found by bisection.
    Raises UnreachableEpsilon when no n up to MAX_COHORT is enough.
    """
    _check(epsilon0=epsilon0, delta=delta)
    if not (epsilon > 0 and math.isfinite(epsilon)):
        raise ValueError("epsilon must be a positive finite number")
    if closed_form_epsilon(epsilon0, MAX_COHORT, delta) > epsilon:
        raise UnreachableEpsilon(
            f"no cohort of up to {MAX_COHORT:.0e} reports reaches epsilon={epsilon} "
            f"from epsilon0={epsilon0} at delta={delta}"
        )
    low, high = 0, MAX_COHORT  # invariant: bound(low) > epsilon >= bound(high)
    while high - low > 1:
        middle = (low + high) // 2
        if closed_form_epsilon(epsilon0, middle, delta) <= epsilon:
            high = middle
        else:
            low = middle
    return high


def check_delta(delta: float) -> None:
    """Raise ValueError unless MIN_DELTA <= delta < 1 (NaN included)."""
    if not (0.0 < delta < 1.0):
        raise ValueError("delta must lie strictly between 0 and 1")
    if delta < MIN_DELTA:
        raise ValueError(f"delta must be at least {MIN_DELTA:g}: smaller ones lose precision as doubles")


def _check(*, epsilon0: float, delta: float) -> None:
    if not (epsilon0 > 0 and math.isfinite(epsilon0)):
        raise ValueError("epsilon0 must be a positive finite number")
    check_delta(delta)
