"""Gaussian noise: analytic and classical calibration, and exact discrete Gaussian and Laplace samplers.

The samplers follow Canonne, Kamath, Steinke, "The discrete Gaussian for differential privacy"
(NeurIPS 2020, arXiv:2004.00010), Algorithms 1-3, in exact integer arithmetic: no floating-point
number touches a sample, so the output distribution is exactly N_Z(0, sigma^2), or the discrete
Laplace of the scale asked for, given uniform bits.
The bits come from the operating system's CSPRNG (os.urandom) unless a test passes a seeded
numpy Generator to replay a draw: a PCG64 stream, even seeded from OS entropy, can be predicted
from its outputs, and the noise must stay secret from whoever sees the release.
"""

from __future__ import annotations

import math
import numbers
import os
import struct
from collections.abc import Callable
from fractions import Fraction
from typing import Final

import numpy as np
import numpy.typing as npt
from scipy import optimize, special

from privacy.amplification import check_delta

# 64-bit words drawn from the Generator per refill of the sampler's bit pool.
_WORDS_PER_REFILL: Final = 1024
# Variances above this could produce samples beyond int64.
_MAX_SIGMA2: Final = 2**100
# Discrete Laplace scales above this could produce samples beyond int64 (tails of e^-40 and more).
_MAX_LAPLACE_SCALE: Final = 2**50
# analytic_gaussian_sigma refuses a calibration whose delta it cannot evaluate in double precision to
# this relative accuracy (tiny epsilon with tiny delta: see _delta_rounding_error). Every (epsilon,
# delta) with epsilon >= 1e-6 and delta >= 1e-300 stays below it (6e-4 at that corner, the most).
_MAX_DELTA_RELATIVE_ERROR: Final = 1e-3
# The largest epsilon accepted (privacy.composition.EPSILON_MAX, for the same reason).
_EPSILON_MAX: Final = 700.0
# Unit roundoff of a double.
_ROUNDOFF: Final = 2.0**-53


def analytic_gaussian_delta(sigma: float, epsilon: float, sensitivity: float) -> float:
    """Exact delta of the Gaussian mechanism N(0, sigma^2) at epsilon, for L2 sensitivity Delta.

        delta = Phi(Delta / (2 sigma) - epsilon sigma / Delta) - e^epsilon Phi(-Delta / (2 sigma) - epsilon sigma / Delta)

    Balle and Wang, "Improving the Gaussian mechanism for differential privacy: analytical
    calibration and optimal denoising" (ICML 2018), Theorem 8. Evaluated as
    Phi(a) (1 - exp(epsilon + log Phi(b) - log Phi(a))) with scipy's log_ndtr, so it keeps its
    relative accuracy where both terms are tiny.
    """
    _check_positive(sigma=sigma, sensitivity=sensitivity)
    _check_non_negative(epsilon=epsilon)
    _check_epsilon_max(epsilon)
    return math.exp(_log_gaussian_delta(sigma, epsilon, sensitivity))


def analytic_gaussian_sigma(epsilon: float, delta: float, sensitivity: float) -> float:
    """Smallest sigma for which N(0, sigma^2) noise is (epsilon, delta)-DP: Balle and Wang 2018.

    Solves analytic_gaussian_delta(sigma, epsilon, Delta) = delta (Theorem 8; the paper's
    Algorithm 1 solves the same equation in another parametrisation) by Brent's method on
    log sigma, then steps up to the first double at which the condition holds. Valid for every
    epsilon > 0, unlike the classical bound. seed 001 Table 2 and seed 003 Example 3 quote it.

    Raises ValueError where double precision cannot evaluate delta at the answer to within a relative
    1e-3 (epsilon below about 2e-9 with delta = 1e-30, below about 6e-7 with delta = 1e-300): there
    the two terms of Theorem 8 cancel and the root found can be far off (at epsilon = 1e-10 and
    delta = 1e-300, a sigma whose true delta is 1e90 times the target). delta below 1e-300 is
    refused too.
    """
    _check_positive(epsilon=epsilon, sensitivity=sensitivity)
    _check_epsilon_max(epsilon)
    check_delta(delta)
    target = math.log(delta)

    def excess(log_sigma: float) -> float:
        return _log_gaussian_delta(math.exp(log_sigma), epsilon, sensitivity) - target

    # delta falls as sigma grows; bracket by doubling around the sensitivity.
    high = math.log(sensitivity)
    while excess(high) > 0:
        high += math.log(2.0)
    low = high - math.log(2.0)
    while excess(low) <= 0:
        low -= math.log(2.0)
    root = optimize.brentq(excess, low, high, xtol=1e-300, rtol=4 * np.finfo(float).eps, maxiter=200)
    sigma = math.exp(root)
    while _log_gaussian_delta(sigma, epsilon, sensitivity) > target:
        sigma = math.nextafter(sigma, math.inf)
    error = _delta_rounding_error(sigma, epsilon, sensitivity, delta)
    if error > _MAX_DELTA_RELATIVE_ERROR:
        raise ValueError(
            f"epsilon {epsilon:g} is too small for delta {delta:g}: in double precision the Gaussian's delta "
            f"is only known to a relative {error:.2g} there (at most {_MAX_DELTA_RELATIVE_ERROR:g} is accepted); "
            "use a larger epsilon or delta"
        )
    return sigma


