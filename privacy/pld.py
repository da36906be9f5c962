"""Privacy loss distributions (PLDs): tight composition of many releases, every number an upper bound.

A mechanism M is dominated by a pair of distributions (P, Q) when, for every epsilon, the hockey-stick
divergence of M's outputs on any two neighbouring inputs is at most

    delta(epsilon) = D_{e^eps}(P || Q) = E_{o ~ P}[(1 - e^(eps - L(o)))_+] + P[Q = 0],  L(o) = ln(P(o) / Q(o)),

in both directions. The privacy loss distribution is the law of L(o), o ~ P, with the mass where Q = 0
kept apart as ``infinity_mass``. If M_1, ..., M_T are dominated by (P_i, Q_i), their adaptive
composition is dominated by (P_1 x ... x P_T, Q_1 x ... x Q_T) (Zhu, Dong, Wang, "Optimal accounting
of differential privacy via characteristic function", AISTATS 2022, Theorem 10), whose privacy loss
is the sum of independent losses: the PLD of the composition is the convolution of the PLDs
(Koskela, Jalko, Honkela 2020; Meiser, Mohammadi 2018; google's dp_accounting).

Every pair below is symmetric: a bijection of the outputs maps P to Q and Q to P, so
D(P || Q) = D(Q || P) and one direction's PLD suffices (the tests check it by enumeration).

Dominating pairs (the constructors):
- ``discrete_laplace(scale, sensitivity)``: P = DLap(0, b), Q = DLap(s, b) on Z, P[x] proportional to
  e^(-|x| / b), s an integer. L(x) = (|x - s| - |x|) / b, so |L| <= s / b: pure (s / b)-DP. Exact, no
  truncation (the masses at x <= 0 and x >= s are geometric sums).
- ``discrete_gaussian(sigma, sensitivity)``: P = N_Z(0, sigma^2), Q = N_Z(s, sigma^2), s an integer.
  L(x) = (s^2 - 2 s x) / (2 sigma^2) (the normalisers are equal). x is kept within
  +-(s + sigma sqrt(2 ln(1/_TAIL_MASS)) + 1); the mass beyond is charged as infinite loss.
  Aggregator noise on a histogram (privacy/aggregator_noise.py): one report moving between two
  buckets shifts two coordinates by 1 each, each with its own independent noise: this PLD with s = 1,
  composed twice.
- ``gaussian(sigma, sensitivity)``: P = N(0, sigma^2), Q = N(Delta, sigma^2): L ~ N(mu, 2 mu) with
  mu = Delta^2 / (2 sigma^2) (for comparison with the literature; the aggregators add discrete noise).
- ``shuffled(epsilon0, n, method)``: n shuffled (or summed) eps0-DP reports, by the clone reduction of
  privacy/shuffling.py: given C = c clones, P_c = A + 1 - D, Q_c = A + D, A ~ Bin(c, 1/2),
  D ~ Bernoulli(p), p = e^eps0 / (e^eps0 + 1); C ~ Bin(n - 1, e^-eps0) ("clones-2020", every eps0-DP
  randomizer) or Bin(n - 1, 2 / (e^eps0 + 1)) ("stronger-2022", the randomizers of
  privacy/enforced_cohort.py). The shuffled output is a post-processing of (C, P_C) against (C, Q_C)
  (Feldman, McMillan, Talwar 2020 Thm 3.2, 2022 Thm 3.1), so this pair dominates it, at every epsilon.
  With B_c the Bin(c, 1/2) pmf, P_c(k) = p B_c(k) + (1 - p) B_c(k - 1), Q_c(k) = (1 - p) B_c(k) + p B_c(k - 1),
  and B_c(k - 1) / B_c(k) = k / (c - k + 1), so for k = 0 .. c + 1
      P_c(k) / Q_c(k) = (p (c - k + 1) + (1 - p) k) / ((1 - p)(c - k + 1) + p k)
                      = 1 + tanh(eps0 / 2)(c + 1 - 2k) / ((1 - p)(c - k + 1) + p k),
  e^eps0 at k = 0 and e^-eps0 at k = c + 1. The pair is symmetric: k -> c + 1 - k maps P_c to Q_c.

Why each number is an upper bound:
- Losses are rounded UP to the grid of step ``interval`` (plus a relative 1e-12 for the rounding error
  of computing them). delta(eps) = E[(1 - e^(eps - L))_+] rises with L, and rounding up couples the
  rounded loss above the true one in every coordinate of a composition, so its sum is above the sum
  of true losses and every hockey-stick value above the true one. Convolution on the grid is exact
  (sums of grid points are grid points); a T-fold composition is at most T * interval too pessimistic in
  loss, so epsilon is at most T * interval above the exact one (less: that much is the worst case).
- Mass cut away is never lost: the top tail (large losses) is charged as infinite loss; the bottom
  tail (at most _TAIL_MASS) is moved up to the lowest kept loss; windows over x, C and k are chosen by
  Chernoff/Hoeffding, but the mass outside is computed exactly (scipy's binomial cdf/sf) and charged
  as infinite loss. A composition keeps the losses where Chernoff's bound on the sum (the product of
  the two grid distributions' moment generating functions, bounded above blockwise) leaves at most
  _TAIL_MASS in each tail; that bound, not the FFT's noisy tail values, is charged: as infinite
  loss above, as mass at the lowest kept loss below.
- Clone counts: P_{c+1}, Q_{c+1} are P_c, Q_c plus the same independent Bernoulli(1/2), so
  (C, P_C) is a post-processing of (C', P_{C'}) with C' the smallest c of C's block (draw C given its
  block, the same in both worlds, then add Bin(C - C', 1/2)): charging a block at its smallest c is sound.
- FFT convolution errs by at most ~ u log2(N) ||a||_2 ||b||_2 in 2-norm (Higham, Accuracy and
  Stability of Numerical Algorithms, 2nd ed., Section 24.1); sqrt(N) times ten times that bounds the
  error's 1-norm with room to spare, and is added as mass at the largest loss (delta weighs mass at
  loss l by 1 - e^(eps - l), which rises with l, so the error moves no delta by more). Negative
  rounding noise is clipped to 0. Direct convolution (short arrays) is charged its summation error.
- epsilon(delta) solves the piecewise-exponential delta(eps) between grid points exactly, then steps
  up until the computed hockey-stick value is at most delta.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal

import numpy as np
import numpy.typing as npt
from scipy import signal, special, stats

ShuffleMethod = Literal["stronger-2022", "clones-2020"]
SHUFFLE_METHODS: Final[tuple[ShuffleMethod, ...]] = ("stronger-2022", "clones-2020")

# Default grid step of the losses. A T-fold composition is at most T * interval pessimistic in
# epsilon; 1e-4 keeps 10 rounds within 1e-3 of exact and one PLD of a million reports in a few
# thousand points.
DEFAULT_INTERVAL: Final = 1e-4
# Mass cut from either tail of a window or a composition. Top tails are charged in full (infinite
# loss), so several of these add up in delta: callers ask for deltas of 1e-12 and more.
_TAIL_MASS: Final = 1e-18
# Relative allowance for the floating-point error of a computed loss before it is rounded up.
_LOSS_SLACK: Final = 1e-12
# Relative allowance for the rounding of the sums in the hockey-stick divergence.
_SUM_SLACK: Final = 1e-12
# Clone counts summed one by one up to this many; larger windows are cut into _BLOCKS blocks.
_MAX_EXACT_CLONES: Final = 256
_BLOCKS: Final = 256
# ... but fewer blocks (at least _MIN_BLOCKS) when the windows of k are wide: cells of the (c, k) array.
_MIN_BLOCKS: Final = 16
_MAX_CELLS: Final = 1_000_000
# Largest grid a PLD may have: a composition that would need more is refused (ValueError), not slow.
MAX_POINTS: Final = 1 << 24
# Convolutions of arrays below this length are done directly (exact up to summation error).
_DIRECT_CONVOLUTION: Final = 64
_UNIT_ROUNDOFF: Final = np.finfo(np.float64).eps / 2


@dataclass(frozen=True, eq=False)
class PrivacyLossDistribution:
    """A pessimistic PLD: loss (offset + i) * interval has probability probs[i]; infinite loss, infinity_mass.

    Build one with a constructor of this module (from_losses, from_pmfs, discrete_gaussian,
    discrete_laplace, gaussian, shuffled); compose with compose / self_compose; read it with
    hockey_stick and epsilon. Instances are immutable (probs is a read-only array).
    """

    interval: float
    offset: int
    probs: npt.NDArray[np.float64]
    infinity_mass: float

    def __post_init__(self) -> None:
        if not (self.interval > 0 and math.isfinite(self.interval)):
            raise ValueError("interval must be a positive finite number")
        if isinstance(self.offset, bool) or not isinstance(self.offset, numbers.Integral):
            raise ValueError("offset must be an integer")
        probs = np.array(self.probs, dtype=np.float64)
        if probs.ndim != 1 or probs.size == 0:
            raise ValueError("probs must be a non-empty one-dimensional array")
        if not (np.all(np.isfinite(probs)) and np.all(probs >= 0)):
            raise ValueError("probs must be finite and non-negative")
        if not (0.0 <= self.infinity_mass <= 1.0):
            raise ValueError("infinity_mass must lie in [0, 1]")
        probs.flags.writeable = False
        object.__setattr__(self, "offset", int(self.offset))
        object.__setattr__(self, "probs", probs)
        object.__setattr__(self, "infinity_mass", float(self.infinity_mass))

    @property
    def losses(self) -> npt.NDArray[np.float64]:
        """The grid's losses, (offset + i) * interval."""
        return (self.offset + np.arange(self.probs.size, dtype=np.float64)) * self.interval

    def compose(self, other: PrivacyLossDistribution) -> PrivacyLossDistribution:
        """The PLD of both mechanisms run one after the other (adaptively): the convolution of the two."""
        if other.interval != self.interval:
            raise ValueError(f"intervals differ ({self.interval!r} and {other.interval!r}): build both on one grid")
        if self.probs.size + other.probs.size - 1 > MAX_POINTS:
            raise ValueError(f"the composition would need more than {MAX_POINTS} grid points: use a coarser interval")
        probs, error = _convolve(self.probs, other.probs)
        # Where the sum's tails hold less than _TAIL_MASS by Chernoff's bound on the product of the two
        # moment generating functions (exact for these grid distributions), the FFT's output is
        # rounding noise: it is replaced by the bound, charged as infinite loss at the top and moved up
        # to the lowest kept loss at the bottom.
        low, high = _chernoff_window(self, other)
        top_cut = 0.0
        if high < probs.size - 1:
            probs, top_cut = probs[: high + 1].copy(), _TAIL_MASS
        bottom_cut = 0
        if low > 0:
            probs, bottom_cut = probs[low:].copy(), low
            probs[0] += _TAIL_MASS
        # The rounding error's 1-norm is charged at the largest loss: delta(eps) weighs mass at loss
        # l by 1 - e^(eps - l), which rises with l, so no placement of the error costs more. The
        # support (and so a pure-DP epsilon) is unchanged.
        probs[-1] += error
        # Infinite loss in either coordinate is infinite loss of the sum: the mass of (inf, anything)
        # plus (finite, inf), with the finite masses as held (clipping can only have raised them).
        finite_self = float(np.sum(self.probs)) * (1.0 + _SUM_SLACK)
        finite_other = float(np.sum(other.probs)) * (1.0 + _SUM_SLACK)
        infinity = self.infinity_mass * (finite_other + other.infinity_mass) + finite_self * other.infinity_mass
        return _truncated(self.interval, self.offset + other.offset + bottom_cut, probs, infinity + top_cut)

    def self_compose(self, count: int) -> PrivacyLossDistribution:
        """The PLD of ``count`` adaptive runs of this mechanism, by repeated squaring (about 2 log2(count) FFTs)."""
        if isinstance(count, bool) or not isinstance(count, numbers.Integral) or count < 1:
            raise ValueError("count must be an integer of at least 1")
        result: PrivacyLossDistribution | None = None
        power: PrivacyLossDistribution = self
        remaining = int(count)
        while True:
            if remaining & 1:
                result = power if result is None else result.compose(power)
            remaining >>= 1
            if not remaining:
                break
            power = power.compose(power)
        assert result is not None
        return result

    def hockey_stick(self, epsilon: float) -> float:
        """delta(eps) = infinity_mass + sum over l > eps of p(l) (1 - e^(eps - l)), rounded up."""
        if math.isnan(epsilon):
            raise ValueError("epsilon must be a number")
        losses = self.losses
        above = losses > epsilon
        terms = self.probs[above] * -np.expm1(epsilon - losses[above])
        total = float(np.sum(terms)) + self.infinity_mass  # pairwise summation: within _SUM_SLACK
        return min(1.0, total * (1.0 + _SUM_SLACK))

    def epsilon(self, delta: float) -> float:
        """Smallest epsilon >= 0 with hockey_stick(epsilon) <= delta, rounded up; math.inf when
        infinity_mass > delta. Raises ValueError unless 0 <= delta <= 1."""
        if isinstance(delta, bool) or not isinstance(delta, numbers.Real) or not (0.0 <= delta <= 1.0):
            raise ValueError(f"delta must be a number in [0, 1], not {delta!r}")
        delta = float(delta)
        if self.infinity_mass > delta:
            return math.inf
        if self.hockey_stick(0.0) <= delta:
            return 0.0
        losses = self.losses
        # delta at each grid loss l_j: infinity + S_j - e^(l_j) E_j, S_j and E_j the sums of p_i and
        # p_i e^(-l_i) over i > j (E_j in logs: e^(-l) overflows for large negative losses).
        reverse_probs = self.probs[::-1]
        after = np.concatenate((np.cumsum(reverse_probs)[::-1][1:], [0.0]))
        with np.errstate(divide="ignore"):
            log_weights = np.log(self.probs) - losses
        log_after = np.concatenate((np.logaddexp.accumulate(log_weights[::-1])[::-1][1:], [-np.inf]))
        deltas = self.infinity_mass + after - np.exp(losses + log_after)
        deltas = deltas + _SUM_SLACK * (after + self.infinity_mass)
        candidates = np.nonzero((deltas <= delta) & (losses > 0))[0]
        if candidates.size == 0:  # only reachable through rounding: the largest loss always holds
            return float(max(losses[-1], 0.0))
        j = int(candidates[0])
        upper = float(losses[j])
        lower = max(0.0, float(losses[j - 1])) if j > 0 else 0.0
        # Between l_{j-1} and l_j the losses above eps are those from j on:
        # delta(eps) = infinity + S - e^eps E, so eps = ln(infinity + S - delta) - ln E.
        mass = float(self.infinity_mass + after[j - 1]) if j > 0 else self.infinity_mass + float(np.sum(self.probs))
        log_mass = float(log_after[j - 1]) if j > 0 else float(special.logsumexp(log_weights))
        excess = mass - delta
        solution = math.log(excess) - log_mass if excess > 0 else lower
        epsilon = min(upper, max(lower, solution))
        for _ in range(64):
            if self.hockey_stick(epsilon) <= delta or epsilon >= upper:
                break
            epsilon = min(upper, epsilon + max(abs(epsilon) * 1e-12, 1e-15) * 2.0)
        return min(epsilon, upper)


