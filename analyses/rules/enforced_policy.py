"""The policy devices enforce, read from the approved snapshot: what analysts see and what the
server checks.

A privacy officer edits an analysis's budgets in the admin; the edit reaches devices only when it
is approved (a new PolicySnapshot). Until then it is a *pending* edit: every page, API answer and
server-side check reads ``Analysis.enforced`` (this view of the snapshot), never the edited
columns, and the pending edit is shown apart (``pending_changes``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

ACCOUNTANT_LABELS = {
    "basic": "Basic composition",
    "advanced": "Advanced composition (or basic, if smaller)",
    "renyi": "Rényi DP composition (or basic, if smaller)",
    "tightest": "Tightest of basic, advanced, Rényi DP and PLD composition",
}
# With aggregator noise the guarantee does not depend on the cohort; a minimum cohort still keeps
# batches large enough that a few sybil devices cannot single one device out (seed 003, 4.8).
AGGREGATOR_NOISE_MIN_COHORT = 1000


def delta_total_floor(delta: float | None, accountant: str | None) -> float | None:
    """The smallest cap on the total delta (budget.deltaTotal) under which a device can answer even
    one query at the analysis's delta: that delta, plus delta' (the same delta) where the accountant
    may state advanced or Renyi composition (pfs_device.budget.Accountant.delta_total_fits). None
    while delta or the accountant is unknown (refused under their own names)."""
    if not isinstance(delta, float | int) or accountant not in ACCOUNTANT_LABELS:
        return None
    return delta if accountant == "basic" else 2 * delta


def delta_total_too_small(floor: float) -> str:
    return (
        f"At least {floor:g}: below it no device could answer even one query at the analysis's δ "
        "(plus δ′ where the accountant is not basic)."
    )


@dataclass(frozen=True)
class FieldBudget:
    field: str
    local_epsilon: float
    epsilon: float
    reports: int
    aggregator_noise: bool
    delta_total: float | None = None  # the officer's cap on the total delta on this field


@dataclass(frozen=True)
class EnforcedPolicy:
    """An analysis's policy as devices hold it, with the model's attribute names."""

    query_class: dict[str, Any]
    epsilon_allowed: float
    reports_allowed: int
    delta: float
    accountant: str
    field_budgets: tuple[FieldBudget, ...]
    min_cohort_floor: int | None  # the officer's floor for every recipe's minimum cohort
    max_buckets: int | None  # the officer's tighter limit on buckets (privacy.limits.MAX_BUCKETS)
    delta_total: float | None = None  # the officer's cap on the total delta of a device's guarantee

    @classmethod
    def from_content(cls, content: dict[str, Any]) -> EnforcedPolicy:
        budget = content["budget"]
        return cls(
            query_class=content["queryClass"],
            epsilon_allowed=budget["epsilon"],
            reports_allowed=budget["reports"],
            delta=budget["delta"],
            accountant=budget.get("accountant", "basic"),
            field_budgets=tuple(
                FieldBudget(
                    field=name,
                    local_epsilon=spec["localEpsilon"],
                    epsilon=spec["epsilon"],
                    reports=spec["reports"],
                    aggregator_noise=spec.get("aggregatorNoise", False),
                    delta_total=spec.get("deltaTotal"),
                )
                for name, spec in sorted(content["fields"].items())
            ),
            min_cohort_floor=budget.get("minCohort"),
            max_buckets=budget.get("maxBuckets"),
            delta_total=budget.get("deltaTotal"),
        )

    def field(self, name: str) -> FieldBudget | None:
        return next((f for f in self.field_budgets if f.field == name), None)

    def get_accountant_display(self) -> str:
        return ACCOUNTANT_LABELS.get(self.accountant, self.accountant)

    def accountant_phrase(self) -> str:
        """The accountant's label inside a sentence: lower case but for its names (Rényi, DP, PLD),
        never "rényi dp" (issue 31, item 8)."""
        label = self.get_accountant_display()
        return label if label.startswith("Rényi") else label[:1].lower() + label[1:]

    def aggregator_noise_min_cohort(self) -> int:
        """The minimum cohort of an aggregator-noise recipe that states none: the floor, or 1,000."""
        return self.min_cohort_floor or AGGREGATOR_NOISE_MIN_COHORT


def pending_changes(enforced: dict[str, Any] | None, edited: dict[str, Any]) -> list[str]:
    """What an officer's unapproved edit would change, one line per value, in words."""
    if enforced is None:
        return []
    changes = []

    def walk(before: Any, after: Any, path: str) -> None:
        if isinstance(before, dict) and isinstance(after, dict):
            for key in sorted(set(before) | set(after)):
                walk(before.get(key), after.get(key), f"{path}.{key}" if path else key)
        elif before != after:
            changes.append(f"{path}: {_shown(before)} → {_shown(after)}")

    walk(enforced, edited, "")
    return changes


def _shown(value: Any) -> str:
    return "—" if value is None else str(value)