def classical_gaussian_sigma(epsilon: float, delta: float, sensitivity: float) -> float:
    """The classical calibration sigma = sqrt(2 ln(1.25 / delta)) Delta / epsilon, valid for epsilon < 1.

    Dwork and Roth 2014, Theorem A.1; seed 003 Example 1. Raises ValueError for epsilon >= 1,
    where the theorem does not apply (use analytic_gaussian_sigma).
    """
    _check_positive(epsilon=epsilon, sensitivity=sensitivity)
    check_delta(delta)
    if epsilon >= 1:
        raise ValueError("epsilon must be below 1 for the classical Gaussian bound")
    return math.nextafter(math.sqrt(2.0 * math.log(1.25 / delta)) * sensitivity / epsilon, math.inf)


def sample_discrete_gaussian(
    sigma2: float | numbers.Rational, size: int, rng: np.random.Generator | None = None
) -> npt.NDArray[np.int64]:
    """``size`` independent exact samples of the discrete Gaussian N_Z(0, sigma^2).

        P[X = x] proportional to exp(-x^2 / (2 sigma^2)),  x in Z.

    Canonne, Kamath, Steinke 2020, Algorithm 3 (rejection from the discrete Laplace of scale
    t = floor(sigma) + 1, Algorithm 2, with Bernoulli(exp(-gamma)) coins from Algorithm 1), in
    exact rational arithmetic on Python integers. ``sigma2`` is taken exactly (a float is read as
    the rational it denotes). Randomness comes from the OS CSPRNG (os.urandom), or from ``rng``
    when a test passes a seeded Generator to replay a draw, in batches of 64-bit words; the
    rejection loops run per sample in Python and cannot be vectorised without changing the
    distribution, so the cost is linear in ``size``: about 4-7 microseconds per sample on one
    core, nearly independent of sigma (bench/accounting.py measures it).
    """
    variance = _exact_positive(sigma2, "sigma2", _MAX_SIGMA2)
    numerator, denominator = variance.numerator, variance.denominator
    scale = math.isqrt(numerator // denominator) + 1  # floor(sigma) + 1 = floor(sqrt(floor(sigma^2))) + 1
    return _samples(lambda bits: _discrete_gaussian(numerator, denominator, scale, bits), size, rng)


def sample_discrete_laplace(
    scale: float | numbers.Rational, size: int, rng: np.random.Generator | None = None
) -> npt.NDArray[np.int64]:
    """``size`` independent exact samples of the discrete Laplace of scale b:

        P[X = x] = (1 - e^(-1/b)) / (1 + e^(-1/b)) exp(-|x| / b),  x in Z.

    Canonne, Kamath, Steinke 2020, Algorithm 2 with b = t / s taken exactly (a float is read as the
    rational it denotes), with the Bernoulli(exp(-gamma)) coins of Algorithm 1 and the bits of
    sample_discrete_gaussian (the OS CSPRNG, or ``rng`` to replay a draw in a test). Its rejection
    loops run per sample in Python too, at a cost linear in ``size``.
    """
    exact = _exact_positive(scale, "scale", _MAX_LAPLACE_SCALE)
    return _samples(lambda bits: _discrete_laplace(exact.numerator, exact.denominator, bits), size, rng)


def _samples(draw: Callable[[_RandomBits], int], size: int, rng: np.random.Generator | None) -> npt.NDArray[np.int64]:
    """``size`` draws of ``draw`` from one pool of bits, as int64."""
    if isinstance(size, bool) or not isinstance(size, numbers.Integral) or size < 0:
        raise ValueError("size must be a non-negative integer")
    bits = _RandomBits(rng)
    return np.fromiter((draw(bits) for _ in range(int(size))), dtype=np.int64, count=int(size))


def _discrete_gaussian(numerator: int, denominator: int, scale: int, bits: _RandomBits) -> int:
    """Algorithm 3 of CKS20 with sigma^2 = numerator / denominator and t = scale."""
    while True:
        candidate = _discrete_laplace(scale, 1, bits)
        # gamma = (|Y| - sigma^2 / t)^2 / (2 sigma^2) = (|Y| d t - n)^2 / (2 n d t^2)
        offset = abs(candidate) * denominator * scale - numerator
        if _bernoulli_exp_minus(offset * offset, 2 * numerator * denominator * scale * scale, bits):
            return candidate


def _discrete_laplace(numerator: int, denominator: int, bits: _RandomBits) -> int:
    """Algorithm 2 of CKS20 with t = numerator and s = denominator: P[Y = y] proportional to
    exp(-|y| s / t). U + t V is geometric of ratio e^(-1/t) on the naturals, and its floor division by
    s is geometric of ratio e^(-s/t)."""
    while True:
        uniform = bits.below(numerator)
        if not _bernoulli_exp_minus(uniform, numerator, bits):
            continue
        geometric = 0
        while _bernoulli_exp_minus(1, 1, bits):
            geometric += 1
        magnitude = (uniform + numerator * geometric) // denominator
        negative = bits.below(2) == 1
        if negative and magnitude == 0:
            continue  # zero would otherwise be counted twice
        return -magnitude if negative else magnitude


def _bernoulli_exp_minus(numerator: int, denominator: int, bits: _RandomBits) -> bool:
    """Algorithm 1 of CKS20: a coin with P[True] = exp(-numerator / denominator), numerator >= 0.

    For gamma <= 1: draw Bernoulli(gamma / k) for k = 1, 2, ... until the first failure, at k = K.
    Then P[K > k] = gamma^k / k!, so P[K odd] = sum_j (-gamma)^j / j! = exp(-gamma). For gamma > 1
    the coin is the product of floor(gamma) coins of exp(-1) and one of exp(-(gamma - floor(gamma))).
    """
    while numerator > denominator:
        if not _bernoulli_exp_minus_unit(1, 1, bits):
            return False
        numerator -= denominator
    return _bernoulli_exp_minus_unit(numerator, denominator, bits)


def _bernoulli_exp_minus_unit(numerator: int, denominator: int, bits: _RandomBits) -> bool:
    k = 1
    while bits.below(denominator * k) < numerator:  # Bernoulli(gamma / k)
        k += 1
    return k % 2 == 1


class _RandomBits:
    """Uniform integers in [0, bound) by rejection from a pool of bits refilled from the OS CSPRNG,
    or from a Generator (seeded replay, for tests)."""

    def __init__(self, rng: np.random.Generator | None = None) -> None:
        if rng is not None and not isinstance(rng, np.random.Generator):
            raise TypeError("rng must be a numpy.random.Generator or None (the OS CSPRNG)")
        self._rng = rng
        self._words: list[int] = []
        self._next_word = 0
        self._pool = 0  # a few words at most: shifting a large int would cost per call
        self._available = 0

    def take(self, count: int) -> int:
        while self._available < count:
            if self._next_word == len(self._words):
                self._words = self._refill()
                self._next_word = 0
            self._pool |= self._words[self._next_word] << self._available
            self._next_word += 1
            self._available += 64
        value = self._pool & ((1 << count) - 1)
        self._pool >>= count
        self._available -= count
        return value

    def _refill(self) -> list[int]:
        if self._rng is None:
            return list(struct.unpack(f"<{_WORDS_PER_REFILL}Q", os.urandom(8 * _WORDS_PER_REFILL)))
        return self._rng.integers(0, 2**64, size=_WORDS_PER_REFILL, dtype=np.uint64).tolist()

    def below(self, bound: int) -> int:
        if bound == 1:
            return 0
        width = (bound - 1).bit_length()
        while True:
            value = self.take(width)
            if value < bound:
                return value


def _log_gaussian_delta(sigma: float, epsilon: float, sensitivity: float) -> float:
    ratio = sensitivity / (2.0 * sigma)
    shift = epsilon * sigma / sensitivity
    log_first = float(special.log_ndtr(ratio - shift))
    log_second = epsilon + float(special.log_ndtr(-ratio - shift))
    if log_second >= log_first:
        return -math.inf  # only by rounding: the exact difference is positive for sigma > 0
    return log_first + math.log(-math.expm1(log_second - log_first))


def _delta_rounding_error(sigma: float, epsilon: float, sensitivity: float, delta: float) -> float:
    """First-order relative error of delta as _log_gaussian_delta evaluates it at sigma.

    There delta = Phi(a) (1 - e^(epsilon - L)), L = log Phi(a) - log Phi(b), a = r - s, b = -r - s,
    r = Delta / (2 sigma), s = epsilon sigma / Delta. Rounding a and b (by up to u |a| and u |b|,
    u = 2^-53) moves log Phi by its slope h = phi/Phi times that, and log_ndtr is good to about
    u |log Phi|, so L is off by about
        e_L = u (|a| h(a) + |b| h(b) + |log Phi(a)| + |log Phi(b)| + epsilon),
    and delta by e_L (Phi(a) - delta) / delta relatively. When epsilon -> 0 with delta tiny, s stays
    near sqrt(2 log(1/delta)) while r = epsilon / (2 s) vanishes, so L - epsilon (about 2 r / s, what
    delta rests on) vanishes too while e_L does not: the error grows like s^4 / epsilon. Against
    80-digit arithmetic on a grid (epsilon 1e-12 to 50, delta 1e-300 to 0.1, sensitivity 1e-50 to
    1e50) the true error exceeded this estimate only where both were below 1e-10;
    tests/unit/privacy/test_privacy_ranges.py holds reference values.
    """
    ratio = sensitivity / (2.0 * sigma)
    shift = epsilon * sigma / sensitivity
    error = epsilon
    for point in (ratio - shift, -ratio - shift):
        log_cdf = float(special.log_ndtr(point))
        slope = math.exp(-0.5 * point * point - 0.5 * math.log(2.0 * math.pi) - log_cdf)
        error += abs(point) * slope + abs(log_cdf)
    log_first = float(special.log_ndtr(ratio - shift))
    return _ROUNDOFF * error * max(math.exp(log_first) - delta, 0.0) / delta


def _exact_positive(value: float | numbers.Rational, name: str, maximum: int) -> Fraction:
    """``value`` as the exact rational it denotes; ValueError unless it lies in (0, maximum]."""
    if isinstance(value, bool):
        raise ValueError(f"{name} must be a positive finite number")
    if isinstance(value, numbers.Rational):
        exact = Fraction(value.numerator, value.denominator)
    elif isinstance(value, float) and math.isfinite(value):
        exact = Fraction(value)
    else:
        raise ValueError(f"{name} must be a positive finite number")
    if not (0 < exact <= maximum):
        raise ValueError(f"{name} must be positive and at most 2**{maximum.bit_length() - 1}")
    return exact


def _check_positive(**values: float) -> None:
    for name, value in values.items():
        if not (value > 0 and math.isfinite(value)):
            raise ValueError(f"{name} must be a positive finite number")


def _check_epsilon_max(epsilon: float) -> None:
    # Theorem 8's second term carries e^epsilon, which overflows a double above 709.78.
    if epsilon > _EPSILON_MAX:
        raise ValueError(f"epsilon must be at most {_EPSILON_MAX:g}: e^epsilon overflows a double above 709.78")


def _check_non_negative(**values: float) -> None:
    for name, value in values.items():
        if not (value >= 0 and math.isfinite(value)):
            raise ValueError(f"{name} must be a non-negative finite number")
