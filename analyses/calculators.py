"""Privacy calculators shared by `manage.py privacy` and /api/privacy/: validate, call privacy/, shape.

Each service takes its parameters as the interfaces receive them (strings from a query string or a
command line, or numbers from Python), validates all of them in one place, and raises
ValidationFailed with one list of messages per parameter. The numerics live in privacy/.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Final

import numpy as np

from pfs_base.errors import ValidationFailed
from privacy import pld
from privacy.amplification import MAX_COHORT, UnreachableEpsilon
from privacy.composition import (
    DEFAULT_ORDERS,
    ApproximateDP,
    RenyiDP,
    advanced_composition,
    gaussian_rdp,
    pure_dp_rdp,
    rdp_epsilon,
)
from privacy.discrete_gaussian import discrete_gaussian_sigma
from privacy.enforced_cohort import BOUNDS, CURVE_METHODS, RAPPOR_PER_COORDINATE, Bound, min_cohort_enforced
from privacy.gaussian import analytic_gaussian_sigma, classical_gaussian_sigma
from privacy.mechanisms import MECHANISMS
from privacy.rappor_rdp import symmetric_rappor_rdp
from privacy.shuffling import DEFAULT_METHOD, METHODS, Method, amplified_epsilon, min_cohort

Raw = str | float | int | bool | None

# The calculators accept epsilons in [1e-6, 100]. Below about 1e-9 the analytic Gaussian's delta,
# evaluated in double precision, cancels to noise when delta is tiny and sigma comes out too small;
# above a few hundred the shuffling bounds overflow. No cohort of up to 1e12 reports amplifies an
# epsilon0 above log(1e12) ~ 28, so the cap loses nothing.
EPSILON_MIN: Final = 1e-6
EPSILON_MAX: Final = 100.0
# 1e-4 * delta must stay a normal double in the shuffling bounds' tail allowance.
DELTA_MIN: Final = 1e-300
SENSITIVITY_MIN: Final = 1e-100
SENSITIVITY_MAX: Final = 1e100
# The curve of aggregate epsilon against n (Figure 1 of seed 000): its default range and density.
# Each numerical point costs about 10-50 ms (up to 0.5 s near n = 1e12 with a tiny epsilon0), so
# the number of points is capped to keep one request within a few seconds.
CURVE_N_MIN: Final = 100
CURVE_N_MAX: Final = 10**8
CURVE_POINTS: Final = 25
CURVE_POINTS_MAX: Final = 50

_TRUE: Final = frozenset({"true", "1", "yes", "on"})
_FALSE: Final = frozenset({"false", "0", "no", "off", ""})


def privacy_amplify(*, epsilon0: Raw, n: Raw, delta: Raw, method: Raw = None) -> dict[str, Any]:
    """Aggregate epsilon of n epsilon0-DP reports at delta (privacy.shuffling.amplified_epsilon)."""
    params = _Params()
    epsilon0_ = params.epsilon("epsilon0", epsilon0)
    n_ = params.cohort("n", n)
    delta_ = params.delta("delta", delta)
    method_ = params.method("method", method)
    params.raise_if_invalid()
    epsilon = amplified_epsilon(epsilon0_, n_, delta_, method=method_)
    if math.isinf(epsilon):  # only the closed form returns infinity: outside its validity condition
        raise ValidationFailed(
            {
                "n": [
                    "The closed form (seed 000 Theorem 3.1) says nothing here: it needs "
                    "epsilon0 <= log(n / (8 log(2 / delta)) - 1). Use a larger n or a numerical method."
                ]
            }
        )
    return {"epsilon0": epsilon0_, "n": n_, "delta": delta_, "method": method_, "epsilon": epsilon}


def privacy_min_cohort(
    *, epsilon0: Raw, epsilon: Raw, delta: Raw, method: Raw = None, mechanism: Raw = None
) -> dict[str, Any]:
    """Smallest cohort whose aggregate epsilon is at most epsilon (privacy.shuffling.min_cohort).

    With ``mechanism`` (a recipe mechanism), what devices enforce for it (check 3: the tightest
    bound proven for that randomizer, privacy.enforced_cohort), ``method`` saying which bound."""
    params = _Params()
    epsilon0_ = params.epsilon("epsilon0", epsilon0)
    epsilon_ = params.epsilon("epsilon", epsilon)
    delta_ = params.delta("delta", delta)
    if mechanism not in (None, ""):
        if mechanism not in MECHANISMS:
            params.add("mechanism", f"Must be one of {', '.join(sorted(MECHANISMS))}.")
        if method not in (None, ""):
            params.add("method", "Give a method or a mechanism (whose bound devices enforce), not both.")
        params.raise_if_invalid()
        try:
            enforced = min_cohort_enforced(mechanism=mechanism, epsilon0=epsilon0_, epsilon=epsilon_, delta=delta_)
        except ValueError as error:
            raise ValidationFailed({"epsilon": [f"{str(error).capitalize()}."]}) from error
        return {
            "epsilon0": epsilon0_,
            "epsilon": epsilon_,
            "delta": delta_,
            "mechanism": mechanism,
            "method": enforced.method,
            "min_cohort": enforced.min_cohort,
        }
    method_ = params.method("method", method)
    params.raise_if_invalid()
    try:
        cohort = min_cohort(epsilon0_, epsilon_, delta_, method=method_)
    except UnreachableEpsilon as error:
        message = f"No cohort of up to {MAX_COHORT:.0e} reports reaches this epsilon from this epsilon0 and delta ({method_})."
        raise ValidationFailed({"epsilon": [message]}) from error
    return {"epsilon0": epsilon0_, "epsilon": epsilon_, "delta": delta_, "method": method_, "min_cohort": cohort}


def privacy_curve(
    *, epsilon0: Raw, delta: Raw, method: Raw = None, points: Raw = None, n_min: Raw = None, n_max: Raw = None
) -> dict[str, Any]:
    """Aggregate epsilon against cohort size n, as Figure 1 of seed 000 plots it.

    Up to ``points`` integer cohorts spaced evenly in log n from n_min to n_max (both included),
    each with privacy.shuffling.amplified_epsilon(epsilon0, n, delta, method). Where the closed
    form says nothing (below its validity condition) the point's epsilon is None, not infinity.
    """
    params = _Params()
    epsilon0_ = params.epsilon("epsilon0", epsilon0)
    delta_ = params.delta("delta", delta)
    method_ = params.method("method", method)
    points_ = params.whole("points", points, default=CURVE_POINTS, low=2, high=CURVE_POINTS_MAX)
    low = params.cohort("n_min", CURVE_N_MIN if n_min is None or n_min == "" else n_min)
    high = params.cohort("n_max", CURVE_N_MAX if n_max is None or n_max == "" else n_max)
    if low and high and low >= high:
        params.add("n_max", "Must be greater than n_min.")
    params.raise_if_invalid()
    cohorts = np.unique(np.rint(np.geomspace(low, high, points_)).astype(np.int64))
    curve = []
    for n in cohorts.tolist():
        epsilon = _amplified_epsilon(epsilon0_, n, delta_, method_)
        curve.append({"n": n, "epsilon": None if math.isinf(epsilon) else epsilon})
    return {"epsilon0": epsilon0_, "delta": delta_, "method": method_, "n_min": low, "n_max": high, "points": curve}


@functools.lru_cache(maxsize=4096)
def _amplified_epsilon(epsilon0: float, n: int, delta: float, method: Method) -> float:
    """Memoized: the numerical bound costs tens of milliseconds a point, and every analysis page
    draws the same few curves (the editor's defaults) again and again."""
    return amplified_epsilon(epsilon0, n, delta, method=method)


def privacy_gaussian(
    *, epsilon: Raw, delta: Raw, sensitivity: Raw, classical: Raw = False, discrete: Raw = False
) -> dict[str, Any]:
    """Gaussian noise scale for (epsilon, delta)-DP at an L2 sensitivity: analytic, or classical on request.

    ``discrete``: the discrete Gaussian's own exact calibration (privacy.discrete_gaussian), what the
    aggregators add, for sensitivity 1 (one count changes by 1) or sqrt(2) (one report moves
    between two buckets of a histogram)."""
    params = _Params()
    epsilon_ = params.epsilon("epsilon", epsilon)
    delta_ = params.delta("delta", delta)
    sensitivity_ = params.number("sensitivity", sensitivity, low=SENSITIVITY_MIN, high=SENSITIVITY_MAX)
    classical_ = params.flag("classical", classical)
    discrete_ = params.flag("discrete", discrete)
    if classical_ and epsilon_ >= 1:
        params.add("epsilon", "Must be below 1 for the classical bound (Dwork and Roth, Theorem A.1); omit classical.")
    if classical_ and discrete_:
        params.add("discrete", "The discrete calibration is exact: omit classical.")
    coordinates = _DISCRETE_COORDINATES.get(sensitivity_)
    if discrete_ and coordinates is None and not math.isnan(sensitivity_):
        params.add("sensitivity", "With discrete, must be 1 (one count) or sqrt(2) = 1.4142135623730951 (a histogram).")
    params.raise_if_invalid()
    if discrete_:
        try:
            sigma = discrete_gaussian_sigma(epsilon_, delta_, sensitivity=1, coordinates=coordinates)
        except ValueError as error:
            raise ValidationFailed({"epsilon": [f"{str(error).capitalize()}."]}) from error
    else:
        calibrate = classical_gaussian_sigma if classical_ else analytic_gaussian_sigma
        sigma = calibrate(epsilon_, delta_, sensitivity_)
    return {
        "epsilon": epsilon_,
        "delta": delta_,
        "sensitivity": sensitivity_,
        "classical": classical_,
        "discrete": discrete_,
        "sigma": sigma,
    }


# The composition calculator's caps keep one request within about two seconds on one core
# (bench/results/pld.md): rounds composed by repeated squaring (2 log2(rounds) convolutions), the
# clone pair's cost grows with sqrt(n), and below 1e-12 the PLD's own charges (FFT rounding, cut
# tails: up to about 1e-13 in all) would decide the answer.
COMPOSE_ROUNDS_MAX: Final = 10_000
COMPOSE_N_MAX: Final = 10**8
COMPOSE_DELTA_MIN: Final = 1e-12
COMPOSE_SIGMA_MIN: Final = 0.5
COMPOSE_SIGMA_MAX: Final = 1e3
COMPOSE_SCALE_MIN: Final = 0.01
COMPOSE_SCALE_MAX: Final = 1e6
COMPOSE_SENSITIVITY_MAX: Final = 100
# Histogram replacement: one report moves from one bucket to another, two coordinates change by 1
# (privacy/aggregator_noise.py), each with its own independent noise.
COMPOSE_SENSITIVITY_DEFAULT: Final = 2
# The PLD's grid: fine enough that rounding every loss up costs at most this fraction of the
# estimate (steps x interval <= fraction x estimate), coarse enough that the composed grid stays near
# _PLD_POINTS points.
_PLD_FRACTION: Final = 0.005
_PLD_POINTS: Final = 1 << 17
ACCOUNTANTS: Final = ("pld", "renyi", "advanced", "basic")
_RELEASE_PARAMETERS: Final = ("mechanism", "epsilon0", "n", "gaussian_sigma", "laplace_scale")


def privacy_compose(
    *,
    rounds: Raw,
    delta: Raw,
    mechanism: Raw = None,
    epsilon0: Raw = None,
    n: Raw = None,
    gaussian_sigma: Raw = None,
    laplace_scale: Raw = None,
    sensitivity: Raw = None,
) -> dict[str, Any]:
    """Epsilon at ``delta`` of ``rounds`` adaptive rounds of one release, by every accountant.

    The release is either a recipe's round (``mechanism``, its replacement-model ``epsilon0``, ``n``
    reports summed: the clone pair of the bound devices enforce for the mechanism,
    privacy.enforced_cohort.BOUNDS) or aggregator noise on a histogram (``gaussian_sigma``: N_Z(0, sigma^2),
    or ``laplace_scale``: the discrete Laplace of scale b, on each coordinate), where ``sensitivity`` is
    the number of coordinates one report's change moves by 1 (default 2, a report moving between
    two buckets: L1 sensitivity 2, L2 sqrt(2); 1 for a count). Accountants, each an upper bound:
    "pld" (privacy.pld), "renyi" (the release's Renyi curve over privacy.composition.DEFAULT_ORDERS),
    "advanced" (DRV10 with per-round delta delta / (2 rounds) and delta' = delta / 2), "basic"
    (rounds x the per-round epsilon at delta / rounds). ``epsilon`` is the smallest.
    """
    params = _Params()
    rounds_ = params.whole("rounds", rounds, default=0, low=1, high=COMPOSE_ROUNDS_MAX)
    if rounds is None or rounds == "":
        params.add("rounds", "This parameter is required.")
    delta_ = params.delta("delta", delta)
    if delta_ < COMPOSE_DELTA_MIN and "delta" not in params.errors:
        params.add("delta", f"Must be at least {COMPOSE_DELTA_MIN:g} for composition.")
    given = [
        name
        for name, raw in zip(_RELEASE_PARAMETERS, (mechanism, epsilon0, n, gaussian_sigma, laplace_scale), strict=True)
        if raw not in (None, "")
    ]
    recipe = any(name in given for name in ("mechanism", "epsilon0", "n"))
    kinds = int(recipe) + int("gaussian_sigma" in given) + int("laplace_scale" in given)
    if kinds != 1:
        message = (
            "Give one release: a recipe's round (mechanism, epsilon0, n), gaussian_sigma, or laplace_scale."
            if kinds == 0
            else "Give only one release: a recipe's round (mechanism, epsilon0, n), gaussian_sigma, or laplace_scale."
        )
        for name in given or ["mechanism"]:
            params.add(name, message)
        params.raise_if_invalid()
    answer: dict[str, Any] = {}
    if recipe:
        if mechanism not in MECHANISMS:
            params.add("mechanism", f"Must be one of {', '.join(sorted(MECHANISMS))}.")
        epsilon0_ = params.epsilon("epsilon0", epsilon0)
        n_ = params.cohort("n", n)
        if n_ > COMPOSE_N_MAX:
            params.add("n", f"Must be at most {COMPOSE_N_MAX:.0e} for composition.")
        if sensitivity not in (None, ""):
            params.add("sensitivity", "Only for aggregator noise: a recipe's round has its own neighbours.")
        params.raise_if_invalid()
        bound = BOUNDS[str(mechanism)][0]
        answer.update(release="recipe", mechanism=mechanism, epsilon0=epsilon0_, n=n_, method=bound)
        accounts, steps, build = _recipe_accounts(str(mechanism), epsilon0_, n_, bound, rounds_, delta_)
    else:
        coordinates = params.whole(
            "sensitivity", sensitivity, default=COMPOSE_SENSITIVITY_DEFAULT, low=1, high=COMPOSE_SENSITIVITY_MAX
        )
        if "gaussian_sigma" in given:
            sigma = params.number("gaussian_sigma", gaussian_sigma, low=COMPOSE_SIGMA_MIN, high=COMPOSE_SIGMA_MAX)
            params.raise_if_invalid()
            answer.update(release="gaussian", gaussian_sigma=sigma, sensitivity=coordinates)
            accounts, steps, build = _gaussian_accounts(sigma, coordinates, rounds_, delta_)
        else:
            scale = params.number("laplace_scale", laplace_scale, low=COMPOSE_SCALE_MIN, high=COMPOSE_SCALE_MAX)
            if scale and coordinates and coordinates / scale > EPSILON_MAX and "sensitivity" not in params.errors:
                params.add(
                    "laplace_scale",
                    f"Must be at least sensitivity / {EPSILON_MAX:g} (epsilon per round at most {EPSILON_MAX:g}).",
                )
            params.raise_if_invalid()
            answer.update(release="laplace", laplace_scale=scale, sensitivity=coordinates)
            accounts, steps, build = _laplace_accounts(scale, coordinates, rounds_, delta_)
    estimate = min(value for value in accounts.values() if value is not None) or 1.0  # 0: any grid serves
    interval = max(_PLD_FRACTION * estimate / (steps * rounds_), estimate / _PLD_POINTS, 1e-12)
    rounding: float | None = None
    try:
        one_round = build(interval)
        rounding = steps * rounds_ * interval
        # The composed grid spans about 20 standard deviations of the sum of the rounds' losses: when
        # that is more than _PLD_POINTS steps, one round's PLD is rounded up again onto a coarser grid
        # (still an upper bound, each round at most one coarse step above).
        probs = one_round.probs / max(float(np.sum(one_round.probs)), 1e-300)
        spread = 20.0 * math.sqrt(
            rounds_ * float(np.dot(probs, (one_round.losses - np.dot(probs, one_round.losses)) ** 2))
        )
        if spread / interval > _PLD_POINTS:
            coarse = spread / _PLD_POINTS
            one_round = pld.from_losses(
                one_round.losses, one_round.probs, infinity_mass=one_round.infinity_mass, interval=coarse
            )
            rounding += rounds_ * coarse
            interval = coarse
        accounts["pld"] = one_round.self_compose(rounds_).epsilon(delta_)
    except ValueError:  # a grid the PLD refuses to build (more than pld.MAX_POINTS points): no PLD figure
        accounts["pld"] = None
        rounding = None
    values = {name: accounts.get(name) for name in ACCOUNTANTS}
    best = min((name for name in ACCOUNTANTS if values[name] is not None), key=lambda name: values[name])
    return {
        "epsilon": values[best],
        "accountant": best,
        "accountants": values,
        "rounds": rounds_,
        "delta": delta_,
        **answer,
        "pld_interval": None if rounding is None else interval,
        # How far above the exact composition the PLD may be: every loss of every step rounded up.
        "pld_rounding": rounding,
    }


Accounts = dict[str, float | None]


def _recipe_accounts(
    mechanism: str, epsilon0: float, n: int, bound: Bound, rounds: int, delta: float
) -> tuple[Accounts, int, Any]:
    # Per-round epsilons by privacy.shuffling's bound for it (symmetric RAPPOR: FMT 2022 at 2 eps0,
    # above the per-coordinate bound devices enforce); the PLD from the pair devices compose.
    method = CURVE_METHODS[bound]
    basic = rounds * amplified_epsilon(epsilon0, n, delta / rounds, method=method)
    per_round = amplified_epsilon(epsilon0, n, delta / (2 * rounds), method=method)
    advanced = advanced_composition(ApproximateDP(per_round, delta / (2 * rounds)), rounds, delta / 2).epsilon
    curve = pure_dp_rdp(epsilon0, DEFAULT_ORDERS).rhos
    if mechanism == "symmetric_rappor":
        # Its shuffled Renyi curve (seed 000 C.1.3, as devices charge it) is in the deletion model.
        curve = tuple(
            min(rho, symmetric_rappor_rdp(epsilon0 / 2, n, alpha))
            for rho, alpha in zip(curve, DEFAULT_ORDERS, strict=True)
        )
    renyi = rdp_epsilon(RenyiDP(DEFAULT_ORDERS, tuple(rounds * rho for rho in curve)), delta)
    accounts: Accounts = {"basic": _up(basic), "advanced": advanced, "renyi": renyi}
    if bound == RAPPOR_PER_COORDINATE:
        # FMT 2022's pair at the deletion epsilon0 on each of the two changed coordinates, as devices
        # compose it (pfs_device.budget.query_pld_key; privacy/rappor_shuffling.py for the proof).
        return (
            accounts,
            2,
            lambda interval: pld.shuffled(epsilon0 / 2, n, "stronger-2022", interval=interval).self_compose(2),
        )
    return accounts, 1, lambda interval: pld.shuffled(epsilon0, n, method, interval=interval)


def _gaussian_accounts(sigma: float, coordinates: int, rounds: int, delta: float) -> tuple[Accounts, int, Any]:
    def build(interval: float) -> pld.PrivacyLossDistribution:
        return pld.discrete_gaussian(sigma, interval=interval).self_compose(coordinates)

    curve = gaussian_rdp(sigma, math.sqrt(coordinates), DEFAULT_ORDERS)

    # One round's own PLD on a fine grid (a thousandth of its epsilon per coordinate), for the per-round
    # epsilons basic and advanced composition take; its Renyi conversion where that is smaller.
    interval = max(pld.DEFAULT_INTERVAL / 10, 1e-3 * rdp_epsilon(curve, delta / (2 * rounds)) / coordinates)
    try:
        one_round: pld.PrivacyLossDistribution | None = build(interval)
    except ValueError:
        one_round = None

    def per_round(round_delta: float) -> float:
        renyi_round = rdp_epsilon(curve, round_delta)
        return renyi_round if one_round is None else min(renyi_round, one_round.epsilon(round_delta))

    basic = rounds * per_round(delta / rounds)
    advanced = advanced_composition(
        ApproximateDP(per_round(delta / (2 * rounds)), delta / (2 * rounds)), rounds, delta / 2
    ).epsilon
    renyi = rdp_epsilon(RenyiDP(DEFAULT_ORDERS, tuple(rounds * rho for rho in curve.rhos)), delta)
    return {"basic": _up(basic), "advanced": advanced, "renyi": renyi}, coordinates, build


def _laplace_accounts(scale: float, coordinates: int, rounds: int, delta: float) -> tuple[Accounts, int, Any]:
    per_round = _up(coordinates / scale)  # pure: each coordinate's loss is at most 1 / b
    advanced = advanced_composition(ApproximateDP(per_round), rounds, delta).epsilon
    renyi = rdp_epsilon(RenyiDP(DEFAULT_ORDERS, tuple(rounds * rho for rho in pure_dp_rdp(per_round).rhos)), delta)

    def build(interval: float) -> pld.PrivacyLossDistribution:
        return pld.discrete_laplace(scale, interval=interval).self_compose(coordinates)

    return {"basic": _up(rounds * per_round), "advanced": advanced, "renyi": renyi}, coordinates, build


def _up(value: float) -> float:
    return math.nextafter(value, math.inf) if value > 0 else value


# The discrete calibration's neighbours: L2 sensitivity -> how many coordinates move by 1.
_DISCRETE_COORDINATES: Final = {1.0: 1, math.sqrt(2.0): 2}


class _Params:
    """Parses parameters one by one and collects every error before raising them together.

    A parameter that fails gets a placeholder value; raise_if_invalid runs before any is used.
    """

    def __init__(self) -> None:
        self.errors: dict[str, list[str]] = {}

    def add(self, name: str, message: str) -> None:
        self.errors.setdefault(name, []).append(message)

    def raise_if_invalid(self) -> None:
        if self.errors:
            raise ValidationFailed(self.errors)

    def number(self, name: str, raw: Raw, *, low: float, high: float) -> float:
        value = self._float(name, raw)
        if math.isnan(value):
            return value
        if value <= 0:
            self.add(name, "Must be greater than 0.")
        elif value < low:
            self.add(name, f"Must be at least {low:g}.")
        elif value > high:
            self.add(name, f"Must be at most {high:g}.")
        return value

    def epsilon(self, name: str, raw: Raw) -> float:
        return self.number(name, raw, low=EPSILON_MIN, high=EPSILON_MAX)

    def delta(self, name: str, raw: Raw) -> float:
        value = self._float(name, raw)
        if math.isnan(value):
            return value
        if not 0 < value < 1:
            self.add(name, "Must lie strictly between 0 and 1.")
        elif value < DELTA_MIN:
            self.add(name, f"Must be at least {DELTA_MIN:g}.")
        return value

    def cohort(self, name: str, raw: Raw) -> int:
        value = self._float(name, raw)
        if math.isnan(value):
            return 0
        if not value.is_integer():
            self.add(name, "A whole number is required.")
        elif value < 1:
            self.add(name, "Must be at least 1.")
        elif value > MAX_COHORT:
            self.add(name, f"Must be at most {MAX_COHORT:.0e}.")
        else:
            return int(value)
        return 0

    def whole(self, name: str, raw: Raw, *, default: int, low: int, high: int) -> int:
        """An optional whole number in [low, high]."""
        if raw is None or raw == "":
            return default
        value = self._float(name, raw)
        if math.isnan(value):
            return default
        if not value.is_integer():
            self.add(name, "A whole number is required.")
        elif not low <= value <= high:
            self.add(name, f"Must be between {low} and {high}.")
        else:
            return int(value)
        return default

    def method(self, name: str, raw: Raw) -> Method:
        if raw is None or raw == "":
            return DEFAULT_METHOD
        for method in METHODS:
            if raw == method:
                return method
        self.add(name, f"Must be one of {', '.join(METHODS)}.")
        return DEFAULT_METHOD

    def flag(self, name: str, raw: Raw) -> bool:
        if raw is None or isinstance(raw, bool):
            return bool(raw)
        text = str(raw).strip().lower()
        if text not in _TRUE | _FALSE:
            self.add(name, "Must be true or false.")
        return text in _TRUE

    def _float(self, name: str, raw: Raw) -> float:
        """The number in ``raw``, or NaN after recording why there is none."""
        if raw is None or raw == "":
            self.add(name, "This parameter is required.")
            return math.nan
        if isinstance(raw, bool):
            self.add(name, "A number is required.")
            return math.nan
        try:
            value = float(raw)
        except (TypeError, ValueError, OverflowError):
            self.add(name, "A number is required.")
            return math.nan
        if not math.isfinite(value):
            self.add(name, "A finite number is required.")
            return math.nan
        return value
