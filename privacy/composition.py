"""Composition of privacy guarantees, Renyi DP accounting, and amplification by Poisson sampling.

Approximate-DP guarantees are ApproximateDP events; Renyi guarantees are RenyiDP curves over a
common tuple of orders. Every function returns a guarantee at least as large as the exact one
(floating-point results are rounded up by one unit in the last place).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from privacy.amplification import check_delta

# Renyi orders tried by default: fine near 1 where small-epsilon conversions optimise, coarse above.
DEFAULT_ORDERS: Final[tuple[float, ...]] = (
    1.25, 1.5, 1.75, 2.0, 2.25, 2.5, 2.75, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0,
    12.0, 14.0, 16.0, 20.0, 24.0, 28.0, 32.0, 40.0, 48.0, 56.0, 64.0, 80.0, 96.0, 112.0, 128.0,
    160.0, 192.0, 224.0, 256.0, 384.0, 512.0,
)  # fmt: skip


# e^epsilon overflows a double above 709.78: the functions that exponentiate an epsilon refuse
# one above this rather than raise OverflowError or return infinity.
EPSILON_MAX: Final = 700.0


def _check_delta(delta: float, name: str) -> None:
    """privacy.amplification.check_delta (a subnormal delta is refused too), naming the parameter."""
    try:
        check_delta(delta)
    except ValueError as error:
        raise ValueError(str(error).replace("delta", name, 1)) from None


def _check_epsilon(epsilon: float, name: str = "epsilon") -> None:
    if epsilon > EPSILON_MAX:
        raise ValueError(f"{name} must be at most {EPSILON_MAX:g}: e^{name} overflows a double above 709.78")


@dataclass(frozen=True)
class ApproximateDP:
    """An (epsilon, delta)-DP guarantee."""

    epsilon: float
    delta: float = 0.0

    def __post_init__(self) -> None:
        if not (self.epsilon >= 0 and math.isfinite(self.epsilon)):
            raise ValueError("epsilon must be a non-negative finite number")
        if not (0.0 <= self.delta <= 1.0):
            raise ValueError("delta must lie in [0, 1]")


@dataclass(frozen=True)
class RenyiDP:
    """An (alpha, rho(alpha))-RDP guarantee for every alpha in ``orders`` (Mironov 2017, Def. 4)."""

    orders: tuple[float, ...]
    rhos: tuple[float, ...]

    def __post_init__(self) -> None:
        if len(self.orders) != len(self.rhos) or not self.orders:
            raise ValueError("orders and rhos must be non-empty and of the same length")
        if any(not (alpha > 1 and math.isfinite(alpha)) for alpha in self.orders):
            raise ValueError("every order alpha must be a finite number greater than 1")
        if any(not (rho >= 0) for rho in self.rhos):
            raise ValueError("every rho must be non-negative")


def basic_composition(events: Sequence[ApproximateDP]) -> ApproximateDP:
    """Basic composition: (eps_i, delta_i)-DP steps compose to (sum eps_i, sum delta_i)-DP.

    Dwork and Roth, "The Algorithmic Foundations of Differential Privacy" (2014), Theorem 3.16.
    """
    if not events:
        raise ValueError("events must not be empty")
    epsilon = _up(math.fsum(event.epsilon for event in events))
    delta = min(1.0, _up(math.fsum(event.delta for event in events)))
    return ApproximateDP(epsilon, delta)


def advanced_composition(event: ApproximateDP, steps: int, delta_prime: float) -> ApproximateDP:
    """Advanced composition of ``steps`` adaptive (eps, delta)-DP steps: seed 003 Theorem 3 [DRV10].

        eps' = eps sqrt(2 T ln(1/delta')) + T eps (e^eps - 1),   delta_total = T delta + delta'.

    (Dwork, Rothblum, Vadhan 2010; Dwork and Roth 2014, Theorem 3.20 and Corollary 3.21.)
    """
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError("steps must be a positive integer")
    _check_delta(delta_prime, "delta_prime")
    _check_epsilon(event.epsilon)
    epsilon = event.epsilon
    total = epsilon * math.sqrt(2.0 * steps * math.log(1.0 / delta_prime)) + steps * epsilon * math.expm1(epsilon)
    return ApproximateDP(_up(total), min(1.0, _up(steps * event.delta + delta_prime)))


def advanced_composition_epsilon(sum_of_squares: float, drift: float, delta_prime: float) -> float:
    """Advanced composition of heterogeneous pure eps_i-DP steps, from running sums [DRV10]:

        eps' = sqrt(2 ln(1/delta') * sum eps_i^2) + sum eps_i (e^eps_i - 1),  with delta' added to delta.

    The privacy loss of step i has mean at most eps_i (e^eps_i - 1) and magnitude at most eps_i
    (Dwork and Roth 2014, Lemma 3.18), so Azuma's inequality bounds the sum's deviation by the square
    root term. With T equal steps this is ``advanced_composition``. ``drift`` is sum eps_i (e^eps_i - 1).
    """
    _check_delta(delta_prime, "delta_prime")
    if not (sum_of_squares >= 0 and drift >= 0 and math.isfinite(sum_of_squares) and math.isfinite(drift)):
        raise ValueError("sum_of_squares and drift must be non-negative finite numbers")
    return _up(math.sqrt(2.0 * math.log(1.0 / delta_prime) * sum_of_squares) + drift)


def rdp_compose(curves: Sequence[RenyiDP]) -> RenyiDP:
    """RDP composition: rho(alpha) adds up over adaptive steps (seed 003 Theorem 2; Mironov 2017 Prop. 1)."""
    if not curves:
        raise ValueError("curves must not be empty")
    orders = curves[0].orders
    if any(curve.orders != orders for curve in curves):
        raise ValueError("curves must share the same orders")
    rhos = tuple(_up(math.fsum(curve.rhos[i] for curve in curves)) for i in range(len(orders)))
    return RenyiDP(orders, rhos)


def rdp_to_dp(rho: float, alpha: float, delta: float) -> float:
    """Epsilon of an (alpha, rho)-RDP guarantee at ``delta``: seed 003 Section 2 [CKS20, Prop. 12].

        eps = rho + (ln(1/delta) + (alpha - 1) ln(1 - 1/alpha) - ln(alpha)) / (alpha - 1),

    clamped at 0. (Canonne, Kamath, Steinke 2020, "The discrete Gaussian for differential
    privacy", Proposition 12; tighter than Mironov's rho + ln(1/delta) / (alpha - 1).)
    """
    if not (alpha > 1 and math.isfinite(alpha)):
        raise ValueError("alpha must be a finite number greater than 1")
    if not (rho >= 0):
        raise ValueError("rho must be non-negative")
    _check_delta(delta, "delta")
    if not math.isfinite(rho):
        raise ValueError("rho must be finite")
    slack = (-math.log(delta) + (alpha - 1.0) * math.log1p(-1.0 / alpha) - math.log(alpha)) / (alpha - 1.0)
    return max(0.0, _up(rho + slack))


def rdp_epsilon(curve: RenyiDP, delta: float) -> float:
    """Smallest rdp_to_dp(rho(alpha), alpha, delta) over the curve's orders (each one is a valid bound)."""
    return min(rdp_to_dp(rho, alpha, delta) for alpha, rho in zip(curve.orders, curve.rhos, strict=True))


def gaussian_rdp(sigma: float, sensitivity: float = 1.0, orders: Sequence[float] = DEFAULT_ORDERS) -> RenyiDP:
    """Gaussian mechanism N(0, sigma^2) on an L2-sensitivity-Delta query: rho(alpha) = alpha Delta^2 / (2 sigma^2).

    Seed 003 Example 1; Mironov 2017, Proposition 7.
    """
    if not (sigma > 0 and math.isfinite(sigma)):
        raise ValueError("sigma must be a positive finite number")
    if not (sensitivity > 0 and math.isfinite(sensitivity)):
        raise ValueError("sensitivity must be a positive finite number")
    try:
        scale = sensitivity**2 / (2.0 * sigma**2)
    except (OverflowError, ZeroDivisionError):
        scale = math.inf
    if not math.isfinite(scale * max(orders)):
        raise ValueError("sensitivity / sigma is too large: the Renyi curve overflows a double")
    return RenyiDP(tuple(orders), tuple(_up(alpha * scale) for alpha in orders))


def pure_dp_rdp(epsilon: float, orders: Sequence[float] = DEFAULT_ORDERS) -> RenyiDP:
    """An eps-DP step as RDP: rho(alpha) = min(eps, alpha eps^2 / 2).

    Seed 003 Section 2 (eps-DP implies (alpha, eps^2 alpha / 2)-RDP, via Bun and Steinke 2016
    Prop. 3.3) and Mironov 2017 Prop. 3 (eps-DP implies (alpha, eps)-RDP).
    """
    if not (epsilon >= 0 and math.isfinite(epsilon)):
        raise ValueError("epsilon must be a non-negative finite number")
    _check_epsilon(epsilon)
    return RenyiDP(tuple(orders), tuple(min(epsilon, _up(0.5 * epsilon**2 * alpha)) for alpha in orders))


def poisson_sampling(event: ApproximateDP, sampling_rate: float) -> ApproximateDP:
    """Amplification by Poisson sampling at rate gamma: seed 003 Theorem 4 [Kasiviswanathan et al. 2008].

    eps' = ln(1 + gamma (e^eps - 1)),   delta' = gamma delta.
    """
    if not (0.0 <= sampling_rate <= 1.0):
        raise ValueError("sampling_rate must lie in [0, 1]")
    _check_epsilon(event.epsilon)
    epsilon = math.log1p(sampling_rate * math.expm1(event.epsilon))
    return ApproximateDP(_up(epsilon) if epsilon > 0 else 0.0, _up(sampling_rate * event.delta))


def _up(value: float) -> float:
    """One unit in the last place up: a bound must never come out below the exact value."""
    return math.nextafter(value, math.inf) if value != 0 else 0.0
