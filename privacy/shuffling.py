"""Numerical amplification by shuffling (and so by aggregation) of eps0-DP local reports.

Both bounds of Feldman, McMillan and Talwar reduce n shuffled eps0-DP reports (replacement model)
to a pair of distributions over a count of "clones". Given C = c clones, the two worlds are

    P_c = A + 1 - D,    Q_c = A + D,    A ~ Bin(c, 1/2),  D ~ Bernoulli(e^eps0 / (e^eps0 + 1)),

(the pair (A + 1 - D, c - A + D) reveals c, so the shuffled output is a post-processing of (C, P_C)
against (C, Q_C)). The aggregate is (eps, delta)-DP whenever

    delta >= E_C[ D_{e^eps}(P_C || Q_C) ],  D_{e^eps}(P || Q) = sum_k max(0, P(k) - e^eps Q(k)),

where the clone count is
    C ~ Bin(n - 1, e^-eps0)             "Hiding among the clones" (FMT 2020, arXiv:2012.12803, Sec. 3,
                                        the code at github.com/apple/ml-shuffling-amplification), and
    C ~ Bin(n - 1, 2 / (e^eps0 + 1))    "Stronger privacy amplification by shuffling" (FMT 2022,
                                        arXiv:2208.04591, Thms 3.1-3.2; reference [31] of seed 000).

Caveat from the 2022 paper's errata: its general theorem holds for a restricted class of local
randomizers (one that contains randomized response, RAPPOR-style bit flipping and k-ary RR); for
an arbitrary eps0-DP randomizer the 2020 bound is the one proven.

How the expectation is computed (an upper bound at every step):
- D_{e^eps}(P_c || Q_c) is exact: the likelihood ratio P_c(k)/Q_c(k) falls in k, so the sum is a
  difference of two Bin(c, 1/2) CDFs at the crossing point; the crossing is tried at three
  neighbouring integers and the largest value kept, so rounding in the crossing cannot lose mass.
  A relative allowance for CDF rounding error is added.
- P_{c+1}, Q_{c+1} are P_c, Q_c plus the same independent Bernoulli(1/2), so D(P_c || Q_c) does not
  increase in c (post-processing). Hence a block of clone counts can be charged at its smallest c.
- Clone counts in a window around the mean are summed one by one when the window has at most
  _MAX_EXACT_POINTS values, otherwise in _BLOCKS blocks charged at their smallest c. The mass of
  C outside the window (computed exactly, chosen at most _TAIL_FRACTION * delta) is added in full.
- epsilon is found by bisection to the last floating-point bit and the upper end is returned.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from typing import Any, Final, Literal

import numpy as np
import numpy.typing as npt
from scipy import special, stats

from privacy.amplification import (
    MAX_COHORT,
    UnreachableEpsilon,
    check_delta,
    closed_form_epsilon,
    min_cohort_closed_form,
)

Method = Literal["stronger-2022", "clones-2020", "closed-form"]
METHODS: Final[tuple[Method, ...]] = ("stronger-2022", "clones-2020", "closed-form")
DEFAULT_METHOD: Final[Method] = "stronger-2022"

# Largest epsilon0 accepted. The bound evaluates e^(eps + eps0) - 1 for eps up to eps0, a finite
# double only while 2 eps0 < log(max double) = 709.78 (above that it raised OverflowError). No cohort
# of up to MAX_COHORT reports amplifies an epsilon0 above about log(MAX_COHORT) = 27.6, so the cap
# refuses no epsilon0 that aggregation can amplify. Deltas below privacy.amplification.MIN_DELTA are refused too.
MAX_EPSILON0: Final = 350.0

# Mass of the clone count left out of the explicit sum, as a fraction of the target delta. It is
# added to delta in full, so it only costs tightness.
_TAIL_FRACTION: Final = 1e-4
# Windows up to this many clone counts are summed exactly (about 1 ms per evaluation on one core).
_MAX_EXACT_POINTS: Final = 2048
# Larger windows are cut into this many blocks, each charged at its smallest clone count. Against
# an exact sum this loosens epsilon by about 2e-5 (relative) at n = 3e6 and 4e-6 at n = 1e8.
_BLOCKS: Final = 512
# Relative error allowed for each regularized incomplete beta value (scipy's betainc is within
# 2e-13 of exact rational arithmetic in our checks) and for the final sum of products.
_CDF_RELATIVE_ERROR: Final = 1e-12
_SUM_RELATIVE_ERROR: Final = 1e-9


def stronger_2022_epsilon(epsilon0: float, n: int, delta: float) -> float:
    """Aggregate epsilon of n eps0-DP reports by the numerical bound of FMT 2022.

    Smallest eps (rounded up to the last bit) with

        E_C[ D_{e^eps}(A + 1 - D || A + D) ] <= delta,  C ~ Bin(n - 1, 2 / (e^eps0 + 1)),
        A ~ Bin(C, 1/2),  D ~ Bernoulli(e^eps0 / (e^eps0 + 1)),

    Feldman, McMillan, Talwar, "Stronger privacy amplification by shuffling for Renyi and
    approximate differential privacy" (2022), Theorems 3.1-3.2; seed 000 Section 3 uses it. Never more
    than eps0 (the local guarantee survives post-processing). See the module docstring for how the
    expectation is bounded and the errata caveat on which randomizers it covers.
    """
    return _numerical_epsilon(epsilon0, n, delta, "stronger-2022")


def clones_2020_epsilon(epsilon0: float, n: int, delta: float) -> float:
    """Aggregate epsilon of n eps0-DP reports by the numerical bound of FMT 2020.

    Smallest eps (rounded up) with E_C[ D_{e^eps}(A + 1 - D || A + D) ] <= delta for
    C ~ Bin(n - 1, e^-eps0), A ~ Bin(C, 1/2), D ~ Bernoulli(e^eps0 / (e^eps0 + 1)):
    Feldman, McMillan, Talwar, "Hiding among the clones" (FOCS 2021, arXiv:2012.12803), Section 3
    and Appendix E. Computed exactly rather than on the paper code's grid; never more than eps0.
    """
    return _numerical_epsilon(epsilon0, n, delta, "clones-2020")


def amplified_epsilon(epsilon0: float, n: int, delta: float, method: Method = DEFAULT_METHOD) -> float:
    """Aggregate epsilon of n eps0-DP reports by ``method``.

    "stronger-2022": stronger_2022_epsilon; "clones-2020": clones_2020_epsilon; "closed-form":
    seed 000 Theorem 3.1, eps <= log(1 + (e^eps0 - 1)(4 sqrt(2 log(4/delta)) / sqrt((e^eps0 + 1) n) + 4/n)),
    which is infinite outside its validity condition.
    """
    _check_method(method)
    if method == "closed-form":
        _check(epsilon0=epsilon0, delta=delta)
        _check_n(n)
        return closed_form_epsilon(epsilon0, int(n), delta)
    return _numerical_epsilon(epsilon0, n, delta, method)


def min_cohort(epsilon0: float, epsilon: float, delta: float, method: Method = DEFAULT_METHOD) -> int:
    """Smallest n whose aggregate epsilon by ``method`` is at most ``epsilon``.

    For the numerical methods, n is the smallest cohort with E_C[D_{e^epsilon}(P_C || Q_C)] <= delta
    (so amplified_epsilon(epsilon0, n, delta, method) <= epsilon < amplified_epsilon(..., n - 1, ...));
    the bound falls with n because C grows stochastically with n and D(P_c || Q_c) falls with c.
    Found by galloping from the closed-form cohort and bisecting on n. "closed-form" delegates to
    privacy.amplification.min_cohort_closed_form (seed 000 Theorem 3.1). Raises UnreachableEpsilon
    when no n up to MAX_COHORT (10**12) is enough.
    """
    _check_method(method)
    _check(epsilon0=epsilon0, delta=delta)
    if not (epsilon > 0 and math.isfinite(epsilon)):
        raise ValueError("epsilon must be a positive finite number")
    if method == "closed-form":
        return min_cohort_closed_form(epsilon0, epsilon, delta)

    def excess(n: int) -> float:  # <= 0 exactly when n reports are enough
        return _log_ratio(_CloneBound(epsilon0, n, delta, method).delta(epsilon), delta)

    if excess(MAX_COHORT) > 0:
        raise UnreachableEpsilon(
            f"no cohort of up to {MAX_COHORT:.0e} reports reaches epsilon={epsilon} "
            f"from epsilon0={epsilon0} at delta={delta} ({method})"
        )
    if excess(1) <= 0:
        return 1
    try:
        high = min(min_cohort_closed_form(epsilon0, epsilon, delta), MAX_COHORT)
    except UnreachableEpsilon:
        high = MAX_COHORT
    excess_high = excess(high)
    while excess_high > 0:  # the numerical bound is normally the smaller; gallop up if not
        high = min(4 * high, MAX_COHORT)
        excess_high = excess(high)
    low = max(1, high // 4)
    excess_low = excess(low)
    while excess_low <= 0:
        high, excess_high = low, excess_low
        low = max(1, low // 4)
        excess_low = excess(low)
    return int(_shrink(excess, low, high, excess_low, excess_high, integer=True))


def _numerical_epsilon(epsilon0: float, n: int, delta: float, method: Method) -> float:
    _check(epsilon0=epsilon0, delta=delta)
    _check_n(n)
    bound = _CloneBound(epsilon0, int(n), delta, method)

    def excess(epsilon: float) -> float:  # <= 0 exactly when epsilon holds
        return _log_ratio(bound.delta(epsilon), delta)

    excess_low = excess(0.0)
    if excess_low <= 0:
        return 0.0
    # eps0 itself always holds (the reports are eps0-DP); the bound agrees, up to its tail charge.
    return float(_shrink(excess, 0.0, float(epsilon0), excess_low, min(excess(epsilon0), 0.0), integer=False))


def _log_ratio(value: float, reference: float) -> float:
    return math.log(value / reference) if value > 0 else -math.inf


def _shrink(
    excess: Callable[[Any], float], low: Any, high: Any, excess_low: float, excess_high: float, *, integer: bool
) -> Any:
    """Smallest point where a falling ``excess`` is <= 0, given excess(low) > 0 >= excess(high).

    Safeguarded regula falsi (Illinois variant) on integers or doubles: an interpolation step
    that fails to halve the bracket is followed by a bisection step, so it never needs more
    steps than twice plain bisection, and usually needs a handful. It stops when low and high
    are adjacent (integers, or doubles) and returns high: the result is never rounded down.
    """
    bisect_next = False
    kept_side = 0
    while True:
        if integer:
            if high - low <= 1:
                return high
            middle = (low + high) // 2
        else:
            middle = low + (high - low) / 2
            if middle <= low or middle >= high:
                return high
        point = middle
        if not bisect_next and math.isfinite(excess_low) and math.isfinite(excess_high):
            guess = low + (high - low) * (excess_low / (excess_low - excess_high))
            guess = round(guess) if integer else guess
            if low < guess < high:
                point = guess
        width = high - low
        value = excess(point)
        if value <= 0:
            high, excess_high = point, value
            if kept_side == -1:
                excess_low /= 2.0  # Illinois: the low end stayed twice, so discount it
            kept_side = -1
        else:
            low, excess_low = point, value
            if kept_side == 1:
                excess_high /= 2.0
            kept_side = 1
        bisect_next = (high - low) > width / 2


class _CloneBound:
    """E_C[D_{e^eps}(P_C || Q_C)] for one (eps0, n, delta, method), as a function of eps.

    The clone counts, their weights and the tail mass do not depend on eps, so they are computed
    once and reused across the bisection.
    """

    def __init__(self, epsilon0: float, n: int, delta: float, method: Method) -> None:
        self.epsilon0 = epsilon0
        # q = 2 / (e^eps0 + 1) = 2 expit(-eps0), written so that it neither overflows nor rounds to 0.
        q = 2.0 * special.expit(-epsilon0) if method == "stronger-2022" else math.exp(-epsilon0)
        trials = n - 1
        if trials == 0:
            self.clones = np.zeros(1, dtype=np.float64)
            self.weights = np.ones(1)
            self.tail = 0.0
            return
        mean = trials * q
        log_tail = math.log(2.0 / (_TAIL_FRACTION * delta))
        # Chernoff: P[C <= mean - t] <= exp(-t^2 / (2 mean)), P[C >= mean + t] <= exp(-t^2 / (2 (mean + t/3))).
        lower = max(0, math.floor(mean - math.sqrt(2.0 * mean * log_tail)))
        upper_gap = log_tail / 3.0 + math.sqrt(log_tail**2 / 9.0 + 2.0 * mean * log_tail)
        upper = min(trials, math.ceil(mean + upper_gap))
        # The tail is computed exactly (Chernoff only chose the window) and charged as D = 1.
        below = float(stats.binom.cdf(lower - 1, trials, q)) if lower > 0 else 0.0
        above = float(stats.binom.sf(upper, trials, q))
        self.tail = below + above
        if upper - lower + 1 <= _MAX_EXACT_POINTS:
            starts = np.arange(lower, upper + 1, dtype=np.float64)
            self.weights = stats.binom.pmf(starts, trials, q)
        else:
            edges = np.unique(np.linspace(lower, upper + 1, _BLOCKS + 1).round()).astype(np.float64)
            starts = edges[:-1]
            ends = edges[1:] - 1.0
            # Block mass as a CDF difference, from the side of the mean where the CDF is small.
            at_most = stats.binom.cdf(edges - 1.0, trials, q)  # P[C < edge]
            at_least = stats.binom.sf(edges - 1.0, trials, q)  # P[C >= edge]
            self.weights = np.where(ends <= mean, np.diff(at_most), -np.diff(at_least))
        self.clones = starts

    def delta(self, epsilon: float) -> float:
        per_clone = _pair_delta(self.clones, epsilon, self.epsilon0)
        total = float(np.dot(self.weights, per_clone)) + self.tail
        return min(1.0, total * (1.0 + _SUM_RELATIVE_ERROR))


def _pair_delta(clones: npt.NDArray[np.float64], epsilon: float, epsilon0: float) -> npt.NDArray[np.float64]:
    """D_{e^eps}(A + 1 - D || A + D) for A ~ Bin(c, 1/2), D ~ Bernoulli(e^eps0 / (e^eps0 + 1)), per c.

    With a = e^eps0 / (e^eps0 + 1) and b_c the Bin(c, 1/2) pmf, P(k) = a b_c(k) + (1 - a) b_c(k - 1)
    and Q(k) = (1 - a) b_c(k) + a b_c(k - 1). Their ratio falls in k and exceeds e^eps exactly for
    k < k* = (c + 1)(e^eps0 - e^eps) / ((e^eps0 - 1)(1 + e^eps)), so with F the Bin(c, 1/2) CDF and
    K the largest integer below k*,
        D = a F(K) + (1 - a) F(K - 1) - e^eps ((1 - a) F(K) + a F(K - 1))
          = -a expm1(eps - eps0) F(K) - (1 - a) expm1(eps + eps0) F(K - 1).
    Any K gives a lower bound on D (it is a sum over a set), so the maximum over K-1, K, K+1 is D.
    """
    if epsilon >= epsilon0:
        return np.zeros_like(clones)
    a = special.expit(epsilon0)
    one_minus_a = special.expit(-epsilon0)
    weight_now = -a * math.expm1(epsilon - epsilon0)  # > 0
    weight_before = -one_minus_a * math.expm1(epsilon + epsilon0)  # < 0
    crossing = (clones + 1.0) * (math.expm1(epsilon0 - epsilon) / (math.expm1(epsilon0) * (1.0 + math.exp(-epsilon))))
    # F at K-2 from the incomplete beta function (slow near the median), then K-1, K, K+1 by
    # adding pmf terms (fast): one incomplete beta per clone count instead of four.
    first = np.ceil(crossing) - 3.0
    cdf = [_half_binomial_cdf(first, clones)]
    for step in (1.0, 2.0, 3.0):
        cdf.append(cdf[-1] + stats.binom.pmf(first + step, clones, 0.5))
    best = np.zeros_like(clones)
    for before, now in zip(cdf[:-1], cdf[1:], strict=True):
        value = weight_now * now + weight_before * before
        rounding = _CDF_RELATIVE_ERROR * (weight_now * now - weight_before * before)
        best = np.maximum(best, value + rounding)
    return np.minimum(best, 1.0)


def _half_binomial_cdf(k: npt.NDArray[np.float64], c: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """P[Bin(c, 1/2) <= k] = I_{1/2}(c - k, k + 1), with 0 below the support and 1 above it."""
    inside = (k >= 0) & (k < c)
    safe_k = np.where(inside, k, 0.0)
    safe_c = np.where(inside, c, 1.0)
    value = special.betainc(safe_c - safe_k, safe_k + 1.0, 0.5)
    return np.where(k < 0, 0.0, np.where(k >= c, 1.0, value))


def _check(*, epsilon0: float, delta: float) -> None:
    if not (epsilon0 > 0 and math.isfinite(epsilon0)):
        raise ValueError("epsilon0 must be a positive finite number")
    if epsilon0 > MAX_EPSILON0:
        raise ValueError(f"epsilon0 must be at most {MAX_EPSILON0:g}: e^(2 epsilon0) overflows a double above 354.89")
    check_delta(delta)


def _check_n(n: int) -> None:
    if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 1:
        raise ValueError("n must be an integer of at least 1")
    if n > MAX_COHORT:
        raise ValueError(f"n must be at most {MAX_COHORT:.0e}")


def _check_method(method: str) -> None:
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(METHODS)}, not {method!r}")
