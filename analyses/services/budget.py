"""The server's budget pre-check: the devices' own checks 1 and 2, run on one device that answered
every round started, and the reasons a device would refuse, in words."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from analyses.models import Analysis, Recipe
from analyses.rules.validation import Problems
from pfs_device.budget import (
    ATTO,
    COMPOSITIONS,
    NANO,
    Accountant,
    BudgetRequest,
    Decision,
    Guarantee,
    delta_used,
    ledger_empty,
)
from pfs_device.decision import fields_of, privacy_budget_request
from privacy.heavy_hitters import walk_levels
from privacy.parameters import PrivacyParameters

# Where a refusal for the report count goes: no recipe key sets how often a device answers (the
# policy does), so forms show it above the fields, not under epsilon.
REPORTS_KEY = "budget.reports"


def reports_used_up(scope: str, reports: int, planned: int = 0) -> str:
    """In words: ``scope`` (the analysis, or a field) has no report left for another round; ``planned``:
    rounds of the same plan counted before this one (not used yet: the words must not say they were)."""
    if planned:
        counted = "1 round" if planned == 1 else f"{planned} rounds"
        return (
            f"{scope} allows each device {_reports(reports)}: the rounds started and the {counted} of this "
            "plan before this one take them all, so none is left for this round."
        )
    if reports == 1:
        return f"{scope} has used its only report: each device answers it once, and a round has already asked."
    return (
        f"{scope} has used all {reports} of its reports: each device answers it at most {reports} times, "
        "and every round started counts one."
    )


def _reports(n: int) -> str:
    return "1 report" if n == 1 else f"{n:,} reports"


def budget_precheck(problems: Problems, analysis: Analysis, field: str | None, request: BudgetRequest) -> None:
    """The device's own checks 1 and 2, run on the server's view: one device that answered every round started."""
    policy, accountant, ledger = _server_ledger(analysis)
    _explain_decision(problems, analysis, ledger, field, request, accountant.check(ledger, policy, request)[0])


def _rounds_charged(analysis: Analysis, up_to_round: int | None = None) -> list[BudgetRequest]:
    """What each round started on ``analysis`` (up to the round of id ``up_to_round``) charges a
    device that answers it."""
    rounds = {} if up_to_round is None else {"pk__lte": up_to_round}
    return [
        recipe_budget_request(recipe)
        for recipe in Recipe.objects.filter(rounds__isnull=False, analysis=analysis).distinct()
        for _ in recipe.rounds.filter(**rounds)
    ]


def _server_ledger(
    analysis: Analysis, composition: str | None = None, up_to_round: int | None = None
) -> tuple[dict, Accountant, dict]:
    """The policy, its accountant (or the ``composition`` named), and the ledger of one device that
    answered every round started (up to the round of id ``up_to_round``)."""
    policy = analysis.enforced_content  # the approved snapshot: an unapproved edit changes nothing
    accountant = Accountant.for_policy(policy) if composition is None else Accountant(COMPOSITIONS[composition]())
    ledger = ledger_empty(1)
    everyone = np.ones(1, dtype=bool)
    for request in _rounds_charged(analysis, up_to_round):
        accountant.charge(ledger, request, everyone)
    return policy, accountant, ledger


def analysis_spent_statement(analysis: Analysis, *, up_to_round: int) -> dict[str, Any]:
    """The analysis's guarantee once the rounds up to ``up_to_round`` were started, for a release's
    metadata: the same statement as the budget page's, frozen when the round is released."""
    spent = analysis_guarantees(analysis, up_to_round=up_to_round)[None]
    return {
        "epsilon": spent.epsilon,
        "delta": spent.delta,
        "account": spent.account,
        "accountant": analysis.enforced.accountant,
        "rounds": len(_rounds_charged(analysis, up_to_round)),
    }