def from_losses(
    losses: npt.ArrayLike,
    probs: npt.ArrayLike,
    *,
    infinity_mass: float = 0.0,
    interval: float = DEFAULT_INTERVAL,
) -> PrivacyLossDistribution:
    """The PLD of losses with these probabilities, each loss rounded up to the grid (+inf allowed).

    The caller vouches that the losses are those of a dominating pair in both directions (a
    symmetric pair, or the larger of the two directions' PLDs)."""
    loss_array = np.asarray(losses, dtype=np.float64).ravel()
    prob_array = np.asarray(probs, dtype=np.float64).ravel()
    if loss_array.shape != prob_array.shape or loss_array.size == 0:
        raise ValueError("losses and probs must be non-empty and of the same length")
    if np.any(np.isnan(loss_array)) or np.any(loss_array == -np.inf):
        raise ValueError("losses must be numbers above -infinity")
    if not (np.all(np.isfinite(prob_array)) and np.all(prob_array >= 0)):
        raise ValueError("probs must be finite and non-negative")
    if not (interval > 0 and math.isfinite(interval)):
        raise ValueError("interval must be a positive finite number")
    infinite = np.isinf(loss_array)
    infinity = float(infinity_mass) + math.fsum(prob_array[infinite].tolist())
    finite_losses, finite_probs = loss_array[~infinite], prob_array[~infinite]
    if finite_losses.size == 0:
        return PrivacyLossDistribution(interval, 0, np.zeros(1), min(1.0, infinity))
    indices = _round_up(finite_losses, interval)
    low = int(indices.min())
    span = int(indices.max()) - low + 1
    if span > MAX_POINTS:
        raise ValueError(f"the losses span more than {MAX_POINTS} grid points: use a coarser interval")
    grid = np.bincount(indices - low, weights=finite_probs, minlength=span)
    return _truncated(interval, low, grid, min(1.0, infinity))


