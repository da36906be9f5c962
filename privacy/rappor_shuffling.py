"""Amplification by aggregation for symmetric RAPPOR: two coordinates, each amplified as binary RR, composed exactly.

Check 3 used to charge symmetric RAPPOR (deletion epsilon0 e, so p = 1 / (e^e + 1) per bit) as a
2e-DP randomizer in FMT 2022's numerical bound. This module proves a tighter bound from its actual
output distribution. The released statistic is the SUM S of the n reports (secret-shared
aggregation), and the argument is:

1. Reduction to two coordinates. Neighbouring datasets differ in one device's value, x0 against x1.
   Every bit of every report has its own coin, so the coordinates S_d are independent; for d not
   in {x0, x1}, S_d has the same law in both worlds. Adding or dropping independent coordinates of
   one law is a post-processing both ways, so every hockey-stick divergence of S equals that of
   (S_x0, S_x1) (privacy/enforced_cohort.py).

2. Each coordinate is a sum of binary randomized responses. S_x0 = U_0 + N_0, where N_0 is the sum
   of the other devices' bits x0: device i's bit is binary RR, at epsilon e, of the bit [x_i = x0]
   (kept with probability 1 - p). U_0 is binary RR of 1 in world 0 and of 0 in world 1. So S_x0 is
   the sum (a post-processing of the shuffle) of n binary-RR reports where one input bit changes.
   Binary RR has two inputs, so it meets FMT 2022's condition (*) (privacy/enforced_cohort.py), and
   their reduction gives, for every fixed input of the other devices, a Markov kernel K_0 with
   K_0(P) = law of S_x0 in world 0 and K_0(Q) = its law in world 1, where (P, Q) is the clone pair

       P = (C, A + 1 - D),  Q = (C, A + D),  C ~ Bin(n - 1, 2 / (e^e + 1)),  A ~ Bin(C, 1/2),
       D ~ Bernoulli(e^e / (e^e + 1))                      (privacy/shuffling.py, "stronger-2022").

   Likewise S_x1 = U_1 + N_1 with U_1 binary RR of 0 in world 0 and of 1 in world 1: a kernel K_1
   with K_1(P) = its law in world 0 and K_1(Q) = its law in world 1.

3. Composition. The bits at x0 and at x1 have independent coins, so given the other devices'
   inputs, (S_x0, S_x1) has law K_0(P) x K_1(P) in world 0 and K_0(Q) x K_1(Q) in world 1: the
   product kernel K_0 x K_1 applied to (P x P, Q x Q). By post-processing,

       D_{e^eps}(world 0 || world 1) <= D_{e^eps}(P x P || Q x Q),

   for every input of the other devices. The other order of the worlds gives (Q x Q, P x P), which
   the bijection (c, k) -> (c, c + 1 - k) on each factor maps onto (P x P, Q x Q): the same number.
   Each factor is at epsilon e = half the replacement epsilon0 the device charges; composing two
   such factors exactly is what makes this tighter than one factor at 2e.

How D_{e^eps}(P x P || Q x Q) is bounded above, every step rounding against us:
- Privacy loss L = log(P / Q) at each outcome (c, k); for the product, L1 + L2 with L1, L2
  independent copies under P, and delta(eps) = E[(1 - e^(eps - L1 - L2))_+], a function that only
  grows with L1 and L2. So raising losses pointwise (coupling each outcome with its raised loss)
  gives an upper bound: every loss is rounded up to a grid of spacing h (then eps is at most 2h
  worse), and outcomes left out are charged below.
- Clone counts: D_{e^eps} does not grow when C grows by one in either factor (P_{c+1}, Q_{c+1}
  are P_c, Q_c plus the same Bernoulli(1/2): post-processing), so the pair where each count C is
  replaced by a smaller c' (the start of its block) dominates, and still composes (the product of
  the two kernels). Counts inside a Chernoff window around the mean are kept one by one when the
  window is small, else cut into blocks charged at their start; counts above the window join the
  last block; counts below it are charged as below.
- For each kept count c, the values of A in a Hoeffding window are kept; the P-mass of the others
  (binomial CDFs, computed exactly) and the mass of the counts below the window form a "top" mass
  tau, whose pairs with anything are charged in full: at most 2 tau. The window is chosen so that
  tau is about 1e-4 delta.
- The double sum over the grid is computed from suffix sums with non-negative terms only (no
  cancellation): for s = eps - g_i and J the first grid index with g_J > s,
      sum_{j >= J} w_j (1 - e^(s - g_j)) = -expm1(s - g_J) W_J + e^(s - g_J) T_J,
  W_J = sum_{j >= J} w_j, T_J = sum_{j > J} w_j (1 - e^(-(j - J) h)) = (1 - e^-h) W_{J+1} + e^-h T_{J+1}.
  A relative allowance covers the rounding of these sums of non-negative terms.

tests/unit/privacy/test_rappor_shuffling.py checks the result against the exact delta of the summed
reports, by enumeration of every input of the other devices, at small n.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Final

import numpy as np
import numpy.typing as npt
from scipy import signal, special, stats

from privacy.amplification import MAX_COHORT, UnreachableEpsilon, check_delta
from privacy.shuffling import MAX_EPSILON0, min_cohort

# Mass left out (charged in full), as a fraction of the target delta.
_TAIL_FRACTION: Final = 1e-4
# Clone-count windows up to this many counts are kept one by one; larger ones are cut into _BLOCKS.
_MAX_EXACT_COUNTS: Final = 48
_BLOCKS: Final = 48
# Grid spacing as a fraction of the target epsilon: the bound's epsilon is at most 2 h above the
# exact value of the pair. At most _MAX_GRID points (a coarser grid is only looser).
_GRID_FRACTION: Final = 2.0**-10
_MAX_GRID: Final = 1 << 22
# Relative allowance for the rounding of sums of non-negative doubles (each has relative error at
# most (terms) * 2^-53, and the grid has at most _MAX_GRID terms: 4.7e-10).
_SUM_RELATIVE_ERROR: Final = 1e-8
# Raises a loss by this fraction of a grid step before it is rounded up, so that the rounding error
# of the logarithm (about 1e-15 absolute) cannot round it down.
_ROUNDING_GUARD: Final = 1e-6


def symmetric_rappor_delta(
    deletion_epsilon0: float, n: int, epsilon: float, *, target_delta: float = 1e-12, grid: float | None = None
) -> float:
    """An upper bound on the delta at ``epsilon`` of the sum of n symmetric RAPPOR reports.

    ``deletion_epsilon0`` is SymmetricRappor.epsilon0 (each bit kept with probability
    e^eps0 / (e^eps0 + 1)); the device charges twice it. The bound is D_{e^eps}(P x P || Q x Q) for
    FMT 2022's clone pair (P, Q) at eps0 and n (module docstring), rounded up. The windows leave
    out (and charge in full) about 1e-4 ``target_delta``; ``grid`` is the loss grid's spacing
    (default: epsilon / 1024, at least 1e-3 / 1024).
    """
    _check(deletion_epsilon0, n)
    if not (epsilon >= 0 and math.isfinite(epsilon)):
        raise ValueError("epsilon must be a non-negative finite number")
    check_delta(target_delta)
    spacing = grid if grid is not None else max(epsilon, 1e-3) * _GRID_FRACTION
    return _ProductBound(deletion_epsilon0, n, target_delta, spacing).delta(epsilon)


def symmetric_rappor_epsilon(deletion_epsilon0: float, n: int, delta: float) -> float:
    """Smallest epsilon (to 1e-6 relative, rounded up) whose symmetric_rappor_delta is at most ``delta``.

    Never more than 2 eps0 (each report is 2 eps0-DP in the replacement model, and the sum is a
    post-processing of any one of them with the others).
    """
    _check(deletion_epsilon0, n)
    check_delta(delta)
    ceiling = 2.0 * deletion_epsilon0

    def holds(epsilon: float) -> bool:
        return symmetric_rappor_delta(deletion_epsilon0, n, epsilon, target_delta=delta) <= delta

    if holds(0.0):
        return 0.0
    low, high = 0.0, ceiling
    while high - low > 1e-6 * high:
        middle = (low + high) / 2
        if holds(middle):
            high = middle
        else:
            low = middle
    return high


def symmetric_rappor_min_cohort(deletion_epsilon0: float, epsilon: float, delta: float) -> int:
    """Smallest n whose symmetric_rappor_delta at ``epsilon`` is at most ``delta`` (a bracketing search).

    Starts from the cohort FMT 2022 gives at the replacement epsilon0 2 eps0 (the bound check 3 used
    before), which is never smaller; the result is never above it. Raises UnreachableEpsilon when no
    n up to MAX_COHORT is enough.
    """
    # Refuses what privacy.shuffling.min_cohort refuses, with its messages (about the replacement
    # epsilon0 2 eps0, the one the device charges), and raises its UnreachableEpsilon.
    before = min_cohort(2.0 * deletion_epsilon0, epsilon, delta, method="stronger-2022")

    def excess(n: int) -> float:  # <= 0 exactly when n reports are enough
        bound = symmetric_rappor_delta(deletion_epsilon0, n, epsilon, target_delta=delta)
        return math.log(bound / delta) if bound > 0 else -math.inf

    # A first guess from the closed form's scaling (seed 000 Theorem 3.1 at eps0 for each of two
    # coordinates at eps / sqrt 2, over 16: within about 25% of the answer over the demo range),
    # then galloping to a bracket by factors of 5/4, (5/4)^2, (5/4)^4, ...
    e = math.exp(deletion_epsilon0)
    guess = 4.0 * math.log(4.0 / delta) * (e - 1.0) ** 2 / ((e + 1.0) * epsilon**2)
    guess_n = min(before, max(1, math.ceil(guess)))
    excess_guess = excess(guess_n)
    factor = 1.25
    if excess_guess <= 0:
        high, excess_high = guess_n, excess_guess
        while True:
            low = max(1, min(high - 1, math.floor(high / factor)))
            excess_low = excess(low) if low < high else math.inf
            if excess_low > 0:
                break
            if low == 1:
                return 1
            high, excess_high = low, excess_low
            factor *= factor
    else:
        low, excess_low = guess_n, excess_guess
        while True:
            high = min(before, max(low + 1, math.ceil(low * factor)))
            excess_high = excess(high)
            if excess_high <= 0:
                break
            if high == before:  # this bound is no better here: keep FMT 2022's cohort
                return before
            low, excess_low = high, excess_high
            factor *= factor
    return _smallest_enough(excess, low, high, excess_low, excess_high)


def _smallest_enough(excess: Callable[[int], float], low: int, high: int, excess_low: float, excess_high: float) -> int:
    """Smallest n in (low, high] with excess(n) <= 0, given excess(low) > 0 >= excess(high).

    Interpolates (the excess is close to linear in n near the answer), and after each step also
    tries the neighbour just across it, so that an interpolation landing on the answer is confirmed
    at once; after two steps that fail to halve the bracket comes a bisection step. Returns the
    upper end of a bracket of width 1: never rounded down (the excess need not be exactly monotone
    in n, so this is the smallest n of that bracket, as bisection would find).
    """
    stalled = 0
    while high - low > 1:
        width = high - low
        point = (low + high) // 2
        if stalled < 2 and math.isfinite(excess_low) and math.isfinite(excess_high):
            guess = round(low + width * (excess_low / (excess_low - excess_high)))
            point = min(max(guess, low + 1), high - 1)
        value = excess(point)
        if value <= 0:
            high, excess_high = point, value
            neighbour = point - 1
        else:
            low, excess_low = point, value
            neighbour = point + 1
        if low < neighbour < high:
            value = excess(neighbour)
            if value <= 0:
                high, excess_high = neighbour, value
            else:
                low, excess_low = neighbour, value
        stalled = stalled + 1 if high - low > width / 2 else 0
    return high


class _ProductBound:
    """The rounded-up loss distribution of FMT 2022's clone pair at (eps0, n), and delta of its square."""

    def __init__(self, epsilon0: float, n: int, delta: float, spacing: float) -> None:
        self.epsilon0 = epsilon0
        a = special.expit(epsilon0)  # e^eps0 / (e^eps0 + 1)
        tail = _TAIL_FRACTION * delta
        counts, weights, top = _clone_counts(n, 2.0 * special.expit(-epsilon0), tail / 2)
        # Losses can lie anywhere in [-eps0, eps0]; a grid that fine there would be too long, so the
        # spacing grows until the kept losses fit in _MAX_GRID points (a coarser grid is only looser).
        loss, mass, outside = _atoms(counts, weights, a, tail / 2)
        top += outside
        spread = float(loss.max() - loss.min()) if loss.size else 0.0
        self.spacing = max(spacing, 1e-6, spread / (_MAX_GRID - 2))
        index = np.ceil(loss / self.spacing + _ROUNDING_GUARD)
        self.first = int(index.min())
        self.weights = np.bincount((index - self.first).astype(np.int64), weights=mass)
        self.top = top

    def delta(self, epsilon: float) -> float:
        w = self.weights
        m = w.size
        h = self.spacing
        # W_J = sum_{j >= J} w_j, summed from the top (non-negative terms).
        suffix = np.cumsum(w[::-1])[::-1]
        suffix_next = np.append(suffix[1:], 0.0)  # W_{J+1}
        # T_J = (1 - e^-h) W_{J+1} + e^-h T_{J+1}, T_{m-1} = 0: a first-order recursion from the top.
        decay = math.exp(-h)
        reversed_t = signal.lfilter([1.0], [1.0, -decay], -math.expm1(-h) * suffix_next[::-1])
        t = reversed_t[::-1]
        grid = (self.first + np.arange(m)) * h
        s = epsilon - grid  # per i: the pairs with g_j > s count
        # First index J with g_J > s; rounding may make it one lower, which only over-counts (module docstring).
        j = np.floor(epsilon / h - 2 * self.first - np.arange(m))
        j = np.clip(j, 0, m).astype(np.int64)
        inside = j < m
        jj = np.minimum(j, m - 1)
        gap = np.maximum(grid[jj] - s, 0.0)
        value = np.where(inside, -np.expm1(-gap) * suffix[jj] + np.exp(-gap) * t[jj], 0.0)
        total = float(np.dot(w, value)) + 2.0 * self.top
        return min(1.0, total * (1.0 + _SUM_RELATIVE_ERROR))