def analysis_guarantees(analysis: Analysis, *, up_to_round: int | None = None) -> dict[str | None, Guarantee]:
    """The (epsilon, delta) a device that answered every round started has spent, per scope (None:
    the analysis; a field's name), as the analysis's accountant composes it, total delta included
    (pfs_device.budget.Accountant.guarantee). What every page, the API and the docs state as spent.
    ``up_to_round``: only the rounds started up to that one (a release's statement)."""
    policy, accountant, ledger = _server_ledger(analysis, up_to_round=up_to_round)
    requests = _rounds_charged(analysis, up_to_round)
    delta_prime = policy["budget"]["delta"]
    scopes: dict[str | None, str] = {None: ""}
    scopes.update((field, f"field:{field}:") for field in policy["fields"])
    for request in requests:
        scopes.update((field, f"field:{field}:") for field in request.fields)
    return {
        key: accountant.guarantee(
            ledger,
            scope,
            delta_prime=delta_prime,
            delta_sum=math.fsum(r.delta for r in requests if key is None or key in r.fields),
        )
        for key, scope in scopes.items()
    }


def _explain_decision(
    problems: Problems,
    analysis: Analysis,
    ledger: dict,
    field: str | None,
    request: BudgetRequest,
    decision: int,
    *,
    planned: int = 0,
) -> None:
    """``planned``: rounds charged on ``ledger`` that a plan has not started yet (said apart in words)."""
    decision = Decision(int(decision))
    if decision == Decision.ANALYSIS_BUDGET:
        _explain_analysis_refusal(problems, analysis, ledger, request, planned)
    elif decision == Decision.FIELD_BUDGET:
        _explain_field_refusal(problems, analysis, ledger, field, request, planned)


def budget_plan_refusal(
    analysis: Analysis, field: str | None, requests: list[BudgetRequest], *, reserved: list[BudgetRequest] = ()
) -> tuple[int, list[str]] | None:
    """(index, reasons) of the first planned round a device would refuse after the ones before; None if all fit.

    ``reserved``: rounds already promised to other plans, charged first.
    """
    policy, accountant, ledger = _server_ledger(analysis)
    everyone = np.ones(1, dtype=bool)
    for request in reserved:
        accountant.charge(ledger, request, everyone)
    for index, request in enumerate(requests):
        decision = accountant.check(ledger, policy, request)[0]
        if decision != Decision.ANSWERED:
            problems = Problems()
            _explain_decision(problems, analysis, ledger, field, request, decision, planned=len(reserved) + index)
            return index, [m for messages in problems.errors.values() for m in messages] or [Decision(decision).label]
        accountant.charge(ledger, request, everyone)
    return None


def rounds_affordable(
    analysis: Analysis, request: BudgetRequest, *, composition: str | None = None, limit: int = 1000
) -> int:
    """How many more rounds charging ``request`` one device that answered every round started would
    answer, by the analysis's accountant (or the ``composition`` named, for comparison), counted up to
    ``limit``: checks 1 and 2 (epsilon, reports, delta; analysis and fields), as devices run them.

    Every account grows with each round answered, so the device answers the k-th more round exactly
    when it answers after k - 1: an exponential then binary search finds the count in about
    2 log2(count) checks (each PLD check composes the whole history, so a count of hundreds checked
    one by one would take minutes)."""
    policy, accountant, ledger = _server_ledger(analysis, composition)

    def answers_after(rounds: int) -> bool:
        charged = {name: column.copy() for name, column in ledger.items()}
        for _ in range(rounds):
            accountant.charge(charged, request, np.ones(1, dtype=bool))
        return accountant.check(charged, policy, request)[0] == Decision.ANSWERED

    if not answers_after(0):
        return 0
    low, high = 0, 1  # answers_after(low) holds
    while high < limit and answers_after(high):
        low, high = high, min(2 * high, limit)
    if high >= limit and answers_after(limit - 1):
        return limit
    while high - low > 1:  # answers_after(low), not answers_after(high)
        middle = (low + high) // 2
        low, high = (middle, high) if answers_after(middle) else (low, middle)
    return low + 1


def budget_request_for(
    privacy: PrivacyParameters, encoded_field: str, domain_size: int | None, levels: int = 0
) -> BudgetRequest:
    """What one device answering a recipe with ``privacy`` over ``encoded_field`` is charged: the
    device's own mapping (pfs_device.decision.privacy_budget_request), so the two cannot disagree.
    ``levels``: a Poplar1 walk's (privacy.heavy_hitters.walk_levels)."""
    return privacy_budget_request(privacy, fields_of(encoded_field), domain_size, levels)