def from_pmfs(p: npt.ArrayLike, q: npt.ArrayLike, *, interval: float = DEFAULT_INTERVAL) -> PrivacyLossDistribution:
    """The PLD of P against Q, two pmfs on the same finite outcomes (P's mass where Q = 0 is infinite loss).

    One direction: for an asymmetric pair, compose or read both from_pmfs(p, q) and from_pmfs(q, p)."""
    p_array = np.asarray(p, dtype=np.float64).ravel()
    q_array = np.asarray(q, dtype=np.float64).ravel()
    if p_array.shape != q_array.shape or p_array.size == 0:
        raise ValueError("p and q must be non-empty and of the same length")
    if not (np.all(p_array >= 0) and np.all(q_array >= 0) and np.all(np.isfinite(p_array + q_array))):
        raise ValueError("p and q must be finite and non-negative")
    support = p_array > 0
    with np.errstate(divide="ignore"):
        losses = np.log(p_array[support]) - np.log(q_array[support])
    return from_losses(losses, p_array[support], interval=interval)


def discrete_laplace(
    scale: float, sensitivity: int = 1, *, interval: float = DEFAULT_INTERVAL
) -> PrivacyLossDistribution:
    """PLD of the discrete Laplace, P[x] proportional to e^(-|x| / b) on Z, against its shift by an integer s.

    With q = e^(-1/b): mass 1 / (1 + q) at x <= 0 (loss s / b), q^s / (1 + q) at x >= s (loss -s / b),
    and (1 - q) / (1 + q) q^x at 0 < x < s (loss (s - 2x) / b). Pure (s / b)-DP; exact."""
    scale = _positive("scale", scale)
    shift = _shift(sensitivity)
    q = math.exp(-1.0 / scale)
    middle = np.arange(1, shift, dtype=np.float64)
    losses = np.concatenate(([shift / scale], (shift - 2.0 * middle) / scale, [-shift / scale]))
    probs = np.concatenate(
        ([1.0 / (1.0 + q)], -math.expm1(-1.0 / scale) / (1.0 + q) * q**middle, [q**shift / (1.0 + q)])
    )
    return from_losses(losses, probs, interval=interval)


