"""The discrete Gaussian's exact (epsilon, delta), and the smallest sigma it is (epsilon, delta)-DP at.

The aggregators add N_Z(0, sigma^2) noise to every coordinate (privacy.aggregator_noise). Its
guarantee is computed for the discrete mechanism itself, not borrowed from the continuous
Gaussian: Canonne, Kamath, Steinke, "The discrete Gaussian for differential privacy" (NeurIPS
2020, arXiv:2004.00010), Theorem 7 gives the exact delta of a one-dimensional shift as a sum over
the integers; this module sums it, and its two-coordinate analogue, to double precision.

Neighbouring inputs shift k coordinates of the true vector by an integer Delta each: k = 1, one
coordinate by Delta (add/remove a report, or Theorem 7 itself), and k = 2, one coordinate by
+Delta and another by -Delta (a histogram under replacement: one report moves from a bucket to
another). With independent noise X_1, X_2 ~ N_Z(0, sigma^2), the privacy loss of output z is

    L = (k Delta^2 - 2 Delta W) / (2 sigma^2),   W = X_1 (k = 1) or X_1 - X_2 (k = 2),

and the hockey-stick divergence (the smallest delta at epsilon) is
delta(epsilon) = E[(1 - e^(epsilon - L))_+] = sum over integers w < w_c of P[W = w] (1 - e^(epsilon - L(w))),
w_c = (k Delta^2 - 2 epsilon sigma^2) / (2 Delta). Both neighbours play symmetric roles, so this
is the delta of the pair in either order. For k = 2, P[W = w] = e^(-w^2 / (4 sigma^2)) theta_(w mod 2) / Z^2,
with Z = sum_x e^(-x^2 / (2 sigma^2)), theta_0 = sum_x e^(-x^2 / sigma^2) and
theta_1 = sum_x e^(-(x - 1/2)^2 / sigma^2) (complete the square in x^2 + (x - w)^2). The k = 1 pair
is a post-processing (the first coordinate) of the k = 2 pair, so the k = 2 delta covers both
models.

Rounding: the sum runs over every w whose term exceeds e^-115 of the largest, the rest is bounded
by a geometric series and added, every factor 1 - e^(epsilon - L) is raised by its rounding error,
and the total by a relative 1e-9 (the float error is below 1e-12): the delta returned is never below
the exact one. Above SIGMA_EXACT_MAX (tens of millions of terms) the zCDP bound is used instead: the
multivariate discrete Gaussian is (k Delta^2 / (2 sigma^2))-zCDP (CKS20, Theorem 14), converted by
CKS20 Proposition 12 (as privacy.composition.rdp_to_dp), a sound and slightly looser delta.
"""

from __future__ import annotations

import functools
import math
from typing import Final

import numpy as np
from scipy import optimize

from privacy.amplification import check_delta

# Terms below e^-TAIL_LOG of the largest are bounded, not summed.
TAIL_LOG: Final = 115.0
# Above this sigma the sum would take millions of terms: the zCDP bound replaces it.
SIGMA_EXACT_MAX: Final = 2.0**16
# Below this sigma the normalising sums are taken term by term; above it by Poisson summation,
# whose first correction e^(-pi^2 sigma^2) is below 1e-270 there.
_SIGMA_DIRECT_MAX: Final = 8.0
# Relative safety margin on every delta returned (the float error is below 1e-12).
_MARGIN: Final = 1e-9
# Orders of the zCDP conversion: any order gives a valid bound, the grid only tightens it.
_ORDERS: Final = np.geomspace(1.0 + 1e-3, 1e7, 4000)
_SIGMA_MIN: Final = 2.0**-10
_SIGMA_MAX: Final = 2.0**40


def discrete_gaussian_delta(sigma: float, epsilon: float, *, sensitivity: int = 1, coordinates: int = 2) -> float:
    """Delta at ``epsilon`` of N_Z(0, sigma^2) noise on ``coordinates`` (1 or 2) coordinates, each
    shifted by the integer ``sensitivity`` between neighbours (module docstring): exact, rounded up.

    Raises ValueError for sigma outside [2^-10, 2^40], epsilon negative or not finite, a
    sensitivity that is not a positive integer, or coordinates not 1 or 2.
    """
    _check(sigma, epsilon, sensitivity, coordinates)
    return _delta(float(sigma), float(epsilon), int(sensitivity), int(coordinates))


@functools.lru_cache(maxsize=256)
def discrete_gaussian_sigma(epsilon: float, delta: float, *, sensitivity: int = 1, coordinates: int = 2) -> float:
    """The smallest sigma (to a relative 1e-10, then stepped up until it holds) at which
    discrete_gaussian_delta(sigma, epsilon) <= delta: the discrete mechanism's own calibration.

    Raises ValueError for epsilon not positive and finite, delta outside [1e-300, 1), and where no
    sigma in [2^-10, 2^40] is enough.
    """
    if not (epsilon > 0 and math.isfinite(epsilon)):
        raise ValueError("epsilon must be a positive finite number")
    check_delta(delta)
    _check(1.0, epsilon, sensitivity, coordinates)

    def fits(sigma: float) -> bool:
        return _delta(sigma, epsilon, sensitivity, coordinates) <= delta

    # delta falls as sigma grows; bracket by doubling from the continuous calibration's order.
    high = sensitivity * math.sqrt(coordinates * 2.0 * math.log(1.25 / delta)) / epsilon
    high = min(max(high, _SIGMA_MIN), _SIGMA_MAX)
    while not fits(high):
        if high >= _SIGMA_MAX:
            raise ValueError(f"no sigma up to 2^40 makes the discrete Gaussian ({epsilon:g}, {delta:g})-DP")
        high = min(2.0 * high, _SIGMA_MAX)
    low = high / 2.0
    while low > _SIGMA_MIN and fits(low):
        low = max(low / 2.0, _SIGMA_MIN)
    if fits(low):
        return low

    # Invariant: fits(high) and not fits(low). Brent's method on delta(sigma) - target finds the root
    # in a few evaluations; then step up until the condition holds at the sigma returned.
    def excess(sigma: float) -> float:
        return _delta(sigma, epsilon, sensitivity, coordinates) - delta

    root = optimize.brentq(excess, low, high, xtol=1e-12 * low, rtol=1e-12, maxiter=200)
    sigma = min(max(root, low), high)
    while not fits(sigma):
        sigma = min(sigma * (1.0 + 1e-10), high)
    return sigma