def _clone_counts(n: int, q: float, tail: float) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], float]:
    """(counts charged, their weights, mass charged in full) for C ~ Bin(n - 1, q).

    Each count stands for a block of counts at or above it (a smaller count dominates). The mass
    below the Chernoff window is returned apart, to be charged in full.
    """
    trials = n - 1
    if trials == 0:
        return np.zeros(1), np.ones(1), 0.0
    mean = trials * q
    log_tail = math.log(2.0 / tail)
    lower = max(0, math.floor(mean - math.sqrt(2.0 * mean * log_tail)))
    upper_gap = log_tail / 3.0 + math.sqrt(log_tail**2 / 9.0 + 2.0 * mean * log_tail)
    upper = min(trials, math.ceil(mean + upper_gap))
    below = float(stats.binom.cdf(lower - 1, trials, q)) if lower > 0 else 0.0
    if upper - lower + 1 <= _MAX_EXACT_COUNTS:
        starts = np.arange(lower, upper + 1, dtype=np.float64)
    else:
        starts = np.unique(np.linspace(lower, upper + 1, _BLOCKS + 1).round())[:-1]
    # P[start_i <= C < start_{i+1}], the last block open above: every count at or above `lower`.
    at_least = stats.binom.sf(starts - 1.0, trials, q)  # P[C >= start]
    at_most = stats.binom.cdf(starts - 1.0, trials, q)  # P[C < start]
    ends_at_least = np.append(at_least[1:], 0.0)
    ends_at_most = np.append(at_most[1:], 1.0)
    weights = np.where(starts <= mean, ends_at_most - at_most, at_least - ends_at_least)
    return starts, np.maximum(weights, 0.0), below


