"""What a recipe would do, checked as you type: recipe_validate's verdict plus the figures around it.

The dashboard's recipe editor (and POST /api/analyses/<id>/recipes/validate/) asks this before
anything runs. It reads only: no recipe, round or ledger is created or charged.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any, Final

import numpy as np

from analyses.models import Analysis, Recipe
from analyses.services.accuracy import recipe_expected_error, too_noisy_refusal
from analyses.services.budget import budget_plan_refusal, budget_request_for
from analyses.services.cohorts import cohort_forecast, cohorts_suppressed
from analyses.services.policy import analysis_spent
from analyses.services.recipes import ParsedRecipe, recipe_validate
from pfs_device.budget import BudgetRequest
from pfs_device.decision import fields_of
from privacy.aggregator_noise import aggregator_noise
from privacy.heavy_hitters import walk_levels
from privacy.mechanisms import mechanism_get

# Budgets are kept in nano-epsilon on devices; rounding the figures shown to that unit hides
# float noise such as 2 - 0.3 - 0.3 = 1.4000000000000001.
_DIGITS: Final = 9
# "Rounds like this one that still fit" is counted up to here (each is one accountant check).
_MAX_ROUNDS_COUNTED: Final = 100


def recipe_preview(*, analysis: Analysis, content: Any) -> dict[str, Any]:
    """The parsed recipe's key figures, its budget cost and what would remain, and its expected error
    (per bucket, at 95%, and whether it is too noisy: analyses.services.accuracy).

    Raises ValidationFailed (by recipe key) exactly when ``recipe_validate`` does: it is
    the only judge of a recipe.
    """
    parsed = recipe_validate(analysis=analysis, content=content)
    request = budget_request_for(parsed.privacy, parsed.field, parsed.encoding.size, walk_levels(parsed.encoding))
    devices_expected = analysis.fleet.size * parsed.privacy.sampling_rate
    budget = _budget(analysis, parsed, request)
    return {
        "field": parsed.field,
        "buckets": parsed.encoding.size,
        "cohorts": parsed.cohorts,
        "noise": parsed.privacy.noise,
        "mechanism": parsed.privacy.mechanism or None,
        "epsilon0": parsed.privacy.epsilon0,
        "replacement_epsilon0": None if math.isinf(request.epsilon0) else request.epsilon0,
        "epsilon": parsed.privacy.epsilon,
        "delta": parsed.privacy.delta,
        "sampling_rate": parsed.privacy.sampling_rate,
        "min_cohort": parsed.privacy.min_cohort,
        "devices": analysis.fleet.size,
        "devices_expected": round(devices_expected),
        "budget": budget,
        "standard_error": _standard_error(parsed, round(devices_expected)),
        # Accuracy first: a typical bucket's error at 95%, and whether a start will ask to confirm it.
        "expected_error": (error := recipe_expected_error(analysis, parsed.privacy, parsed.encoding.size)).as_json(),
        "too_noisy_reason": too_noisy_refusal(error),
        # Before any device spends: the batches expected below the minimum cohort (suppressed, yet
        # their devices would spend), from what the server may know (analyses.services.cohorts).
        "cohorts_forecast": (
            forecast := cohort_forecast(
                analysis, parsed.cohorts, parsed.privacy.sampling_rate, parsed.privacy.min_cohort
            )
        ),
        "batches_below": [row["cohort"] for row in forecast if row["below"]],
        "cohorts_suppressed": cohorts_suppressed(forecast),
        "summary": _summary(analysis, budget),
    }


def spend_digest(content: Any) -> str:
    """A digest of the recipe as the page posted it (keys sorted): the recipe a spend question asked
    about. A "Run and spend" posted with another digest ran a recipe changed since it was asked, and
    is asked again (analyses.pages)."""
    canonical = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


def _budget(analysis: Analysis, parsed: ParsedRecipe, request: BudgetRequest) -> dict[str, Any]:
    """Cost, left before and remaining after, for the analysis and each field the recipe reads.

    "Left" is what the budget table on the analysis page shows (every round started counts in
    full, epsilons summed); ``rounds_that_fit`` asks the analysis's own accountant, so with the
    advanced or Rényi accountant it can exceed what the sums suggest.
    """
    spent = analysis_spent(analysis)
    cost = parsed.privacy.epsilon
    enforced = analysis.enforced  # the approved policy, not an unapproved edit
    policies = {p.field: p for p in enforced.field_budgets}
    fields = []
    for name in fields_of(parsed.field):
        used = spent["fields"].get(name, {"epsilon": 0.0, "reports": 0})
        policy = policies[name]  # recipe_validate refuses a field without a policy
        fields.append(
            _scope(name, cost, policy.epsilon - used["epsilon"], policy.reports - used["reports"]),
        )
    scope = _scope(
        analysis.identifier,
        cost,
        enforced.epsilon_allowed - spent["epsilon"],
        enforced.reports_allowed - spent["reports"],
    )
    reports_left = min([scope["reports_left"], *(f["reports_left"] for f in fields)])
    planned = max(1, min(reports_left, _MAX_ROUNDS_COUNTED))
    refusal = budget_plan_refusal(analysis, parsed.field, [request] * planned)
    return {
        "accountant": enforced.accountant,
        "analysis": scope,
        "fields": fields,
        "rounds_that_fit": planned if refusal is None else refusal[0],
    }


def _scope(name: str, cost: float, left: float, reports_left: int) -> dict[str, Any]:
    left = round(left, _DIGITS)
    return {
        "name": name,
        "epsilon": cost,
        "left": left,
        "remaining": round(left - cost, _DIGITS),
        "reports": 1,
        "reports_left": reports_left,
        "reports_remaining": reports_left - 1,
    }


def _standard_error(parsed: ParsedRecipe, devices: int) -> dict[str, Any]:
    """Standard error of one bucket's count in a release over ``devices`` reports.

    Client noise: the mechanism's own variance (the one releases use for their error bars), for a
    bucket holding no device and for one holding every device; it grows with the count for most
    mechanisms. Aggregator noise: both aggregators' Gaussian or Laplace noise, the same for every bucket.
    A recipe split by cohort releases one batch per cohort value, each over fewer devices.
    """
    size = parsed.encoding.size
    if parsed.privacy.noise == Recipe.Noise.AGGREGATOR:
        error = aggregator_noise(parsed.privacy.epsilon, parsed.privacy.delta).standard_error()
        return {"devices": devices, "empty_bucket": error, "full_bucket": error}
    oracle = mechanism_get(parsed.privacy.mechanism, parsed.privacy.epsilon0)
    empty = np.zeros(size)
    full = np.zeros(size)
    full[0] = devices
    return {
        "devices": devices,
        "empty_bucket": math.sqrt(oracle.variance(empty, devices, size)[0]),
        "full_bucket": math.sqrt(oracle.variance(full, devices, size)[0]),
    }


def _summary(analysis: Analysis, budget: dict[str, Any]) -> str:
    """One sentence for the editor: "This round will spend ε = 1 of the 3 left for the analysis; …"."""
    scope = budget["analysis"]
    parts = [f"This round will spend ε = {scope['epsilon']:g} of the {scope['left']:g} left for the analysis"]
    parts += [f"field {f['name']}: {f['epsilon']:g} of {f['left']:g} left" for f in budget["fields"]]
    sentence = "; ".join(parts) + f". Rounds like this one that fit, this one included: {budget['rounds_that_fit']}"
    if budget["accountant"] != "basic":
        # The figures left are plain sums; the advanced or Rényi accountant may fit more rounds.
        sentence += f" (by the {budget['accountant']} accountant; the figures left are plain sums)"
    return sentence + "."
