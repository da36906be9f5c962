"""The device's budget accountant: checks 1-3 of seed 000 Section 4.3, vectorised over a shard.

Each device holds, per analysis, what it has spent on the analysis (check 1) and on every data
field (check 2). A device answers only if every check passes, and then charges exactly what it
answered with; a refusal spends nothing.

The composition rule is pluggable (the policy's ``budget.accountant``):
- "basic" (the paper's checks): epsilon_used + epsilon <= epsilon_allowed, reports_used + 1 <=
  reports_allowed, each query's delta <= the analysis delta. Epsilons are integer nano-epsilons
  (round to nearest: decimal inputs such as 0.3 map exactly), so sums never drift.
- "advanced": a query also fits when the advanced composition bound of every query so far plus
  this one is within the allowance (privacy.composition.advanced_composition_epsilon, with
  delta' = the analysis delta). Both bounds hold at once, so the device may use the smaller.
  The guarantee is then (epsilon_allowed, sum of the queries' deltas + delta').
- "renyi": a query also fits when the Renyi DP composition of every query's RDP curve so far plus
  this one, converted at delta' = the analysis delta, is within the allowance (RenyiComposition).
  Same guarantee form as "advanced".
- "tightest" (the default of a new analysis): a query fits when any of the three fits, or the
  privacy-loss-distribution (PLD) composition of every query's dominating pair so far plus this
  one, at delta' = the analysis delta, is within the allowance (the PLD account below). The ledger
  keeps the accounts of every query answered, each a sound bound on the whole history, so the
  device may use whichever is smallest at each query; the guarantee is (epsilon_allowed, sum of the
  queries' deltas + delta'). The Renyi account opens only with the first query that earns Renyi
  credit (TightestComposition).

``Accountant.check`` only reads; ``Accountant.charge`` is the only place that mutates a ledger.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from enum import IntEnum

import numpy as np
import numpy.typing as npt

from pfs_device.columns import Columns
from privacy.aggregator_noise import HISTOGRAM_L2_SENSITIVITY, AggregatorLaplace
from privacy.aggregator_noise import aggregator_noise as aggregator_noise_of
from privacy.composition import gaussian_rdp, pure_dp_rdp, rdp_to_dp
from privacy.enforced_cohort import RAPPOR_PER_COORDINATE, bound_for, min_cohort_enforced
from privacy.heavy_hitters import level_sigma
from privacy.pld import PrivacyLossDistribution, composed_epsilon, discrete_gaussian, discrete_laplace, shuffled
from privacy.rappor_rdp import symmetric_rappor_rdp

NANO = 1_000_000_000
# Deltas in integer atto-units (1e-18), rounded to nearest as epsilons are to nano-units, so that the
# total-delta cap (budget.deltaTotal) compares exact integer sums: 5 x 1e-6 fits a cap of 5e-6. A
# total of 1 or more says nothing, so sums saturate there.
ATTO = 10**18
# How much a stated guarantee is rounded up (Accountant.guarantee): far above a float sum's error,
# far below any digit shown.
STATEMENT_ROUNDING = 1e-12


def to_units(epsilon: float) -> int:
    return int(round(epsilon * NANO))


def to_delta_units(delta: float) -> int:
    return min(int(round(delta * ATTO)), ATTO)


class Decision(IntEnum):
    """Why a device did or did not answer, in the order the device decides."""

    ANSWERED = 0
    NOT_SAMPLED = 1
    QUERY_CLASS = 2
    ANALYSIS_BUDGET = 3  # check 1
    FIELD_BUDGET = 4  # check 2
    MIN_COHORT = 5  # check 3
    POLICY_SNAPSHOT = 6  # the task names a snapshot other than the one the device holds

    @property
    def label(self) -> str:
        return self.name.lower()


@dataclass(frozen=True)
class BudgetRequest:
    epsilon0: float  # in the replacement model (privacy.mechanisms.replacement_epsilon0)
    epsilon: float
    delta: float
    fields: tuple[str, ...]
    min_cohort: int
    # No local randomizer (epsilon0 is infinite): the aggregators add the noise. A field allows
    # it only when its policy says so; check 3 then has no amplification to verify.
    aggregator_noise: bool = False
    # The randomizer and its nominal epsilon0, for the Renyi accountant's curve.
    mechanism: str = ""
    mechanism_epsilon0: float | None = None
    # How many values the randomizer's input takes (the encoding's buckets), where the bound check 3
    # may use depends on it (Hadamard response: FMT 2022 on at most 3 values). None: unknown.
    domain_size: int | None = None
    # A Poplar1 walk (aggregator noise): its levels, each aggregator adding N_Z(0, sigma^2) to every
    # count of each, sigma = privacy.heavy_hitters.level_sigma(epsilon, delta, levels), so that they
    # compose within (epsilon, delta). 0: one release.
    walk_levels: int = 0


def min_cohort_needed(request: BudgetRequest) -> int:
    """Check 3's cohort: the tightest amplification bound proven for the request's randomizer
    (privacy.enforced_cohort: FMT 2022 where its corrected theorem covers it, else FMT 2020),
    rounded up, from the replacement-model epsilon0 the device charges. ValueError when none holds."""
    return min_cohort_enforced(
        mechanism=request.mechanism,
        epsilon0=request.epsilon0,
        epsilon=request.epsilon,
        delta=request.delta,
        domain_size=request.domain_size,
    ).min_cohort


def ledger_empty(size: int) -> Columns:
    return {
        "epsilon_used": np.zeros(size, dtype=np.int64),
        "reports_used": np.zeros(size, dtype=np.int32),
    }


def _column(ledger: Columns, name: str, dtype: type) -> npt.NDArray:
    return ledger.setdefault(name, np.zeros(ledger["epsilon_used"].size, dtype=dtype))


class BasicComposition:
    """Epsilons add up (seed 000, Section 4.3)."""

    name = "basic"
    # Whether a guarantee this composition states may carry delta' beyond the queries' own deltas.
    adds_delta_prime = False

    def fits(
        self, ledger: Columns, scope: str, request: BudgetRequest, allowed: float, delta_allowed: float
    ) -> npt.NDArray[np.bool_]:
        return _column(ledger, f"{scope}epsilon_used", np.int64) + to_units(request.epsilon) <= to_units(allowed)

    def spend(self, ledger: Columns, scope: str, request: BudgetRequest, answered: npt.NDArray[np.bool_]) -> None:
        _column(ledger, f"{scope}epsilon_used", np.int64)[answered] += to_units(request.epsilon)

    def accounts(self, ledger: Columns, scope: str, delta_prime: float) -> dict[str, npt.NDArray[np.float64]]:
        """Per device, the epsilon each account this composition keeps gives the history so far (reads only)."""
        used = ledger.get(f"{scope}epsilon_used")
        return {"basic": np.zeros(ledger["epsilon_used"].size) if used is None else used / NANO}


class AdvancedComposition(BasicComposition):
    """Basic composition, or the advanced composition bound when it is smaller [DRV10]."""

    name = "advanced"
    adds_delta_prime = True

    def fits(
        self, ledger: Columns, scope: str, request: BudgetRequest, allowed: float, delta_allowed: float
    ) -> npt.NDArray[np.bool_]:
        epsilon = request.epsilon
        squares = _column(ledger, f"{scope}epsilon_squares", np.float64) + epsilon**2
        drift = _column(ledger, f"{scope}epsilon_drift", np.float64) + epsilon * math.expm1(epsilon)
        # privacy.composition.advanced_composition_epsilon, vectorised over the devices.
        bound = np.sqrt(2.0 * math.log(1.0 / delta_allowed) * squares) + drift
        return super().fits(ledger, scope, request, allowed, delta_allowed) | (bound <= allowed)

    def spend(self, ledger: Columns, scope: str, request: BudgetRequest, answered: npt.NDArray[np.bool_]) -> None:
        super().spend(ledger, scope, request, answered)
        epsilon = request.epsilon
        _column(ledger, f"{scope}epsilon_squares", np.float64)[answered] += epsilon**2
        _column(ledger, f"{scope}epsilon_drift", np.float64)[answered] += epsilon * math.expm1(epsilon)

    def accounts(self, ledger: Columns, scope: str, delta_prime: float) -> dict[str, npt.NDArray[np.float64]]:
        accounts = super().accounts(ledger, scope, delta_prime)
        if f"{scope}epsilon_squares" in ledger:
            squares, drift = ledger[f"{scope}epsilon_squares"], ledger[f"{scope}epsilon_drift"]
            accounts["advanced"] = np.sqrt(2.0 * math.log(1.0 / delta_prime) * squares) + drift
        return accounts


class RenyiComposition(BasicComposition):
    """Basic composition, or Renyi DP composition converted at the analysis delta when it is smaller.

    Each query's release has an RDP curve over RENYI_ORDERS (query_rdp); the ledger keeps the
    per-order sums, which compose exactly (Mironov 2017, Prop. 1), and the bound is
    min over alpha of rdp_to_dp(sum rho(alpha), alpha, delta') with delta' = the analysis delta
    (privacy.composition.rdp_epsilon, vectorised). Both bounds hold at once.
    """

    name = "renyi"
    adds_delta_prime = True

    def fits(
        self, ledger: Columns, scope: str, request: BudgetRequest, allowed: float, delta_allowed: float
    ) -> npt.NDArray[np.bool_]:
        sums = [_column(ledger, f"{scope}rdp_{i}", np.float64) for i in range(len(RENYI_ORDERS))]
        bound = _renyi_bound(sums, query_rdp(request), delta_allowed)
        return super().fits(ledger, scope, request, allowed, delta_allowed) | (bound <= allowed)

    def spend(self, ledger: Columns, scope: str, request: BudgetRequest, answered: npt.NDArray[np.bool_]) -> None:
        super().spend(ledger, scope, request, answered)
        for i, rho in enumerate(query_rdp(request)):
            _column(ledger, f"{scope}rdp_{i}", np.float64)[answered] += rho

    def accounts(self, ledger: Columns, scope: str, delta_prime: float) -> dict[str, npt.NDArray[np.float64]]:
        return {**super().accounts(ledger, scope, delta_prime), **_renyi_account(ledger, scope, delta_prime)}


def _renyi_account(ledger: Columns, scope: str, delta_prime: float) -> dict[str, npt.NDArray[np.float64]]:
    """The Renyi account's epsilon at delta' for the history so far, where the ledger keeps one."""
    if f"{scope}rdp_0" not in ledger:
        return {}
    sums = [ledger[f"{scope}rdp_{i}"] for i in range(len(RENYI_ORDERS))]
    return {"renyi": _renyi_bound(sums, (0.0,) * len(RENYI_ORDERS), delta_prime)}


def _renyi_bound(sums: list[npt.NDArray[np.float64]], curve: tuple[float, ...], delta: float) -> npt.NDArray:
    """Per device, min over the orders of (sum so far + this query's rho + the conversion's slack):
    an upper bound on the Renyi account's epsilon at ``delta`` after this query, order by order
    without stacking the columns (one temporary array)."""
    bound = None
    for column, rho, slack in zip(sums, curve, _renyi_slack(delta), strict=True):
        candidate = column + (rho + slack)
        bound = candidate if bound is None else np.minimum(bound, candidate, out=bound)
    return bound


@functools.lru_cache(maxsize=64)
def _renyi_slack(delta: float) -> tuple[float, ...]:
    """rdp_to_dp(0, alpha, delta) = max(0, slack) per order: rho plus it bounds rdp_to_dp(rho, alpha, delta)
    from above (privacy.composition.rdp_to_dp, which rounds up)."""
    return tuple(rdp_to_dp(0.0, alpha, delta) for alpha in RENYI_ORDERS)


# Orders of the device's Renyi ledger: few, so the ledger stays small, spread where conversions at
# deltas of 1e-6..1e-12 find their minimum.
RENYI_ORDERS: tuple[float, ...] = (1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0, 24.0, 32.0, 48.0, 64.0)


def query_rdp(request: BudgetRequest) -> tuple[float, ...]:
    """The tightest RDP curve this code can prove for one query's release, over RENYI_ORDERS.

    - aggregator noise: alpha Delta^2 / (2 sigma^2), Delta = sqrt 2, sigma the discrete Gaussian's
      calibration the aggregators use (the multivariate discrete Gaussian is Delta^2 / (2 sigma^2)-zCDP,
      CKS20 Theorem 14, as the continuous one is); with the discrete Laplace (delta = 0) the release
      is pure epsilon-DP, so min(epsilon, alpha epsilon^2 / 2) (privacy.composition.pure_dp_rdp);
    - symmetric RAPPOR: 2 rho_2RR(n, alpha, eps0) at n = the minimum cohort (seed 000 C.1.3; a
      larger batch only adds independent reports, which cannot raise a divergence);
    - any other local randomizer: its pure replacement epsilon0 as RDP (no amplification credit);
    - a Poplar1 walk of L levels (aggregator noise): L times the Gaussian's curve at the walk's sigma
      (privacy.heavy_hitters.level_sigma): each level is a histogram release, composed adaptively.
    """
    return _query_rdp(
        request.aggregator_noise, request.mechanism, request.mechanism_epsilon0, request.epsilon0,
        request.epsilon, request.delta, request.min_cohort, request.walk_levels,
    )  # fmt: skip


@functools.lru_cache(maxsize=256)
def _query_rdp(
    aggregator_noise: bool,
    mechanism: str,
    mechanism_epsilon0: float | None,
    epsilon0: float,
    epsilon: float,
    delta: float,
    cohort: int,
    walk: int = 0,
) -> tuple[float, ...]:
    try:
        if aggregator_noise and walk:
            # A Poplar1 walk: its levels, each the Gaussian's curve at the walk's sigma, composed.
            rhos = gaussian_rdp(level_sigma(epsilon, delta, walk), HISTOGRAM_L2_SENSITIVITY, RENYI_ORDERS).rhos
            return tuple(walk * rho for rho in rhos)
        return _query_rdp_or_raise(aggregator_noise, mechanism, mechanism_epsilon0, epsilon0, epsilon, delta, cohort)
    except ValueError:
        # Parameters outside what privacy/ can bound (a task no server would send: epsilon0 of
        # hundreds, a delta below 1e-300): no Renyi credit, so the other accounts decide.
        return (math.inf,) * len(RENYI_ORDERS)


def _query_rdp_or_raise(
    aggregator_noise: bool,
    mechanism: str,
    mechanism_epsilon0: float | None,
    epsilon0: float,
    epsilon: float,
    delta: float,
    cohort: int,
) -> tuple[float, ...]:
    if aggregator_noise:
        noise = aggregator_noise_of(epsilon, delta)
        if isinstance(noise, AggregatorLaplace):
            return pure_dp_rdp(epsilon, RENYI_ORDERS).rhos
        return gaussian_rdp(noise.sigma, HISTOGRAM_L2_SENSITIVITY, RENYI_ORDERS).rhos
    pure = pure_dp_rdp(epsilon0, RENYI_ORDERS).rhos if math.isfinite(epsilon0) else (math.inf,) * len(RENYI_ORDERS)
    if mechanism == "symmetric_rappor" and mechanism_epsilon0 is not None and cohort >= 1:
        return tuple(
            min(p, symmetric_rappor_rdp(mechanism_epsilon0, cohort, alpha))
            for p, alpha in zip(pure, RENYI_ORDERS, strict=True)
        )
    return pure


# ---------------------------------------------------------------- the PLD account
#
# Each query's release is dominated by a pair of distributions (privacy/pld.py), and adaptive
# composition by the product of the pairs, whose privacy loss distribution is the convolution of
# theirs: composed numerically with a pessimistic discretisation, it is the tightest account here
# (within the grid's step of the exact composition). The pairs, per query (query_pld_key):
# - a local randomizer at epsilon0 (replacement model) summed over at least the minimum cohort m:
#   Feldman, McMillan and Talwar's clone pair at n = m, with the bound privacy.enforced_cohort
#   proves for the mechanism (FMT 2022's clone rate where its errata condition holds, else FMT
#   2020's; symmetric RAPPOR: FMT 2022's pair at its deletion epsilon0 on each of the two changed
#   coordinates, the product of two pairs); a larger batch only adds independent reports
#   (post-processing), so m is the worst case;
# - aggregator noise: one aggregator's discrete Gaussian (sigma) or discrete Laplace (scale b), on
#   the two coordinates a report moving between buckets shifts by 1: the 1-D pair composed twice.
# A PLD is a distribution, not a number, so the ledger cannot keep a running sum of it. It keeps
# instead, per scope, how many queries of each kind the device answered ("{scope}pld:{key}"): the
# composition depends only on that multiset. Devices with the same counts (all of a fleet that
# answered the same rounds) share one composition, computed once per process (_pld_epsilon).
# "{scope}pld_queries" counts the queries recorded; where it falls short of the scope's reports
# (a ledger from before the account, a query no pair could be built for) the account is infinite.

PLD_DELTA_MIN = 1e-300
# The clone pair is built for at most this many reports (0.1-0.5 s; 2-9 s at 10^6-10^7, and 13 GB
# at 10^12). Fewer reports are sound: the pair at n' < n dominates the one at n (the reports beyond
# n' are independent additions, a post-processing); beyond 10^5 the per-round epsilon it gives is
# already far below any recipe's.
PLD_COHORT_MAX = 100_000


def query_pld_key(request: BudgetRequest) -> str | None:
    """The name of the query's dominating pair, from which _pld_of rebuilds it; None when the
    parameters are outside what privacy/pld.py can bound (the account then gives no credit)."""
    if request.aggregator_noise and request.walk_levels:
        try:
            return f"walk:{level_sigma(request.epsilon, request.delta, request.walk_levels)!r}:{request.walk_levels}"
        except ValueError:
            return None
    if request.aggregator_noise:
        try:
            noise = aggregator_noise_of(request.epsilon, request.delta)
        except ValueError:
            return None
        if isinstance(noise, AggregatorLaplace):
            return f"laplace:{float(noise.scale)!r}"
        return f"gaussian:{noise.sigma!r}"
    try:
        bound = bound_for(request.mechanism, request.domain_size)[0]
    except ValueError:
        return None
    if not (0 < request.epsilon0 < math.inf) or request.min_cohort < 1:
        return None
    cohort = min(request.min_cohort, PLD_COHORT_MAX)
    if bound == RAPPOR_PER_COORDINATE:
        # Symmetric RAPPOR: its two changed coordinates are each a post-processing of FMT 2022's clone
        # pair at the deletion epsilon0, with independent coins (privacy/rappor_shuffling.py), so the
        # product of the two pairs dominates: that pair's PLD composed twice.
        return f"shuffled2:stronger-2022:{request.epsilon0 / 2!r}:{cohort}"
    return f"shuffled:{bound}:{request.epsilon0!r}:{cohort}"


@functools.lru_cache(maxsize=64)
def _pld_of(key: str) -> tuple[PrivacyLossDistribution, int]:
    """The 1-D pair a key names, and how many times one query composes it."""
    kind, _, rest = key.partition(":")
    if kind == "laplace":
        return discrete_laplace(float(rest), 1), 2
    if kind == "gaussian":
        return discrete_gaussian(float(rest), 1), 2
    if kind == "walk":  # a Poplar1 walk's levels: each the histogram's pair, composed level by level
        sigma, levels = rest.split(":")
        return discrete_gaussian(float(sigma), 1), 2 * int(levels)
    method, epsilon0, cohort = rest.split(":")
    return shuffled(float(epsilon0), int(cohort), method), 2 if kind == "shuffled2" else 1


@functools.lru_cache(maxsize=512)
def _pld_epsilon(history: tuple[tuple[str, int], ...], delta: float) -> float:
    """Epsilon at ``delta`` of the queries ``history`` counts (key, times answered), composed."""
    if not history:
        return 0.0
    try:
        steps = []
        for key, count in history:
            pld, per_query = _pld_of(key)
            steps.append((pld, per_query * count))
        return composed_epsilon(steps, max(delta, PLD_DELTA_MIN))
    except (ValueError, MemoryError):  # parameters privacy/pld.py refuses, or too large: no credit
        return math.inf


def _pld_bound(ledger: Columns, scope: str, delta: float, request: BudgetRequest | None = None) -> npt.NDArray:
    """Per device, the PLD account's epsilon at ``delta`` for its history in ``scope`` (plus ``request``)."""
    size = ledger["epsilon_used"].size
    prefix = f"{scope}pld:"
    names = sorted(name for name in ledger if name.startswith(prefix))
    added = None
    if request is not None:
        added = query_pld_key(request)
        if added is None:
            return np.full(size, math.inf)
    counts = np.stack([ledger[name] for name in names], axis=1) if names else np.zeros((size, 0), dtype=np.int32)
    rows, inverse = np.unique(counts, axis=0, return_inverse=True)
    keys = [name[len(prefix) :] for name in names]
    bounds = []
    for row in rows:
        history = {key: int(count) for key, count in zip(keys, row, strict=True) if count}
        if added is not None:
            history[added] = history.get(added, 0) + 1
        bounds.append(_pld_epsilon(tuple(sorted(history.items())), delta))
    bound = np.asarray(bounds, dtype=np.float64)[inverse.reshape(-1)]
    recorded = ledger.get(f"{scope}pld_queries", np.zeros(size, dtype=np.int32))
    return np.where(recorded == _reports_used(ledger, scope), bound, math.inf)


def _reports_used(ledger: Columns, scope: str) -> npt.NDArray:
    return (
        ledger["reports_used"]
        if scope == ""
        else ledger.get(f"{scope}reports_used", np.zeros_like(ledger["reports_used"]))
    )


def _pld_spend(ledger: Columns, scope: str, request: BudgetRequest, answered: npt.NDArray[np.bool_]) -> None:
    """Record the query in the PLD account (before the scope's reports count it, as charge does)."""
    recorded = _column(ledger, f"{scope}pld_queries", np.int32)
    key = query_pld_key(request)
    if key is None:
        return  # recorded falls behind the reports: the account is infinite from now on
    _column(ledger, f"{scope}pld:{key}", np.int32)[answered] += 1
    recorded[answered] += 1


class TightestComposition(AdvancedComposition):
    """Basic, advanced or Renyi composition, whichever is smallest: a query fits when any bound does.

    The basic and advanced accounts are kept for every query (AdvancedComposition). The Renyi
    account (12 floats per device and scope, ten times the rest of the ledger) is opened only by the
    first query whose curve earns Renyi credit (aggregator noise, symmetric RAPPOR: query_rdp below
    the pure epsilon0); before that a local randomizer's pure curve would not beat the basic sum.
    When it opens, a device that already answered a query in that scope starts at +infinity (its
    earlier queries were not recorded: no Renyi credit, ever, for it) and one that answered none at 0.
    From then on every query answered is added, so each account stays a sound bound on the whole
    history, and the device may take the smallest.
    """

    name = "tightest"

    def fits(
        self, ledger: Columns, scope: str, request: BudgetRequest, allowed: float, delta_allowed: float
    ) -> npt.NDArray[np.bool_]:
        fit = self._fits_without_pld(ledger, scope, request, allowed, delta_allowed)
        if fit.all():  # the PLD account is the costly one: composed only where the others refuse
            return fit
        return fit | (_pld_bound(ledger, scope, delta_allowed, request) <= allowed)

    def _fits_without_pld(
        self, ledger: Columns, scope: str, request: BudgetRequest, allowed: float, delta_allowed: float
    ) -> npt.NDArray[np.bool_]:
        fit = super().fits(ledger, scope, request, allowed, delta_allowed)
        if not self._renyi_kept(ledger, scope, request):
            return fit
        curve = query_rdp(request)
        if f"{scope}rdp_0" in ledger:
            bound = _renyi_bound([ledger[f"{scope}rdp_{i}"] for i in range(len(RENYI_ORDERS))], curve, delta_allowed)
        else:  # the account opens with this query (fits only reads: nothing is stored here)
            bound = self._opening(ledger, scope) + min(
                rho + slack for rho, slack in zip(curve, _renyi_slack(delta_allowed), strict=True)
            )
        return fit | (bound <= allowed)

    def spend(self, ledger: Columns, scope: str, request: BudgetRequest, answered: npt.NDArray[np.bool_]) -> None:
        _pld_spend(ledger, scope, request, answered)
        # The Renyi account opens from the reports used before this query (charge counts it after).
        if self._renyi_kept(ledger, scope, request):
            if f"{scope}rdp_0" not in ledger:
                opening = self._opening(ledger, scope)
                for i in range(len(RENYI_ORDERS)):
                    ledger[f"{scope}rdp_{i}"] = opening.copy()
            for i, rho in enumerate(query_rdp(request)):
                ledger[f"{scope}rdp_{i}"][answered] += rho
        super().spend(ledger, scope, request, answered)

    def accounts(self, ledger: Columns, scope: str, delta_prime: float) -> dict[str, npt.NDArray[np.float64]]:
        return {
            **super().accounts(ledger, scope, delta_prime),
            **_renyi_account(ledger, scope, delta_prime),
            "pld": _pld_bound(ledger, scope, delta_prime),
        }

    @staticmethod
    def _renyi_kept(ledger: Columns, scope: str, request: BudgetRequest) -> bool:
        return f"{scope}rdp_0" in ledger or renyi_credit(request)

    @staticmethod
    def _opening(ledger: Columns, scope: str) -> npt.NDArray[np.float64]:
        used = ledger.get(f"{scope}reports_used", np.zeros(ledger["epsilon_used"].size, dtype=np.int32))
        return np.where(used > 0, math.inf, 0.0)


def renyi_credit(request: BudgetRequest) -> bool:
    """Whether the query's Renyi curve is better than its pure epsilon0's (query_rdp)."""
    return request.aggregator_noise or request.mechanism == "symmetric_rappor"


COMPOSITIONS = {c.name: c for c in (BasicComposition, AdvancedComposition, RenyiComposition, TightestComposition)}
# What a new analysis composes with when its spec names no accountant. A snapshot that names none
# (taken before accountants were pluggable) composes basically: Accountant.for_policy.
DEFAULT_ACCOUNTANT = TightestComposition.name


@dataclass(frozen=True)
class Guarantee:
    """A history of answers in one scope as one (epsilon, delta)-DP statement: the smallest epsilon
    of the accounts the accountant keeps, each a sound bound on the whole history, with that
    account's own total delta (Accountant.guarantee)."""

    epsilon: float
    delta: float
    account: str  # "basic", "advanced", "renyi" or "pld"


def delta_used(ledger: Columns, scope: str = "") -> npt.NDArray[np.int64]:
    """Per device, the sum of the deltas of the queries it answered in ``scope`` ("" the analysis,
    "field:<name>:" a field), in atto-units.

    A ledger written before the sum was kept has no column: a device that answered nothing there
    has spent 0; one that did has an unknown sum, taken as saturated (1), so that under a cap on
    the total delta it fails closed rather than guess."""
    column = ledger.get(f"{scope}delta_used")
    if column is not None:
        return column
    return np.where(_reports_used(ledger, scope) > 0, ATTO, 0).astype(np.int64)


class Accountant:
    """Checks 1-3 under one composition rule."""

    def __init__(self, composition: BasicComposition) -> None:
        self.composition = composition

    @classmethod
    def for_policy(cls, policy: dict) -> Accountant:
        """The accountant a policy names; an unknown name is refused rather than guessed."""
        name = policy["budget"].get("accountant", BasicComposition.name)
        return cls(COMPOSITIONS[name]())

    def check(self, ledger: Columns, policy: dict, request: BudgetRequest) -> npt.NDArray[np.int8]:
        """Per device, Decision.ANSWERED or the first check that fails. Reads, never writes."""
        size = ledger["epsilon_used"].size
        decision = np.full(size, Decision.ANSWERED, dtype=np.int8)
        budget = policy["budget"]
        delta_allowed = budget["delta"]

        # Check 1: the analysis's aggregate epsilon and report count (Table 1a).
        analysis_ok = (
            self.composition.fits(ledger, "", request, budget["epsilon"], delta_allowed)
            & (ledger["reports_used"] + 1 <= budget["reports"])
            & (request.delta <= delta_allowed)
            & self.delta_total_fits(ledger, request, budget)
        )
        decision[~analysis_ok] = Decision.ANALYSIS_BUDGET

        # Check 2: every field the query reads (Table 1b). A field without a policy is refused.
        for field in request.fields:
            field_policy = policy["fields"].get(field)
            if field_policy is None:
                field_ok = np.zeros(size, dtype=bool)
            else:
                scope = f"field:{field}:"
                local_ok = (
                    field_policy.get("aggregatorNoise", False)
                    if request.aggregator_noise
                    else request.epsilon0 <= field_policy["localEpsilon"]
                )
                field_ok = (
                    local_ok
                    & self.composition.fits(ledger, scope, request, field_policy["epsilon"], delta_allowed)
                    & (_column(ledger, f"{scope}reports_used", np.int32) + 1 <= field_policy["reports"])
                    & self.delta_total_fits(ledger, request, budget, scope=scope, cap=field_policy.get("deltaTotal"))
                )
            decision[(decision == Decision.ANSWERED) & ~field_ok] = Decision.FIELD_BUDGET

        # Check 3: epsilon is reached by aggregating at least min_cohort eps0-DP reports. The
        # device computes the cohort itself; a recipe claiming a smaller one is refused, and so is
        # one below the floor the privacy officer set for the analysis (budget.minCohort).
        if not self.min_cohort_suffices(request, floor=budget.get("minCohort", 0)):
            decision[decision == Decision.ANSWERED] = Decision.MIN_COHORT
        return decision

    def delta_total_fits(
        self, ledger: Columns, request: BudgetRequest, budget: dict, *, scope: str = "", cap: float | None = None
    ) -> npt.NDArray[np.bool_]:
        """The total delta of checks 1 and 2: the largest delta any account could state in ``scope``
        after this query (Accountant.guarantee: the queries' deltas, plus delta' where the composition
        may use it) is within the officer's cap: ``budget.deltaTotal`` for the analysis, a field's
        ``deltaTotal`` for a field (``cap``), if there is one. Without one the total is still stated,
        but only the per-query delta and the report count bound it."""
        if scope == "":
            cap = budget.get("deltaTotal")
        if cap is None:
            return np.ones(ledger["epsilon_used"].size, dtype=bool)
        added = to_delta_units(request.delta)
        if self.composition.adds_delta_prime:
            added += to_delta_units(budget["delta"])
        return delta_used(ledger, scope) + added <= to_delta_units(cap)

    def min_cohort_suffices(self, request: BudgetRequest, *, floor: int = 0) -> bool:
        if request.min_cohort < floor:
            return False
        if request.aggregator_noise:
            return True  # the aggregators' noise gives epsilon whatever the cohort size
        try:
            needed = min_cohort_needed(request)
        except ValueError:  # UnreachableEpsilon, an unknown mechanism, parameters out of range
            return False
        return request.min_cohort >= needed

    def guarantee(
        self, ledger: Columns, scope: str, *, delta_prime: float, delta_sum: float, device: int = 0
    ) -> Guarantee:
        """One device's history in ``scope`` ("" the analysis, "field:<name>:" a field) as (epsilon, delta).

        ``delta_sum``: the sum of the deltas of the queries it answered there. The total delta each
        account gives: basic composition (eps_i, delta_i) -> (sum eps_i, sum delta_i); advanced
        composition adds delta' to that sum [DRV10]; the Renyi account composes the queries' RDP
        curves, which carry no delta of their own (query_rdp: the local randomizer's pure epsilon0,
        symmetric RAPPOR's shuffled curve, the Gaussian's), so its conversion at delta' is all.
        """
        totals = {"basic": delta_sum, "advanced": delta_sum + delta_prime, "renyi": delta_prime, "pld": delta_prime}
        accounts = self.composition.accounts(ledger, scope, delta_prime)
        epsilon, delta, account = min((float(eps[device]), totals[name], name) for name, eps in accounts.items())
        # The ledger's float sums may sit an ulp or two below the exact ones: a statement rounds up.
        return Guarantee(epsilon * (1 + STATEMENT_ROUNDING), delta * (1 + STATEMENT_ROUNDING), account)

    def charge(self, ledger: Columns, request: BudgetRequest, answered: npt.NDArray[np.bool_]) -> None:
        """Spend epsilon and one report, on the analysis and each field, for answering devices."""
        for scope in ("", *(f"field:{field}:" for field in request.fields)):
            self.composition.spend(ledger, scope, request, answered)
            spent = ledger[f"{scope}delta_used"] = delta_used(ledger, scope)  # opened before the reports count it
            spent[answered] = np.minimum(spent[answered] + to_delta_units(request.delta), ATTO)
            if scope == "":
                ledger["reports_used"][answered] += 1
            else:
                _column(ledger, f"{scope}reports_used", np.int32)[answered] += 1
