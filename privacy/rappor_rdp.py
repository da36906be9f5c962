"""Aggregate privacy of symmetric RAPPOR over n reports, through Renyi DP (seed 000 Appendix C.1.3).

Symmetric RAPPOR flips each bit of a one-hot vector with probability p = 1 / (e^eps0 + 1)
(binary randomized response, 2RR, on every coordinate). Summed over n devices, two neighbouring
cohorts differ in exactly two coordinates, d and d' (the old and the new value of one device),
and the coordinates are independent, so by RDP composition (seed 000 Theorem C.3)

    D^alpha(sum over the cohort || sum over the neighbour) <= 2 rho_2RR(n, alpha, eps0),

where rho_2RR bounds the Renyi divergence of one coordinate's sum when one device's bit changes,
over every bit pattern of the other n - 1 devices and both directions of the change. (The proof
in the appendix writes the d-th coordinate twice and ends with "2 eps_2RR"; the bound is the sum
of the two coordinates' divergences, one in each direction, hence twice rho.) With
X ~ Bin(n - 1, p) the others' sum when all of them hold the same bit,

    rho_2RR(n, alpha, eps0) = max( D^alpha(Bern(1-p) + X || Bern(p) + X), D^alpha(Bern(p) + X || Bern(1-p) + X) ).

Other devices holding a mix of bits give no larger divergence: a device holding 1 contributes
1 - Bern(p), which mirrors the pair. That the extreme patterns are the worst is checked by brute
force over every pattern for small n in the tests (it is not proved here).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Final

import numpy as np
import numpy.typing as npt
from scipy import optimize, special, stats

from privacy.composition import DEFAULT_ORDERS, rdp_to_dp

# The window over X leaves out mass whose contribution is below e^-_TAIL_EXPONENT of the sum
# (the sum is at least 1); that contribution is bounded and added anyway.
_TAIL_EXPONENT: Final = 50.0


def symmetric_rappor_std(epsilon0: float, n: int) -> float:
    """Per-coordinate standard deviation of the debiased symmetric-RAPPOR sum of n reports.

        sqrt(n e^eps0 / (e^eps0 - 1)^2)

    Seed 000 Theorem C.2 (variance n e^eps / (e^eps - 1)^2 of Algorithm 4's estimate); seed 001
    Section 4.3 and Table 1.
    """
    _check(epsilon0=epsilon0, n=n)
    return math.sqrt(n * math.exp(epsilon0)) / math.expm1(epsilon0)


def binary_rr_rdp(epsilon0: float, n: int, alpha: float) -> float:
    """rho_2RR(n, alpha, eps0): Renyi divergence of order alpha of n summed eps0-binary-RR bits.

        rho = max over both directions of (1 / (alpha - 1)) ln sum_k P(k)^alpha Q(k)^(1 - alpha),
        P = Bern(1 - p) + X,  Q = Bern(p) + X,  X ~ Bin(n - 1, p),  p = 1 / (e^eps0 + 1).

    Seed 000 Appendix C.1.3 (the function rho_2RR "computed numerically"). The sum runs over a
    window of X; the rest is bounded by e^((alpha - 1) eps0) times its Chernoff-bounded mass (the
    likelihood ratio never exceeds e^eps0) and added.
    """
    _check(epsilon0=epsilon0, n=n)
    if not (alpha > 1 and math.isfinite(alpha)):
        raise ValueError("alpha must be a finite number greater than 1")
    return _BinaryRRSum(epsilon0, n, alpha).rdp(alpha)


def symmetric_rappor_rdp(epsilon0: float, n: int, alpha: float) -> float:
    """RDP of order alpha of n summed symmetric-RAPPOR reports: 2 rho_2RR(n, alpha, eps0) (seed 000 Theorem C.3)."""
    return 2.0 * binary_rr_rdp(epsilon0, n, alpha)


def symmetric_rappor_epsilon(
    epsilon0: float, n: int, delta: float, orders: Sequence[float] = DEFAULT_ORDERS, *, refine: bool = True
) -> float:
    """Aggregate epsilon at ``delta`` of n summed symmetric-RAPPOR reports (seed 000 Appendix C.1.3).

        eps = min over alpha of  2 rho_2RR(n, alpha, eps0) + (ln(1/delta) + (alpha - 1) ln(1 - 1/alpha) - ln alpha) / (alpha - 1)

    (RDP to approximate DP by Canonne, Kamath, Steinke 2020, Prop. 12, as seed 001 Appendix B.5.1
    prescribes). The minimum is taken over ``orders`` and, with ``refine``, over real orders
    between the neighbours of the best one; every alpha > 1 gives a valid bound. Seed 001 Table 1
    (0.317, 0.906, 1.528 for n = 100,000, eps0 = 5, 6.5, 7, delta = 1e-9) is reproduced by the
    integer orders 2..256 without refinement, rounded up to three decimals. Refinement can be
    markedly tighter when the Renyi curve is steep: 1.519 instead of 1.528 at eps0 = 7 (alpha 13.8).
    """
    _check(epsilon0=epsilon0, n=n)
    if not (0.0 < delta < 1.0):
        raise ValueError("delta must lie strictly between 0 and 1")
    ordered = sorted(orders)
    if not ordered or ordered[0] <= 1:
        raise ValueError("orders must be non-empty and greater than 1")
    series = _BinaryRRSum(epsilon0, n, ordered[-1])

    def epsilon_at(alpha: float) -> float:
        return rdp_to_dp(2.0 * series.rdp(alpha), alpha, delta)

    values = [epsilon_at(alpha) for alpha in ordered]
    best = int(np.argmin(values))
    low = ordered[max(best - 1, 0)]
    high = ordered[min(best + 1, len(ordered) - 1)]
    if refine and high > low:
        refined = optimize.minimize_scalar(epsilon_at, bounds=(low, high), method="bounded")
        return min(values[best], epsilon_at(float(refined.x)))
    return values[best]


class _BinaryRRSum:
    """log P, log Q on a window of X ~ Bin(n - 1, p) wide enough for every order up to max_order."""

    def __init__(self, epsilon0: float, n: int, max_order: float) -> None:
        self.epsilon0 = epsilon0
        p = float(special.expit(-epsilon0))
        trials = n - 1
        mean = trials * p
        self.mean = mean
        self.trials = trials
        low, high = self._window(max_order)
        self.low = low
        counts = np.arange(low, high + 1, dtype=np.float64)
        log_pmf = _log_binomial_pmf(counts, trials, p)
        # P(k) = (1 - p) b(k - 1) + p b(k) on k = low .. high + 1; Q swaps p and 1 - p.
        previous = np.concatenate(([-np.inf], log_pmf))
        current = np.concatenate((log_pmf, [-np.inf]))
        log_p, log_1mp = math.log(p), math.log1p(-p)
        self.log_p_dist = np.logaddexp(log_1mp + previous, log_p + current)
        self.log_q_dist = np.logaddexp(log_p + previous, log_1mp + current)

    def _window(self, order: float) -> tuple[int, int]:
        # Chernoff: P[X <= mean - t] <= exp(-t^2 / (2 mean)), P[X >= mean + t] <= exp(-t^2 / (2 (mean + t/3))).
        exponent = self._exponent(order)
        low = max(0, math.floor(self.mean - math.sqrt(2.0 * self.mean * exponent)))
        gap = exponent / 3.0 + math.sqrt(exponent**2 / 9.0 + 2.0 * self.mean * exponent)
        return low, min(self.trials, math.ceil(self.mean + gap))

    def _exponent(self, order: float) -> float:
        return (order - 1.0) * self.epsilon0 + _TAIL_EXPONENT

    def rdp(self, alpha: float) -> float:
        low, high = self._window(alpha)
        # Outside the window the likelihood ratio is at most e^eps0, so the left-out terms add at
        # most e^((alpha - 1) eps0) P[X outside], and each Chernoff side is at most e^-exponent.
        tail_terms = 0.0
        if low > 0:
            tail_terms += math.exp(-_TAIL_EXPONENT)
        if high < self.trials:
            tail_terms += math.exp(-_TAIL_EXPONENT)
        span = slice(low - self.low, high - self.low + 2)
        log_p_dist, log_q_dist = self.log_p_dist[span], self.log_q_dist[span]
        forward = special.logsumexp(alpha * log_p_dist + (1.0 - alpha) * log_q_dist)
        backward = special.logsumexp(alpha * log_q_dist + (1.0 - alpha) * log_p_dist)
        log_sum = max(forward, backward)
        log_sum = log_sum + math.log1p(tail_terms * math.exp(-log_sum))
        return math.nextafter(max(0.0, log_sum / (alpha - 1.0)), math.inf)


def _log_binomial_pmf(counts: npt.NDArray[np.float64], trials: int, p: float) -> npt.NDArray[np.float64]:
    """log Bin(trials, p) pmf on consecutive counts, anchored at the mode and extended by exact ratios.

    scipy's logpmf goes through gammaln, which loses about 1e-6 at a billion trials; the pmf at
    the mode does not underflow, and b(k + 1) / b(k) = (trials - k) p / ((k + 1)(1 - p)).
    """
    if trials == 0:
        return np.zeros_like(counts)
    mode = min(max(math.floor((trials + 1) * p), int(counts[0])), int(counts[-1]))
    anchor = int(mode - counts[0])
    log_anchor = math.log(float(stats.binom.pmf(mode, trials, p)))
    log_odds = math.log(p) - math.log1p(-p)
    steps = np.log(trials - counts[:-1]) - np.log(counts[:-1] + 1.0) + log_odds  # log b(k+1) - log b(k)
    cumulative = np.concatenate(([0.0], np.cumsum(steps)))
    return log_anchor + cumulative - cumulative[anchor]


def _check(*, epsilon0: float, n: int) -> None:
    if not (epsilon0 > 0 and math.isfinite(epsilon0)):
        raise ValueError("epsilon0 must be a positive finite number")
    if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 1:
        raise ValueError("n must be an integer of at least 1")