def _atoms(
    counts: npt.NDArray[np.float64], weights: npt.NDArray[np.float64], a: float, tail: float
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], float]:
    """Every kept outcome (c, k) of the clone pair: its loss log(P(k) / Q(k)) and P-mass weight(c) P_c(k),
    and the P-mass of the outcomes left out (binomial tails, computed exactly), all counts at once.

    P_c(k) = a b(k) + (1 - a) b(k - 1) and Q_c(k) = (1 - a) b(k) + a b(k - 1), b the Bin(c, 1/2) pmf.
    The kept k are a Hoeffding window, P[|A - c/2| >= t] <= 2 exp(-2 t^2 / c), widened by one
    because k lies within one of A.
    """
    reach = np.ceil(np.sqrt(counts * math.log(2.0 / tail) / 2.0)) + 1.0
    low = np.maximum(0.0, np.floor(counts / 2.0) - reach)
    high = np.minimum(counts + 1.0, np.floor(counts / 2.0) + reach + 1.0)
    # b on low - 1 .. high for every count, laid end to end (one pmf call: it is most of the cost).
    sizes = (high - low + 2.0).astype(np.int64)
    owner = np.repeat(np.arange(counts.size), sizes)
    offsets = np.cumsum(sizes) - sizes
    pmf = stats.binom.pmf(low[owner] - 1.0 + (np.arange(owner.size) - offsets[owner]), counts[owner], 0.5)
    first_of_count = np.zeros(owner.size, dtype=bool)
    first_of_count[offsets] = True
    kept = ~first_of_count  # k = low .. high; the entry before each is b(k - 1)
    now = pmf[kept]  # b(k)
    before = pmf[np.flatnonzero(kept) - 1]  # b(k - 1)
    owner = owner[kept]
    p_mass = a * now + (1.0 - a) * before
    q_mass = (1.0 - a) * now + a * before
    # Far out (deltas near 1e-300) b can underflow to 0: an outcome without P-mass counts for nothing,
    # and one whose Q-mass underflowed (an infinite loss) is charged in full with the others left out.
    counted = (p_mass > 0) & (q_mass > 0)
    underflowed = float(np.dot(weights[owner], np.where(q_mass > 0, 0.0, p_mass)))
    owner, p_mass, q_mass = owner[counted], p_mass[counted], q_mass[counted]
    loss = np.log(p_mass) - np.log(q_mass)
    # P-mass of k < low and of k > high (each zero when the window reaches the end of the support).
    left = np.where(
        low > 0, a * stats.binom.cdf(low - 1.0, counts, 0.5) + (1.0 - a) * stats.binom.cdf(low - 2.0, counts, 0.5), 0.0
    )
    right = np.where(
        high <= counts, a * stats.binom.sf(high, counts, 0.5) + (1.0 - a) * stats.binom.sf(high - 1.0, counts, 0.5), 0.0
    )
    return loss, weights[owner] * p_mass, float(np.dot(weights, left + right)) + underflowed


def _check(deletion_epsilon0: float, n: int) -> None:
    if not (deletion_epsilon0 > 0 and math.isfinite(deletion_epsilon0)) or 2.0 * deletion_epsilon0 > MAX_EPSILON0:
        raise ValueError(f"deletion_epsilon0 must be positive and at most {MAX_EPSILON0 / 2:g}")
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not 1 <= n <= MAX_COHORT:
        raise ValueError(f"n must be an integer from 1 to {MAX_COHORT:.0e}")


__all__ = ["UnreachableEpsilon", "symmetric_rappor_delta", "symmetric_rappor_epsilon", "symmetric_rappor_min_cohort"]
