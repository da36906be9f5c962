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
from privacy.amplification import MAX_COHORT, UnreachableEpsilon
from privacy.discrete_gaussian import discrete_gaussian_sigma
from privacy.enforced_cohort import min_cohort_enforced
from privacy.gaussian import analytic_gaussian_sigma, classical_gaussian_sigma
from privacy.mechanisms import MECHANISMS
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