def recipe_budget_request(recipe: Recipe) -> BudgetRequest:
    """What one device answering ``recipe`` is charged (the server's view, for its pre-checks)."""
    return budget_request_for(recipe.privacy, recipe.encoded_field, recipe.encoding.size, walk_levels(recipe.encoding))


def _explain_analysis_refusal(
    problems: Problems, analysis: Analysis, ledger: dict, request: BudgetRequest, planned: int
) -> None:
    enforced = analysis.enforced
    accountant = Accountant.for_policy(analysis.enforced_content)
    if request.delta > enforced.delta:
        problems.add("privacy.delta", f"Above the analysis's delta of {enforced.delta:g}.")
    elif ledger["reports_used"][0] + 1 > enforced.reports_allowed:
        problems.add(REPORTS_KEY, reports_used_up("The analysis", enforced.reports_allowed, planned))
    elif not accountant.delta_total_fits(ledger, request, analysis.enforced_content["budget"])[0]:
        spent = float(delta_used(ledger)[0]) / ATTO
        plus = " plus δ′" if accountant.composition.adds_delta_prime else ""
        problems.add(
            "privacy.delta",
            f"Exceeds the analysis's total δ of {enforced.delta_total:g}: the rounds started have spent "
            f"{spent:g}, and this round's δ of {request.delta:g}{plus} would pass it.",
        )
    else:
        left = enforced.epsilon_allowed - ledger["epsilon_used"][0] / NANO
        problems.add(
            "privacy.epsilon",
            f"Exceeds the analysis budget: {left:g} of its epsilon {enforced.epsilon_allowed:g} left "
            f"({enforced.accountant_phrase()}).",
        )


def _explain_field_refusal(
    problems: Problems, analysis: Analysis, ledger: dict, field: str | None, request: BudgetRequest, planned: int
) -> None:
    """Say which encoded field refuses and why (the first one, in the recipe's order)."""
    names = fields_of(field or "")
    for name in names:
        if _explain_one_field(problems, analysis, ledger, name, request, planned, last=name == names[-1]):
            return


def _explain_one_field(
    problems: Problems,
    analysis: Analysis,
    ledger: dict,
    field: str,
    request: BudgetRequest,
    planned: int,
    *,
    last: bool,
) -> bool:
    policy = analysis.enforced.field(field)
    epsilon0 = request.epsilon0
    if policy is None:
        problems.add(f"dataTypeContent.{field}", "The field has no budget policy in this analysis.")
    elif request.aggregator_noise and not policy.aggregator_noise:
        problems.add(
            "privacy.noise",
            f"Field {field}'s policy does not allow aggregator noise (devices would send it with no local "
            "noise); a privacy officer can allow it.",
        )
    elif epsilon0 > policy.local_epsilon:
        problems.add(
            "privacy.epsilon0",
            f"Above the local epsilon cap of {policy.local_epsilon:g} for {field} "
            f"(replacement-model epsilon0 of this mechanism: {epsilon0:g}).",
        )
    elif ledger.get(f"field:{field}:reports_used", np.zeros(1))[0] + 1 > policy.reports:
        problems.add(REPORTS_KEY, reports_used_up(f"Field {field}", policy.reports, planned))
    elif not (accountant := Accountant.for_policy(analysis.enforced_content)).delta_total_fits(
        ledger, request, analysis.enforced_content["budget"], scope=f"field:{field}:", cap=policy.delta_total
    )[0]:
        spent = float(delta_used(ledger, f"field:{field}:")[0]) / ATTO
        plus = " plus δ′" if accountant.composition.adds_delta_prime else ""
        problems.add(
            "privacy.delta",
            f"Exceeds field {field}'s total δ of {policy.delta_total:g}: the rounds started have spent {spent:g} "
            f"on it, and this round's δ of {request.delta:g}{plus} would pass it.",
        )
    else:
        left = policy.epsilon - ledger.get(f"field:{field}:epsilon_used", np.zeros(1))[0] / NANO
        if left >= request.epsilon and not last:
            return False  # this field can pay; another one refuses
        problems.add(
            "privacy.epsilon", f"Exceeds field {field}'s budget: {left:g} of its epsilon {policy.epsilon:g} left."
        )
    return True
