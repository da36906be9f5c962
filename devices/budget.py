"""The device's budget accountant: checks 1-3 of seed 000 Section 4.3, vectorised over a shard.

Each device holds, per analysis, the aggregate epsilon and number of reports it has spent on the
analysis (check 1) and on every data field (check 2). A device answers only if every check
passes, and then charges exactly what it answered with; a refusal spends nothing.

Basic composition, as the paper states the checks: epsilon_used + epsilon <= epsilon_allowed and
reports_used + 1 <= reports_allowed. Epsilons are stored as integer nano-epsilons (round to
nearest: decimal inputs such as 0.3 map exactly), so sums never drift with float round-off.

The accountant is a class so that a different composition (advanced, Rényi) can replace it
without touching the shard service; budget_charge is the only place that mutates a ledger.
"""

from __future__ import annotations

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


def ledger_empty(size: int) -> Columns:
    return {
        "epsilon_used": np.zeros(size, dtype=np.int64),
        "reports_used": np.zeros(size, dtype=np.int32),
    }


def _field_columns(ledger: Columns, field: str) -> tuple[str, str]:
    epsilon_key, reports_key = f"field:{field}:epsilon_used", f"field:{field}:reports_used"
    size = ledger["epsilon_used"].size
    ledger.setdefault(epsilon_key, np.zeros(size, dtype=np.int64))
    ledger.setdefault(reports_key, np.zeros(size, dtype=np.int32))
    return epsilon_key, reports_key


class BasicCompositionAccountant:
    """Checks 1-3 with basic composition (seed 000, Section 4.3)."""

    name = "basic"

    def check(self, ledger: Columns, policy: dict, request: BudgetRequest) -> npt.NDArray[np.int8]:
        """Per device, Decision.ANSWERED or the first check that fails. Reads, never writes."""
        size = ledger["epsilon_used"].size
        decision = np.full(size, Decision.ANSWERED, dtype=np.int8)
        charge = to_units(request.epsilon)

        # Check 1: the analysis's aggregate epsilon and report count (Table 1a); its delta
        # is the largest delta at which any of its queries may claim epsilon.
        budget = policy["budget"]
        analysis_ok = (
            (ledger["epsilon_used"] + charge <= to_units(budget["epsilon"]))
            & (ledger["reports_used"] + 1 <= budget["reports"])
            & (request.delta <= budget["delta"])
        )
        decision[~analysis_ok] = Decision.ANALYSIS_BUDGET

        # Check 2: every field the query reads (Table 1b). A field without a policy is refused.
        for field in request.fields:
            field_policy = policy["fields"].get(field)
            if field_policy is None:
                field_ok = np.zeros(size, dtype=bool)
            else:
                epsilon_key, reports_key = _field_columns(ledger, field)
                field_ok = (
                    (request.epsilon0 <= field_policy["localEpsilon"])
                    & (ledger[epsilon_key] + charge <= to_units(field_policy["epsilon"]))
                    & (ledger[reports_key] + 1 <= field_policy["reports"])
                )
            decision[(decision == Decision.ANSWERED) & ~field_ok] = Decision.FIELD_BUDGET

        # Check 3: epsilon is reached by aggregating at least min_cohort eps0-DP reports. The
        # device computes the cohort itself; a recipe claiming a smaller one is refused.
        if not self.min_cohort_suffices(request):
            decision[decision == Decision.ANSWERED] = Decision.MIN_COHORT
        return decision

    def min_cohort_suffices(self, request: BudgetRequest) -> bool:
        try:
            needed = min_cohort_closed_form(request.epsilon0, request.epsilon, request.delta)
        except (UnreachableEpsilon, ValueError):
            return False
        return request.min_cohort >= needed

    def charge(self, ledger: Columns, request: BudgetRequest, answered: npt.NDArray[np.bool_]) -> None:
        """Spend epsilon and one report, on the analysis and each field, for answering devices."""
        charge = to_units(request.epsilon)
        ledger["epsilon_used"][answered] += charge
        ledger["reports_used"][answered] += 1
        for field in request.fields:
            epsilon_key, reports_key = _field_columns(ledger, field)
            ledger[epsilon_key][answered] += charge
            ledger[reports_key][answered] += 1


ACCOUNTANTS = {BasicCompositionAccountant.name: BasicCompositionAccountant}