def discrete_gaussian(
    sigma: float, sensitivity: int = 1, *, interval: float = DEFAULT_INTERVAL
) -> PrivacyLossDistribution:
    """PLD of N_Z(0, sigma^2) against N_Z(s, sigma^2), s an integer: L(x) = (s^2 - 2 s x) / (2 sigma^2).

    x is kept within s/2 +- (s/2 + sigma sqrt(2 ln(1/_TAIL_MASS)) + 1); the mass of P outside (at
    most about 2 _TAIL_MASS) is summed (out to 40 sigma further, beyond which e^(-800) is nothing a
    double holds) and charged as infinite loss."""
    sigma = _positive("sigma", sigma)
    shift = _shift(sensitivity)
    reach = math.ceil(shift / 2 + sigma * math.sqrt(2.0 * math.log(1.0 / _TAIL_MASS)) + 1)
    centre = shift // 2
    if 2 * reach + 1 > MAX_POINTS:
        raise ValueError("sigma is too large for a discrete Gaussian PLD: use gaussian()")
    far = reach + math.ceil(40.0 * sigma) + 1
    everywhere = np.arange(centre - far, centre + far + 1, dtype=np.float64)
    log_weights = -(everywhere**2) / (2.0 * sigma**2)
    log_normaliser = float(special.logsumexp(log_weights))
    probs_everywhere = np.exp(log_weights - log_normaliser)
    inside = np.abs(everywhere - centre) <= reach
    outside = math.fsum(probs_everywhere[~inside].tolist())
    x = everywhere[inside]
    losses = (shift**2 - 2.0 * shift * x) / (2.0 * sigma**2)
    return from_losses(losses, probs_everywhere[inside], infinity_mass=outside, interval=interval)