def _delta(sigma: float, epsilon: float, sensitivity: int, coordinates: int) -> float:
    if sigma > SIGMA_EXACT_MAX:
        return _zcdp_delta(sigma, epsilon, sensitivity, coordinates)
    k, step = coordinates, sensitivity
    variance = sigma * sigma
    spread = 2.0 * k * variance  # P[W = w] is proportional to exp(-w^2 / spread) (times theta for k = 2)
    # w < w_c; the term at w_c itself is zero, so w_max = ceil(w_c) - 1 loses nothing.
    w_c = (k * step * step - 2.0 * epsilon * variance) / (2.0 * step)
    w_max = math.ceil(w_c) - 1
    nearest = max(-w_max, 0)  # |w| of the largest weight in range
    w_min = -math.ceil(math.sqrt(nearest * nearest + spread * TAIL_LOG)) - 1
    if w_max < w_min:
        return 0.0
    w = np.arange(w_min, w_max + 1, dtype=np.float64)
    log_weight = -(w * w) / spread
    log_norm, log_theta = _log_normalisers(sigma, k)
    if k == 2:
        parity = (np.arange(w_min, w_max + 1) % 2).astype(bool)
        log_weight = log_weight + np.where(parity, log_theta[1], log_theta[0])
    log_weight -= log_norm
    loss = (k * step * step - 2.0 * step * w) / (2.0 * variance)
    exponent = epsilon - loss
    # 1 - e^x for x < 0, raised by the rounding error of x (a few units of |epsilon| + |loss|).
    factor = -np.expm1(np.minimum(exponent, 0.0)) + 4e-16 * (epsilon + np.abs(loss))
    factor = np.minimum(factor, 1.0)
    top = float(log_weight.max())
    total = float(np.sum(np.exp(log_weight - top) * factor)) * math.exp(top)
    # Terms below w_min: factor <= 1 and weight <= e^(-w^2 / spread) max(theta) / norm, and for
    # w = w_min - j, w^2 >= w_min^2 + 2 j |w_min|: a geometric series of ratio q.
    q = math.exp(-2.0 * abs(w_min) / spread)
    log_first = -(w_min * w_min) / spread + (max(log_theta) if k == 2 else 0.0) - log_norm
    tail = math.exp(log_first) * q / (1.0 - q) if q < 1.0 else math.inf
    return min(1.0, (total + tail) * (1.0 + _MARGIN))


@functools.lru_cache(maxsize=1024)
def _log_normalisers(sigma: float, coordinates: int) -> tuple[float, tuple[float, float]]:
    """(log of the normaliser of P[W = w], (log theta_0, log theta_1)): log Z for k = 1, 2 log Z for k = 2."""

    def log_sum(a: float, shift: float) -> float:  # log sum_x exp(-(x - shift)^2 / a)
        if sigma > _SIGMA_DIRECT_MAX:
            return 0.5 * math.log(math.pi * a)  # Poisson summation; the next term is below e^-600
        reach = math.ceil(40.0 * sigma) + 2
        x = np.arange(-reach, reach + 1, dtype=np.float64) - shift
        exponents = -(x * x) / a
        top = float(exponents.max())  # log-sum-exp: at tiny sigma every term but the largest underflows
        return top + math.log(float(np.sum(np.exp(exponents - top))))

    variance = sigma * sigma
    log_z = log_sum(2.0 * variance, 0.0)
    if coordinates == 1:
        return log_z, (0.0, 0.0)
    return 2.0 * log_z, (log_sum(variance, 0.0), log_sum(variance, 0.5))


def _zcdp_delta(sigma: float, epsilon: float, sensitivity: int, coordinates: int) -> float:
    """CKS20 Theorem 14 (rho = k Delta^2 / (2 sigma^2) zCDP) converted by Proposition 12 at the best order."""
    rho = coordinates * sensitivity * sensitivity / (2.0 * sigma * sigma)
    alpha = _ORDERS
    log_delta = (alpha - 1.0) * (alpha * rho - epsilon) + (alpha - 1.0) * np.log1p(-1.0 / alpha) - np.log(alpha)
    return min(1.0, math.exp(float(log_delta.min())) * (1.0 + _MARGIN))


def _check(sigma: float, epsilon: float, sensitivity: int, coordinates: int) -> None:
    if isinstance(sigma, bool) or not (_SIGMA_MIN <= sigma <= _SIGMA_MAX):
        raise ValueError("sigma must lie in [2^-10, 2^40]")
    if isinstance(epsilon, bool) or not (epsilon >= 0 and math.isfinite(epsilon)):
        raise ValueError("epsilon must be a non-negative finite number")
    if epsilon > 700.0:
        raise ValueError("epsilon must be at most 700: e^epsilon overflows a double above 709.78")
    if isinstance(sensitivity, bool) or not isinstance(sensitivity, int) or not 1 <= sensitivity <= 2**20:
        raise ValueError("sensitivity must be a positive integer (at most 2^20)")
    if coordinates not in (1, 2) or isinstance(coordinates, bool):
        raise ValueError("coordinates must be 1 or 2")
