"""Analyses as policy: create from a spec, the policy devices enforce, approval, and what was spent."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.db.models import Count, FloatField, Sum
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Cast
from django.utils import timezone

from analyses.models import Analysis, FieldPolicy, PolicyApproval, PolicyEdit, Round
from analyses.rules.enforced_policy import delta_total_floor, delta_total_too_small
from analyses.rules.validation import Problems
from devices.models import Fleet
from devices.services import fleet_enroll, policy_snapshot_create
from pfs_base.errors import NotAllowed, ValidationFailed
from pfs_device.budget import COMPOSITIONS, DEFAULT_ACCOUNTANT
from pfs_device.decision import fields_of
from pfs_device.streams import STREAMS, field_kind
from privacy.limits import MAX_BUCKETS
from privacy.limits import NUMBERS as LIMITS


def analysis_create(*, spec: Any, owner: AbstractBaseUser) -> Analysis:
    """Create an analysis (draft) from a policy-as-code spec; see docs/formats.md."""
    problems = Problems()
    if not isinstance(spec, dict):
        raise ValidationFailed({"spec": ["Must be a JSON object."]})
    problems.only(spec, ("identifier", "title", "fleet", "queryClass", "budget", "fields"))
    problems.only(spec.get("queryClass"), ("stream", "fields", "cohortFields"), "queryClass.")
    problems.only(
        spec.get("budget"),
        ("epsilon", "reports", "delta", "deltaTotal", "accountant", "minCohort", "maxBuckets"),
        "budget.",
    )
    identifier = problems.string(spec, "identifier", "identifier")
    if identifier and Analysis.objects.filter(identifier=identifier).exists():
        problems.add("identifier", f"An analysis {identifier!r} already exists.")
    fleet_name = problems.string(spec, "fleet", "fleet")
    fleet = Fleet.objects.filter(name=fleet_name).first() if fleet_name else None
    if fleet_name and fleet is None:
        problems.add("fleet", f"No fleet named {fleet_name!r}.")

    query_class = problems.obj(spec, "queryClass", "queryClass") or {}
    stream = problems.string(query_class, "stream", "queryClass.stream")
    if stream and stream not in STREAMS:
        problems.add("queryClass.stream", f"Unknown stream; known: {', '.join(STREAMS)}.")
    fields = problems.string_list(query_class, "fields", "queryClass.fields") or []
    cohort_fields = problems.string_list(query_class, "cohortFields", "queryClass.cohortFields", default=[]) or []
    if stream in STREAMS:
        for name in (*fields, *cohort_fields):
            if field_kind(stream, name) is None:
                problems.add("queryClass.fields", f"Stream {stream} has no field {name!r}.")

    budget = problems.obj(spec, "budget", "budget") or {}
    epsilon = problems.number(budget, "epsilon", "budget.epsilon", positive=True)
    reports = problems.integer(budget, "reports", "budget.reports", minimum=1)
    delta = problems.number(budget, "delta", "budget.delta", open_unit=True)
    min_cohort_floor = problems.integer(
        budget, "minCohort", "budget.minCohort", minimum=1, required=False, limit=LIMITS["minCohort"]
    )
    max_buckets = problems.integer(budget, "maxBuckets", "budget.maxBuckets", minimum=2, required=False)
    if max_buckets is not None and max_buckets > MAX_BUCKETS:
        problems.add("budget.maxBuckets", f"At most {MAX_BUCKETS:,}, the limit of every analysis (privacy.limits).")
    accountant = budget.get("accountant", DEFAULT_ACCOUNTANT)
    if accountant not in COMPOSITIONS:
        problems.add("budget.accountant", f"Unknown accountant; known: {', '.join(COMPOSITIONS)}.")
    delta_total = (
        problems.number(budget, "deltaTotal", "budget.deltaTotal", open_unit=True)
        if budget.get("deltaTotal") is not None
        else None
    )
    floor = delta_total_floor(delta, accountant)
    if delta_total is not None and floor is not None and delta_total < floor:
        problems.add("budget.deltaTotal", delta_total_too_small(floor))

    field_specs = problems.obj(spec, "fields", "fields") or {}
    policies = []
    for name, field_spec in field_specs.items():
        path = f"fields.{name}"
        if name not in fields:
            problems.add(path, "Not a field of the query class.")
        if not isinstance(field_spec, dict):
            problems.add(path, "Must be an object.")
            continue
        problems.only(field_spec, ("localEpsilon", "epsilon", "reports", "aggregatorNoise", "deltaTotal"), f"{path}.")
        local = problems.number(field_spec, "localEpsilon", f"{path}.localEpsilon", positive=True)
        field_epsilon = problems.number(field_spec, "epsilon", f"{path}.epsilon", positive=True)
        field_reports = problems.integer(field_spec, "reports", f"{path}.reports", minimum=1)
        aggregator_noise = field_spec.get("aggregatorNoise", False)
        if not isinstance(aggregator_noise, bool):
            problems.add(f"{path}.aggregatorNoise", "Must be true or false.")
        field_delta_total = (
            problems.number(field_spec, "deltaTotal", f"{path}.deltaTotal", open_unit=True)
            if field_spec.get("deltaTotal") is not None
            else None
        )
        if field_delta_total is not None and floor is not None and field_delta_total < floor:
            problems.add(f"{path}.deltaTotal", delta_total_too_small(floor))
        policies.append((name, local, field_epsilon, field_reports, aggregator_noise is True, field_delta_total))
    if problems:
        raise ValidationFailed(problems.errors)

    with transaction.atomic():
        analysis = Analysis.objects.create(
            identifier=identifier,
            title=spec.get("title", "") if isinstance(spec.get("title"), str) else "",
            fleet=fleet,
            owner=owner,
            query_class={"stream": stream, "fields": fields, "cohortFields": cohort_fields},
            epsilon_allowed=epsilon,
            reports_allowed=reports,
            delta=delta,
            accountant=accountant,
            min_cohort_floor=min_cohort_floor,
            max_buckets=max_buckets,
            delta_total=delta_total,
        )
        FieldPolicy.objects.bulk_create(
            FieldPolicy(
                analysis=analysis, field=n, local_epsilon=le, epsilon=e, reports=r, aggregator_noise=a, delta_total=d
            )
            for n, le, e, r, a, d in policies
        )
    return analysis


def analysis_lock(analysis: Analysis) -> Analysis:
    """Serialise every budget decision on ``analysis`` until the transaction ends.

    Checking a budget and starting the round it allows must be one step: two concurrent starts
    would each see the budget before the other's round. PostgreSQL locks the analysis's row;
    SQLite's transactions take the database's write lock when they begin (settings), which
    serialises them already.
    """
    return Analysis.objects.select_for_update().get(pk=analysis.pk)


OWN_CHANGE_REFUSAL = (
    "You edited this change, so you cannot approve it: another privacy officer must. "
    "You can reject it, which discards it."
)


def analysis_approve(*, analysis: Analysis, officer: AbstractBaseUser) -> Analysis:
    """The privacy officer approves: devices of the fleet receive the policy snapshot taken now.

    Four eyes: an officer who edited any of the pending changes (PolicyEdit) cannot approve them.
    """
    if not officer.is_staff:
        raise NotAllowed("Only a privacy officer can approve an analysis.")
    with transaction.atomic():
        analysis_lock(analysis)  # an edit saved meanwhile waits: what is approved is what was checked
        pending = PolicyEdit.objects.filter(analysis=analysis, outcome=PolicyEdit.Outcome.PENDING)
        if pending.filter(edited_by=officer).exists():
            raise NotAllowed(OWN_CHANGE_REFUSAL)
        pending.update(outcome=PolicyEdit.Outcome.APPROVED)
        analysis.snapshot = policy_snapshot_create(content=analysis.edited_policy())
        fleet_enroll(fleet=analysis.fleet, snapshot=analysis.snapshot)
        analysis.status = Analysis.Status.APPROVED
        analysis.approved_by = officer
        analysis.approved_at = timezone.now()
        analysis.save(update_fields=["snapshot", "status", "approved_by", "approved_at"])
        PolicyApproval.objects.create(
            analysis=analysis, snapshot=analysis.snapshot, approved_by=officer, approved_at=analysis.approved_at
        )
    return analysis


def analysis_spent(analysis: Analysis) -> dict[str, Any]:
    """The server's conservative view of budget spent: every round started counts in full."""
    return analyses_spent([analysis])[analysis.pk]


def analyses_spent(analyses: Iterable[Analysis]) -> dict[int, dict[str, Any]]:
    """analysis_spent of each analysis, by id, in one query (the list pages show many)."""
    spent: dict[int, dict[str, Any]] = {a.pk: {"epsilon": 0.0, "reports": 0, "fields": {}} for a in analyses}
    by_encoding = (
        Round.objects.filter(recipe__analysis__in=list(spent))
        .values("recipe__analysis_id", "recipe__encoded_field")
        # Each round's epsilon is a key of its recipe's privacy column (JSON): summed in the database all the same.
        .annotate(epsilon=Sum(Cast(KeyTextTransform("epsilon", "recipe__privacy"), FloatField())), reports=Count("id"))
        .order_by("recipe__analysis_id", "recipe__encoded_field")
    )
    for row in by_encoding:
        total = spent[row["recipe__analysis_id"]]
        total["epsilon"] += row["epsilon"]
        total["reports"] += row["reports"]
        # A joint histogram charges every field it reads.
        for field in fields_of(row["recipe__encoded_field"]):
            used = total["fields"].setdefault(field, {"epsilon": 0.0, "reports": 0})
            used["epsilon"] += row["epsilon"]
            used["reports"] += row["reports"]
    return spent
