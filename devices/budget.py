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

``Accountant.check`` only reads; ``Accountant.charge`` is the only place that mutates a ledger.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import IntEnum

import numpy as np
import numpy.typing as npt

from devices.columns import Columns
from privacy.amplification import UnreachableEpsilon, min_cohort_closed_form

NANO = 1_000_000_000


def to_units(epsilon: float) -> int:
    return int(round(epsilon * NANO))


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

    def fits(
        self, ledger: Columns, scope: str, epsilon: float, allowed: float, delta_allowed: float
    ) -> npt.NDArray[np.bool_]:
        return _column(ledger, f"{scope}epsilon_used", np.int64) + to_units(epsilon) <= to_units(allowed)

    def spend(self, ledger: Columns, scope: str, epsilon: float, answered: npt.NDArray[np.bool_]) -> None:
        _column(ledger, f"{scope}epsilon_used", np.int64)[answered] += to_units(epsilon)


class AdvancedComposition(BasicComposition):
    """Basic composition, or the advanced composition bound when it is smaller [DRV10]."""

    name = "advanced"

    def fits(
        self, ledger: Columns, scope: str, epsilon: float, allowed: float, delta_allowed: float
    ) -> npt.NDArray[np.bool_]:
        squares = _column(ledger, f"{scope}epsilon_squares", np.float64) + epsilon**2
        drift = _column(ledger, f"{scope}epsilon_drift", np.float64) + epsilon * math.expm1(epsilon)
        # privacy.composition.advanced_composition_epsilon, vectorised over the devices.
        bound = np.sqrt(2.0 * math.log(1.0 / delta_allowed) * squares) + drift
        return super().fits(ledger, scope, epsilon, allowed, delta_allowed) | (bound <= allowed)

    def spend(self, ledger: Columns, scope: str, epsilon: float, answered: npt.NDArray[np.bool_]) -> None:
        super().spend(ledger, scope, epsilon, answered)
        _column(ledger, f"{scope}epsilon_squares", np.float64)[answered] += epsilon**2
        _column(ledger, f"{scope}epsilon_drift", np.float64)[answered] += epsilon * math.expm1(epsilon)


COMPOSITIONS = {c.name: c for c in (BasicComposition, AdvancedComposition)}


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
            self.composition.fits(ledger, "", request.epsilon, budget["epsilon"], delta_allowed)
            & (ledger["reports_used"] + 1 <= budget["reports"])
            & (request.delta <= delta_allowed)
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
                    & self.composition.fits(ledger, scope, request.epsilon, field_policy["epsilon"], delta_allowed)
                    & (_column(ledger, f"{scope}reports_used", np.int32) + 1 <= field_policy["reports"])
                )
            decision[(decision == Decision.ANSWERED) & ~field_ok] = Decision.FIELD_BUDGET

        # Check 3: epsilon is reached by aggregating at least min_cohort eps0-DP reports. The
        # device computes the cohort itself; a recipe claiming a smaller one is refused.
        if not self.min_cohort_suffices(request):
            decision[decision == Decision.ANSWERED] = Decision.MIN_COHORT
        return decision

    def min_cohort_suffices(self, request: BudgetRequest) -> bool:
        if request.aggregator_noise:
            return True  # the aggregators' noise gives epsilon whatever the cohort size
        try:
            needed = min_cohort_closed_form(request.epsilon0, request.epsilon, request.delta)
        except (UnreachableEpsilon, ValueError):
            return False
        return request.min_cohort >= needed

    def charge(self, ledger: Columns, request: BudgetRequest, answered: npt.NDArray[np.bool_]) -> None:
        """Spend epsilon and one report, on the analysis and each field, for answering devices."""
        self.composition.spend(ledger, "", request.epsilon, answered)
        ledger["reports_used"][answered] += 1
        for field in request.fields:
            scope = f"field:{field}:"
            self.composition.spend(ledger, scope, request.epsilon, answered)
            _column(ledger, f"{scope}reports_used", np.int32)[answered] += 1