def gaussian(sigma: float, sensitivity: float = 1.0, *, interval: float = DEFAULT_INTERVAL) -> PrivacyLossDistribution:
    """PLD of N(0, sigma^2) against N(Delta, sigma^2): L ~ N(mu, 2 mu), mu = Delta^2 / (2 sigma^2).

    The mass of L in (l_{i-1}, l_i] goes to l_i; below the window it goes to the window's lowest
    point, above it to infinity (each tail at most _TAIL_MASS)."""
    sigma = _positive("sigma", sigma)
    sensitivity = _positive("sensitivity", sensitivity)
    mean = sensitivity**2 / (2.0 * sigma**2)
    deviation = sensitivity / sigma
    reach = deviation * math.sqrt(2.0 * math.log(1.0 / _TAIL_MASS)) + interval
    low = math.floor((mean - reach) / interval)
    high = math.ceil((mean + reach) / interval)
    if high - low + 1 > MAX_POINTS:
        raise ValueError("the Gaussian's loss spans too many grid points: use a coarser interval")
    edges = np.arange(low, high + 1, dtype=np.float64) * interval
    z = (edges - mean) / deviation
    # Masses as CDF differences below the mean and survival differences above it (no cancellation).
    cdf = stats.norm.cdf(z)
    sf = stats.norm.sf(z)
    masses = np.where(z[1:] <= 0, np.diff(cdf), -np.diff(sf))
    probs = np.concatenate(([cdf[0]], masses))
    return _truncated(interval, low, probs, float(sf[-1]))


def shuffled(
    epsilon0: float, n: int, method: ShuffleMethod = "stronger-2022", *, interval: float = DEFAULT_INTERVAL
) -> PrivacyLossDistribution:
    """PLD of the clone pair (C, P_C) against (C, Q_C) dominating n shuffled eps0-DP reports (module docstring).

    Feldman, McMillan, Talwar: "clones-2020" (arXiv:2012.12803, Section 3) with C ~ Bin(n - 1, e^-eps0),
    "stronger-2022" (arXiv:2208.04591, Thms 3.1-3.2) with C ~ Bin(n - 1, 2 / (e^eps0 + 1)). Its
    hockey-stick divergence is E_C[D_{e^eps}(P_C || Q_C)], the quantity privacy/shuffling.py bounds.
    """
    epsilon0 = _positive("epsilon0", epsilon0)
    if epsilon0 > 350.0:
        raise ValueError("epsilon0 must be at most 350")
    if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 1:
        raise ValueError("n must be an integer of at least 1")
    if method not in SHUFFLE_METHODS:
        raise ValueError(f"method must be one of {', '.join(SHUFFLE_METHODS)}, not {method!r}")
    trials = int(n) - 1
    rate = 2.0 * special.expit(-epsilon0) if method == "stronger-2022" else math.exp(-epsilon0)
    clones, weights, infinity = _clone_blocks(trials, rate)
    if clones.size > 1:
        # Fewer, wider blocks when each clone count's window of k is wide (large c), so that the 2-D
        # array stays near _MAX_CELLS cells; a block's relative width stays below 1e-3 there.
        width = 2.0 * math.sqrt(float(clones[-1]) * math.log(2.0 / _TAIL_MASS) / 2.0) + 5.0
        blocks = int(min(_BLOCKS, max(_MIN_BLOCKS, _MAX_CELLS // width)))
        clones, weights, infinity = _clone_blocks(trials, rate, blocks)
    p = float(special.expit(epsilon0))
    one_minus_p = float(special.expit(-epsilon0))
    tilt = math.tanh(epsilon0 / 2.0)
    # Per clone count c, the outcomes k = c/2 +- reach (of 0 .. c + 1), as one 2-D array padded with zero mass.
    log_tail = math.log(2.0 / _TAIL_MASS)
    reaches = np.ceil(np.sqrt(clones * log_tail / 2.0)) + 1.0
    firsts = np.maximum(0.0, np.floor((clones + 1.0) / 2.0 - reaches))
    lasts = clones + 1.0 - firsts  # symmetric window: k -> c + 1 - k
    width = int(np.max(lasts - firsts)) + 1
    k = firsts[:, None] + np.arange(width, dtype=np.float64)[None, :]
    c = clones[:, None]
    valid = k <= lasts[:, None]
    # B_c(k - 1) and B_c(k) from one pmf evaluation per point: a column before the window, shifted.
    pmf = stats.binom.pmf(np.concatenate((k[:, :1] - 1.0, k), axis=1), c, 0.5)
    now, before = pmf[:, 1:], pmf[:, :-1]
    mass = np.where(valid, p * now + one_minus_p * before, 0.0) * weights[:, None]
    denominator = one_minus_p * (c - k + 1.0) + p * k
    numerator = p * (c - k + 1.0) + one_minus_p * k
    with np.errstate(invalid="ignore", divide="ignore"):
        # log1p of the ratio's excess over 1 where the ratio is near 1 (small eps0: no cancellation);
        # log of the two (positive) sides where tanh(eps0 / 2) may round to 1 (large eps0).
        losses = (
            np.log1p(tilt * (c + 1.0 - 2.0 * k) / denominator)
            if tilt < 0.5
            else np.log(numerator) - np.log(denominator)
        )
    losses = np.where(valid, losses, 0.0)
    # P_c's mass outside the window: k < first and k > last, exactly.
    below = p * stats.binom.cdf(firsts - 1.0, clones, 0.5) + one_minus_p * stats.binom.cdf(firsts - 2.0, clones, 0.5)
    above = p * stats.binom.sf(lasts, clones, 0.5) + one_minus_p * stats.binom.sf(lasts - 1.0, clones, 0.5)
    infinity += math.fsum((weights * (below + above)).tolist())
    keep = mass > 0
    return from_losses(losses[keep], mass[keep], infinity_mass=min(1.0, infinity), interval=interval)


def composed_epsilon(steps: Sequence[tuple[PrivacyLossDistribution, int]], delta: float) -> float:
    """Epsilon at ``delta`` of every (pld, count) step run count times, all composed (adaptively).

    The PLDs must share one interval. Counts of 0 are skipped; with nothing left the answer is 0."""
    composed: PrivacyLossDistribution | None = None
    for pld, count in steps:
        if isinstance(count, bool) or not isinstance(count, numbers.Integral) or count < 0:
            raise ValueError("every count must be a non-negative integer")
        if count == 0:
            continue
        power = pld.self_compose(int(count))
        composed = power if composed is None else composed.compose(power)
    if composed is None:
        if not (0.0 <= delta <= 1.0):
            raise ValueError(f"delta must be a number in [0, 1], not {delta!r}")
        return 0.0
    return composed.epsilon(delta)


def _clone_blocks(
    trials: int, rate: float, blocks: int = _BLOCKS
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], float]:
    """(clone counts charged, their probabilities, the mass of C outside the window) for C ~ Bin(trials, rate)."""
    if trials == 0 or rate == 0.0:
        return np.zeros(1), np.ones(1), 0.0
    mean = trials * rate
    log_tail = math.log(2.0 / _TAIL_MASS)
    # Chernoff: P[C <= mean - t] <= exp(-t^2 / (2 mean)), P[C >= mean + t] <= exp(-t^2 / (2 (mean + t/3))).
    lower = max(0, math.floor(mean - math.sqrt(2.0 * mean * log_tail)))
    upper_gap = log_tail / 3.0 + math.sqrt(log_tail**2 / 9.0 + 2.0 * mean * log_tail)
    upper = min(trials, math.ceil(mean + upper_gap))
    outside = (float(stats.binom.cdf(lower - 1, trials, rate)) if lower > 0 else 0.0) + float(
        stats.binom.sf(upper, trials, rate)
    )
    if upper - lower + 1 <= _MAX_EXACT_CLONES:
        starts = np.arange(lower, upper + 1, dtype=np.float64)
        return starts, stats.binom.pmf(starts, trials, rate), outside
    edges = np.unique(np.linspace(lower, upper + 1, blocks + 1).round()).astype(np.float64)
    starts = edges[:-1]
    ends = edges[1:] - 1.0
    at_most = stats.binom.cdf(edges - 1.0, trials, rate)  # P[C < edge]
    at_least = stats.binom.sf(edges - 1.0, trials, rate)  # P[C >= edge]
    weights = np.where(ends <= mean, np.diff(at_most), -np.diff(at_least))
    return starts, np.maximum(weights, 0.0), outside


# Orders of the moment generating function tried for the tail bounds, both signs.
_CHERNOFF_ORDERS: Final = np.geomspace(1e-2, 1e3, 31)
_MGF_BLOCK: Final = 256


def _chernoff_window(a: PrivacyLossDistribution, b: PrivacyLossDistribution) -> tuple[int, int]:
    """Indices (into the convolution of a.probs and b.probs) outside which each tail of the sum of
    the two finite losses holds at most _TAIL_MASS: P[L >= t] <= M(lam) e^(-lam t) for lam > 0 and
    P[L <= t] <= M(-lam) e^(lam t), M = M_a M_b the moment generating function (Chernoff)."""
    log_tail = math.log(_TAIL_MASS)
    # The orders that matter are about (distance from the mean) / variance: scale them by the sum's
    # standard deviation (a grid step at least).
    spread = math.sqrt(_variance(a) + _variance(b)) + a.interval
    bounds = []
    for sign in (1.0, -1.0):
        orders = sign * _CHERNOFF_ORDERS / spread
        log_mgf_a = _log_mgf(a, orders)
        log_mgf = 2.0 * log_mgf_a if b is a else log_mgf_a + _log_mgf(b, orders)
        # The loss t at which each order's bound reaches _TAIL_MASS; the tightest order wins.
        reach = (log_mgf - log_tail) / orders
        bounds.append(float(np.min(reach)) if sign > 0 else float(np.max(reach)))
    high_loss, low_loss = bounds
    start = a.offset + b.offset
    size = a.probs.size + b.probs.size - 1
    high = size - 1 if not math.isfinite(high_loss) else min(size - 1, math.ceil(high_loss / a.interval) - start)
    low = 0 if not math.isfinite(low_loss) else max(0, math.floor(low_loss / a.interval) - start)
    return min(low, max(high, 0)), max(high, 0)


def _variance(pld: PrivacyLossDistribution) -> float:
    """Variance of the finite losses (as held: any positive number serves to scale the orders)."""
    total = float(np.sum(pld.probs))
    if total <= 0:
        return 0.0
    losses = pld.losses
    mean = float(np.dot(pld.probs, losses)) / total
    return max(0.0, float(np.dot(pld.probs, (losses - mean) ** 2)) / total)


def _log_mgf(pld: PrivacyLossDistribution, orders: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """An upper bound on log E[e^(lam L)] over the finite losses, for each order lam: the grid is cut
    into blocks of _MGF_BLOCK points, each block's mass placed at its largest loss for lam > 0 and
    its smallest for lam < 0 (e^(lam l) is largest there), so the bound costs 1/_MGF_BLOCK of the sum."""
    size = pld.probs.size
    blocks = -(-size // _MGF_BLOCK)
    padded = np.zeros(blocks * _MGF_BLOCK)
    padded[:size] = pld.probs
    masses = padded.reshape(blocks, _MGF_BLOCK).sum(axis=1) * (1.0 + _SUM_SLACK)
    first = (pld.offset + np.arange(blocks) * _MGF_BLOCK) * pld.interval
    last = (pld.offset + np.minimum(np.arange(blocks) * _MGF_BLOCK + _MGF_BLOCK - 1, size - 1)) * pld.interval
    with np.errstate(divide="ignore"):
        log_masses = np.log(masses)
    ends = np.where(orders[:, None] > 0, last[None, :], first[None, :])
    return special.logsumexp(log_masses[None, :] + orders[:, None] * ends, axis=1)


def _round_up(losses: npt.NDArray[np.float64], interval: float) -> npt.NDArray[np.int64]:
    """Grid indices ceil(l / interval), after a relative _LOSS_SLACK up for the loss's own rounding error."""
    padded = losses + _LOSS_SLACK * (1.0 + np.abs(losses))
    indices = np.ceil(padded / interval)
    if not np.all(np.abs(indices) < 2.0**62):
        raise ValueError("a loss is too large for this interval")
    return indices.astype(np.int64)


def _convolve(a: npt.NDArray[np.float64], b: npt.NDArray[np.float64]) -> tuple[npt.NDArray[np.float64], float]:
    """a * b, and a bound on the 1-norm of its rounding error (module docstring)."""
    if min(a.size, b.size) <= _DIRECT_CONVOLUTION:
        result = np.convolve(a, b)
        # Each entry is a sum of at most min(len) products: gamma_m |a| * |b| summed over entries.
        error = 2.0 * min(a.size, b.size) * _UNIT_ROUNDOFF * float(np.sum(a)) * float(np.sum(b))
        return np.maximum(result, 0.0), error
    result = signal.fftconvolve(a, b)
    size = result.size
    error = 10.0 * math.sqrt(size) * _UNIT_ROUNDOFF * math.log2(size) * float(np.linalg.norm(a) * np.linalg.norm(b))
    return np.maximum(result, 0.0), error


def _truncated(
    interval: float, offset: int, probs: npt.NDArray[np.float64], infinity: float
) -> PrivacyLossDistribution:
    """A PLD with at most _TAIL_MASS cut from each end: the bottom moved up, the top charged as infinite."""
    cumulative = np.cumsum(probs)
    first = int(np.searchsorted(cumulative, _TAIL_MASS, side="right"))
    reverse = np.cumsum(probs[::-1])
    top_cut = int(np.searchsorted(reverse, _TAIL_MASS, side="right"))
    last = probs.size - 1 - top_cut
    if first > last:  # everything within the tails: keep the top point, charge nothing away
        first = last = max(0, probs.size - 1 - top_cut)
        top_cut = probs.size - 1 - last
    kept = probs[first : last + 1].copy()
    kept[0] += float(cumulative[first - 1]) if first > 0 else 0.0
    cut = float(reverse[top_cut - 1]) if top_cut > 0 else 0.0
    return PrivacyLossDistribution(interval, offset + first, kept, min(1.0, infinity + cut))


def _positive(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not (value > 0 and math.isfinite(value)):
        raise ValueError(f"{name} must be a positive finite number, not {value!r}")
    return float(value)


def _shift(sensitivity: int) -> int:
    if isinstance(sensitivity, bool) or not isinstance(sensitivity, numbers.Integral) or sensitivity < 1:
        raise ValueError("sensitivity must be a positive integer (the shift of the discrete noise)")
    if sensitivity > 1_000_000:
        raise ValueError("sensitivity must be at most 1,000,000")
    return int(sensitivity)
