"""Analyst-side workflows: analyses as policy, recipe validation, and the life of a round.

Server-side checks here mirror the device's so that an analyst gets a clear 400 before anything
is sent; the devices still decide for themselves (devices.services.shard_answer).
"""

from __future__ import annotations

import csv
import io
import math
import secrets
from collections.abc import Iterable
from typing import Any

import numpy as np
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.db.models import Count, Sum
from django.utils import timezone

from aggregation.reports import rejections
from aggregation.services import (
    AggregatorNoiseEstimator,
    ClientNoiseEstimator,
    Estimator,
    collection_discard,
    collection_release,
    collection_rules_open,
)
from analyses import device_rounds
from analyses.audit_log import refusal_log
from analyses.errors import Conflict, NotAllowed, ValidationFailed
from analyses.models import Analysis, FieldPolicy, Recipe, Release, Round
from analyses.validation import Problems
from devices.budget import COMPOSITIONS, NANO, Accountant, BasicComposition, BudgetRequest, Decision, ledger_empty
from devices.encode import SCHEMAS_BY_KIND, schema_fits
from devices.models import Fleet, FleetShard, ShardRun
from devices.query import QueryRefused, verify_query
from devices.services import DeviceTask, fleet_enroll, policy_snapshot_create, shard_answer, shard_dry_run
from devices.streams import STREAMS, field_kind
from pfs_web.task_queue import enqueue
from privacy.aggregator_noise import AggregatorGaussian
from privacy.amplification import MAX_COHORT, UnreachableEpsilon, min_cohort_closed_form
from privacy.encoding import CombinationType, Encoding, content_encoding
from privacy.intervals import INTERVALS, VIEWS, present, view_rule, z_value
from privacy.mechanisms import MECHANISMS, mechanism_get, replacement_epsilon0, report_weight_bound
from privacy.ngrams import SchemaError

# ---------------------------------------------------------------- analyses as policy


def analysis_create(*, spec: Any, owner: AbstractBaseUser) -> Analysis:
    """Create an analysis (draft) from a policy-as-code spec; see docs/formats.md."""
    problems = Problems()
    if not isinstance(spec, dict):
        raise ValidationFailed({"spec": ["Must be a JSON object."]})
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
    accountant = budget.get("accountant", BasicComposition.name)
    if accountant not in COMPOSITIONS:
        problems.add("budget.accountant", f"Unknown accountant; known: {', '.join(COMPOSITIONS)}.")

    field_specs = problems.obj(spec, "fields", "fields") or {}
    policies = []
    for name, field_spec in field_specs.items():
        path = f"fields.{name}"
        if name not in fields:
            problems.add(path, "Not a field of the query class.")
        if not isinstance(field_spec, dict):
            problems.add(path, "Must be an object.")
            continue
        local = problems.number(field_spec, "localEpsilon", f"{path}.localEpsilon", positive=True)
        field_epsilon = problems.number(field_spec, "epsilon", f"{path}.epsilon", positive=True)
        field_reports = problems.integer(field_spec, "reports", f"{path}.reports", minimum=1)
        aggregator_noise = field_spec.get("aggregatorNoise", False)
        if not isinstance(aggregator_noise, bool):
            problems.add(f"{path}.aggregatorNoise", "Must be true or false.")
        policies.append((name, local, field_epsilon, field_reports, aggregator_noise is True))
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
        )
        FieldPolicy.objects.bulk_create(
            FieldPolicy(analysis=analysis, field=n, local_epsilon=le, epsilon=e, reports=r, aggregator_noise=a)
            for n, le, e, r, a in policies
        )
    return analysis


def analysis_policy(analysis: Analysis) -> dict:
    """The policy devices enforce, in the spec's format: query class, analysis and field budgets."""
    return {
        "analysis": analysis.identifier,
        "fleet": analysis.fleet.name,
        "queryClass": analysis.query_class,
        "budget": {
            "epsilon": analysis.epsilon_allowed,
            "reports": analysis.reports_allowed,
            "delta": analysis.delta,
            "accountant": analysis.accountant,
        },
        "fields": {
            p.field: {
                "localEpsilon": p.local_epsilon,
                "epsilon": p.epsilon,
                "reports": p.reports,
                "aggregatorNoise": p.aggregator_noise,
            }
            for p in analysis.field_policies.all()
        },
    }


def analysis_approve(*, analysis: Analysis, officer: AbstractBaseUser) -> Analysis:
    """The privacy officer approves: devices of the fleet receive the policy snapshot taken now."""
    if not officer.is_staff:
        raise NotAllowed("Only a privacy officer can approve an analysis.")
    with transaction.atomic():
        analysis.snapshot = policy_snapshot_create(content=analysis_policy(analysis))
        fleet_enroll(fleet=analysis.fleet, snapshot=analysis.snapshot)
        analysis.status = Analysis.Status.APPROVED
        analysis.approved_by = officer
        analysis.approved_at = timezone.now()
        analysis.save(update_fields=["snapshot", "status", "approved_by", "approved_at"])
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
        .annotate(epsilon=Sum("recipe__epsilon"), reports=Count("id"))
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


# ---------------------------------------------------------------- recipes


def recipe_validate(*, analysis: Analysis, content: Any) -> dict[str, Any]:
    """Check a recipe against the analysis's policy; the parsed recipe, or ValidationFailed per field."""
    if not isinstance(content, dict):
        raise ValidationFailed({"recipe": ["Must be a JSON object."]})
    problems = Problems()
    if not analysis.is_approved:
        problems.add("AnalysisIdentifier", "The analysis is not approved by a privacy officer yet.")
    named = content.get("AnalysisIdentifier")
    if named is not None and named != analysis.identifier:
        problems.add("AnalysisIdentifier", f"Must be {analysis.identifier!r} (the analysis run).")
    named_snapshot = content.get("policySnapshot")
    if named_snapshot is not None and (analysis.snapshot is None or named_snapshot != analysis.snapshot.digest):
        problems.add("policySnapshot", "Names another policy snapshot than the one devices hold for this analysis.")
    identifier = problems.string(content, "recipeIdentifier", "recipeIdentifier", required=False)
    if identifier and Recipe.objects.filter(analysis=analysis, identifier=identifier).exists():
        problems.add("recipeIdentifier", f"A recipe {identifier!r} already exists in this analysis.")

    cohorts = problems.string_list(content, "cohorts", "cohorts", default=[]) or []
    query_text = problems.string(content, "query", "query")
    query = None
    if query_text:
        try:
            query = verify_query(query_text, [], analysis.query_class)
        except QueryRefused as refusal:
            problems.add("query", f"{refusal}.")
    unapproved = [c for c in cohorts if c not in analysis.query_class.get("cohortFields", [])]
    if unapproved:
        problems.add("cohorts", f"Not approved as non-sensitive cohort fields: {', '.join(unapproved)}.")

    field, encoding = _data_type_content(problems, content, query)
    privacy = problems.obj(content, "privacy", "privacy") or {}
    noise = privacy.get("noise", Recipe.Noise.CLIENT)
    if noise not in Recipe.Noise.values:
        problems.add("privacy.noise", f"Must be one of {', '.join(Recipe.Noise.values)}.")
    epsilon = problems.number(privacy, "epsilon", "privacy.epsilon", positive=True)
    delta = problems.number(privacy, "delta", "privacy.delta", open_unit=True)
    sampling_rate = problems.number(privacy, "samplingRate", "privacy.samplingRate", default=1.0, unit=True)
    stated_cohort = problems.integer(privacy, "minCohort", "privacy.minCohort", minimum=1, required=False)
    if noise == Recipe.Noise.AGGREGATOR:
        mechanism, epsilon0 = "", None
        local_epsilon, min_cohort = _aggregator_noise_content(problems, privacy, epsilon, delta, stated_cohort)
    else:
        mechanism, epsilon0, local_epsilon = _client_noise_content(problems, privacy, encoding)
        min_cohort = None
    if None not in (local_epsilon, epsilon, delta) and noise in Recipe.Noise.values:
        if noise == Recipe.Noise.CLIENT:
            min_cohort = _client_min_cohort(problems, local_epsilon, epsilon, delta, stated_cohort)
        request = BudgetRequest(
            local_epsilon,
            epsilon,
            delta,
            fields_of(field) if field else (),
            # Check 3 is the minimum cohort, computed just above: an unreachable one is already refused.
            min_cohort=min_cohort or MAX_COHORT,
            aggregator_noise=noise == Recipe.Noise.AGGREGATOR,
            mechanism=mechanism or "",
            mechanism_epsilon0=epsilon0,
        )
        _check_budget(problems, analysis, field, request)
        if min_cohort and sampling_rate and min_cohort > analysis.fleet.size * sampling_rate:
            problems.add(
                "privacy.epsilon" if noise == Recipe.Noise.CLIENT else "privacy.minCohort",
                f"Needs a minimum cohort of {min_cohort:,} reports, but the fleet of "
                f"{analysis.fleet.size:,} devices at sampling rate {sampling_rate} expects "
                f"{analysis.fleet.size * sampling_rate:,.0f}.",
            )
    if problems:
        raise ValidationFailed(problems.errors)
    return {
        "identifier": identifier or f"r{timezone.now():%Y%m%d%H%M%S}-{secrets.token_hex(3)}",
        "field": field,
        "encoding": encoding,
        "cohorts": cohorts,
        "noise": noise,
        "mechanism": mechanism,
        "epsilon0": epsilon0,
        "epsilon": epsilon,
        "delta": delta,
        "sampling_rate": sampling_rate,
        "min_cohort": min_cohort,
    }


# With aggregator noise the guarantee does not depend on the cohort; a minimum cohort still keeps
# batches large enough that a few sybil devices cannot single one device out (seed 003, 4.8).
AGGREGATOR_NOISE_MIN_COHORT = 1000
# Probability that an honest device's report is rejected for its weight (seed 001, 6.1.1).
WEIGHT_FALSE_REJECTION = 1e-9


def _client_noise_content(
    problems: Problems, privacy: dict, encoding: Encoding | None
) -> tuple[str | None, float | None, float | None]:
    """(mechanism, epsilon0, its replacement-model epsilon0) of a client-noise recipe."""
    mechanism = problems.string(privacy, "mechanism", "privacy.mechanism")
    if mechanism and mechanism not in MECHANISMS:
        problems.add("privacy.mechanism", f"Unknown mechanism; known: {', '.join(sorted(MECHANISMS))}.")
    epsilon0 = problems.number(privacy, "epsilon0", "privacy.epsilon0", positive=True)
    if mechanism not in MECHANISMS or epsilon0 is None:
        return mechanism, epsilon0, None
    oracle = mechanism_get(mechanism, epsilon0)
    if encoding is not None:
        try:
            oracle.report_length(encoding.size)
        except ValueError as error:
            problems.add("privacy.mechanism", f"Cannot encode {encoding.size} buckets: {error}.")
    return mechanism, epsilon0, replacement_epsilon0(oracle)


def _client_min_cohort(
    problems: Problems, epsilon0: float, epsilon: float, delta: float, stated: int | None
) -> int | None:
    """The cohort Theorem 3.1 needs, or the recipe's own if larger; never smaller."""
    try:
        needed = min_cohort_closed_form(epsilon0, epsilon, delta)
    except UnreachableEpsilon as unreachable:
        problems.add("privacy.epsilon", f"{unreachable}.")
        return None
    if stated is not None and stated < needed:
        problems.add(
            "privacy.minCohort",
            f"Below the {needed:,} reports that epsilon0 {epsilon0:g}, epsilon {epsilon:g} and delta {delta:g} "
            "need: a recipe can raise the minimum cohort, never lower it.",
        )
        return None
    return max(needed, stated or 0)


def _aggregator_noise_content(
    problems: Problems, privacy: dict, epsilon: float | None, delta: float | None, stated: int | None
) -> tuple[float | None, int]:
    """(local epsilon, minimum cohort) of an aggregator-noise recipe: no local randomizer at all."""
    for name in ("mechanism", "epsilon0"):
        if name in privacy:
            problems.add(
                f"privacy.{name}",
                "With aggregator noise devices use no local randomizer: leave out mechanism and epsilon0.",
            )
    if epsilon is not None and delta is not None:
        try:
            AggregatorGaussian(epsilon, delta).check()
        except ValueError as error:
            problems.add("privacy.epsilon", f"{str(error).capitalize()}.")
    return math.inf, stated if stated is not None else AGGREGATOR_NOISE_MIN_COHORT


def _data_type_content(problems: Problems, content: dict, query: Any) -> tuple[str | None, Any]:
    """(the encoded field, or fields joined by commas, and their encoding) of a recipe."""
    data_types = problems.obj(content, "dataTypeContent", "dataTypeContent")
    if data_types is None:
        return None, None
    try:
        fields, encoding = content_encoding(data_types)
    except SchemaError as error:
        path = f"dataTypeContent.{error.key}" if error.key else "dataTypeContent"
        problems.add(path, f"{str(error)[:1].upper()}{str(error)[1:]}.")
        # The privacy checks still run on the fields named, so every problem is reported at once.
        named = [f for f, schema in data_types.items() if not (isinstance(schema, dict) and "structure" in schema)]
        return (",".join(named) if named else None), None
    if query is not None and set(query.fields) != set(fields):
        problems.add("dataTypeContent", f"Must encode exactly the selected field(s): {', '.join(query.fields)}.")
    for field in fields if query is not None else ():
        kind = field_kind(query.stream, field)
        if kind is not None and not schema_fits(kind, data_types[field]):
            problems.add(
                f"dataTypeContent.{field}.dataType",
                f"A {kind} field is encoded as {' or '.join(SCHEMAS_BY_KIND[kind])}.",
            )
            encoding = None
    return ",".join(fields), encoding


def fields_of(encoded_field: str) -> tuple[str, ...]:
    """The fields a recipe encodes: one, or several joined by a CombinationType ("age,ngrams")."""
    return tuple(encoded_field.split(","))


def _check_budget(problems: Problems, analysis: Analysis, field: str | None, request: BudgetRequest) -> None:
    """The device's own checks 1 and 2, run on the server's view: one device that answered every round started."""
    policy, accountant, ledger = _server_ledger(analysis)
    _explain_decision(problems, analysis, ledger, field, request, accountant.check(ledger, policy, request)[0])


def _server_ledger(analysis: Analysis) -> tuple[dict, Accountant, dict]:
    """The policy, its accountant, and the ledger of one device that answered every round started."""
    policy = analysis_policy(analysis)
    accountant = Accountant.for_policy(policy)
    ledger = ledger_empty(1)
    everyone = np.ones(1, dtype=bool)
    for recipe in Recipe.objects.filter(rounds__isnull=False, analysis=analysis).distinct():
        for _ in recipe.rounds.all():
            accountant.charge(ledger, recipe_budget_request(recipe), everyone)
    return policy, accountant, ledger


def _explain_decision(
    problems: Problems, analysis: Analysis, ledger: dict, field: str | None, request: BudgetRequest, decision: int
) -> None:
    decision = Decision(int(decision))
    if decision == Decision.ANALYSIS_BUDGET:
        _explain_analysis_refusal(problems, analysis, ledger, request.epsilon, request.delta)
    elif decision == Decision.FIELD_BUDGET:
        _explain_field_refusal(problems, analysis, ledger, field, request)


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
            _explain_decision(problems, analysis, ledger, field, request, decision)
            return index, [m for messages in problems.errors.values() for m in messages] or [Decision(decision).label]
        accountant.charge(ledger, request, everyone)
    return None


def parsed_budget_request(parsed: dict[str, Any]) -> BudgetRequest:
    """What one device answering a recipe (as ``recipe_validate`` parsed it) is charged."""
    aggregator_noise = parsed["noise"] == Recipe.Noise.AGGREGATOR
    epsilon0 = (
        math.inf if aggregator_noise else replacement_epsilon0(mechanism_get(parsed["mechanism"], parsed["epsilon0"]))
    )
    return BudgetRequest(
        epsilon0,
        parsed["epsilon"],
        parsed["delta"],
        fields_of(parsed["field"]),
        parsed["min_cohort"],
        aggregator_noise=aggregator_noise,
        mechanism=parsed["mechanism"],
        mechanism_epsilon0=parsed["epsilon0"],
    )


def recipe_budget_request(recipe: Recipe) -> BudgetRequest:
    """What one device answering ``recipe`` is charged (the server's view, for its pre-checks)."""
    return parsed_budget_request(
        {
            "field": recipe.encoded_field,
            **{k: getattr(recipe, k) for k in ("noise", "mechanism", "epsilon0", "epsilon", "delta", "min_cohort")},
        }
    )


def _explain_analysis_refusal(
    problems: Problems, analysis: Analysis, ledger: dict, epsilon: float, delta: float
) -> None:
    if delta > analysis.delta:
        problems.add("privacy.delta", f"Above the analysis's delta of {analysis.delta:g}.")
    elif ledger["reports_used"][0] + 1 > analysis.reports_allowed:
        problems.add("privacy.epsilon", f"The analysis has used all {analysis.reports_allowed} of its reports.")
    else:
        left = analysis.epsilon_allowed - ledger["epsilon_used"][0] / NANO
        problems.add(
            "privacy.epsilon",
            f"Exceeds the analysis budget: {left:g} of its epsilon {analysis.epsilon_allowed:g} left "
            f"({analysis.get_accountant_display().lower()}).",
        )


def _explain_field_refusal(
    problems: Problems, analysis: Analysis, ledger: dict, field: str | None, request: BudgetRequest
) -> None:
    """Say which encoded field refuses and why (the first one, in the recipe's order)."""
    names = fields_of(field or "")
    for name in names:
        if _explain_one_field(problems, analysis, ledger, name, request, last=name == names[-1]):
            return


def _explain_one_field(
    problems: Problems, analysis: Analysis, ledger: dict, field: str, request: BudgetRequest, *, last: bool
) -> bool:
    policy = analysis.field_policies.filter(field=field).first()
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
        problems.add("privacy.epsilon", f"Field {field} has used all {policy.reports} of its reports.")
    else:
        left = policy.epsilon - ledger.get(f"field:{field}:epsilon_used", np.zeros(1))[0] / NANO
        if left >= request.epsilon and not last:
            return False  # this field can pay; another one refuses
        problems.add(
            "privacy.epsilon", f"Exceeds field {field}'s budget: {left:g} of its epsilon {policy.epsilon:g} left."
        )
    return True


def recipe_create(*, analysis: Analysis, content: Any, user: AbstractBaseUser) -> Recipe:
    try:
        parsed = recipe_validate(analysis=analysis, content=content)
    except ValidationFailed as invalid:
        refusal_log(user=user, action="recipe.create", target=analysis.identifier, reasons=invalid.errors)
        raise
    recipe = _recipe_parsed(analysis, content, parsed, user)
    recipe.save()
    return recipe


def _recipe_parsed(analysis: Analysis, content: dict, parsed: dict[str, Any], user: AbstractBaseUser | None) -> Recipe:
    """The (unsaved) recipe ``recipe_validate`` parsed from ``content``."""
    return Recipe(
        analysis=analysis,
        identifier=parsed["identifier"],
        content=content,
        encoded_field=parsed["field"],
        noise=parsed["noise"],
        mechanism=parsed["mechanism"],
        epsilon0=parsed["epsilon0"],
        epsilon=parsed["epsilon"],
        delta=parsed["delta"],
        sampling_rate=parsed["sampling_rate"],
        min_cohort=parsed["min_cohort"],
        created_by=user,
    )


def recipe_encoding(recipe: Recipe) -> Encoding | CombinationType:
    return content_encoding(recipe.content["dataTypeContent"])[1]


# ---------------------------------------------------------------- rounds


class ShardsPending(RuntimeError):
    """Aggregation was asked for before every shard answered (a redelivered task can fire a chord early)."""


def round_start(*, recipe: Recipe, user: AbstractBaseUser) -> Round:
    """Queue a round of ``recipe``; its tasks are sent when the transaction commits."""
    from analyses.tasks import dispatch_round  # tasks import services: import here, not at top

    if not recipe.analysis.is_approved:
        refusal_log(user=user, action="round.start", target=recipe.analysis.identifier, reasons="not approved")
        raise Conflict("The analysis is not approved.")
    with transaction.atomic():
        round_ = Round.objects.create(recipe=recipe, seed=secrets.randbits(63), created_by=user)
        _collection_rules_open(round_)
        device_rounds.window_open(round_)  # a fleet of real devices fetches the task over HTTP
        enqueue(dispatch_round, round_.pk)
    return round_


def _collection_rules_open(round_: Round) -> None:
    """Configure both aggregators with the round's public batch rules."""
    recipe = round_.recipe
    size = recipe_encoding(recipe).size
    if recipe.aggregator_noise:
        length, weight_bound = size, 1
        noise = AggregatorGaussian(recipe.epsilon, recipe.delta)
    else:
        oracle = mechanism_get(recipe.mechanism, recipe.epsilon0)
        length, noise = oracle.report_length(size), None
        weight_bound = report_weight_bound(oracle, size, WEIGHT_FALSE_REJECTION)
    collection_rules_open(
        key=round_.task_key, length=length, min_cohort=recipe.min_cohort, weight_bound=weight_bound, noise=noise
    )


def recipe_estimator(recipe: Recipe) -> Estimator:
    size = recipe_encoding(recipe).size
    if recipe.aggregator_noise:
        return AggregatorNoiseEstimator(epsilon=recipe.epsilon, delta=recipe.delta, domain_size=size)
    return ClientNoiseEstimator(mechanism=recipe.mechanism, epsilon0=recipe.epsilon0, domain_size=size)


def round_create_and_start(*, analysis: Analysis, content: Any, user: AbstractBaseUser) -> Round:
    """Validate and store a recipe and start its round, all or nothing."""
    with transaction.atomic():
        recipe = recipe_create(analysis=analysis, content=content, user=user)
        return round_start(recipe=recipe, user=user)


def device_task(round_: Round) -> DeviceTask:
    return recipe_device_task(round_.recipe, task_key=round_.task_key, seed=round_.seed)


def recipe_device_task(recipe: Recipe, *, task_key: str, seed: int) -> DeviceTask:
    """What the devices are sent for ``recipe``: the recipe as the device sees it."""
    return DeviceTask(
        task_key=task_key,
        analysis=recipe.analysis.identifier,
        snapshot_digest=recipe.analysis.snapshot.digest,
        query=recipe.content["query"],
        cohorts=tuple(recipe.content.get("cohorts", [])),
        encoded_field=recipe.encoded_field,
        data_types=recipe.content["dataTypeContent"],
        noise=recipe.noise,
        mechanism=recipe.mechanism,
        epsilon0=recipe.epsilon0,
        epsilon=recipe.epsilon,
        delta=recipe.delta,
        sampling_rate=recipe.sampling_rate,
        min_cohort=recipe.min_cohort,
        seed=seed,
    )


def round_dry_run(*, analysis: Analysis, content: Any) -> dict[str, Any]:
    """How many devices would answer the recipe, and why the others would not; nothing is spent.

    The recipe is validated as for a real round (a bad one raises ValidationFailed); then every
    shard runs the devices' own decision on a task that is never sent. Devices that are not
    sampled count apart from refusals.
    """
    parsed = recipe_validate(analysis=analysis, content=content)
    recipe = _recipe_parsed(analysis, content, parsed, None)
    task = recipe_device_task(recipe, task_key=f"{analysis.identifier}/dry-run", seed=secrets.randbits(63))
    decisions: dict[str, int] = {}
    for shard_id in FleetShard.objects.filter(fleet=analysis.fleet).values_list("pk", flat=True):
        for reason, count in shard_dry_run(shard_id=shard_id, task=task).items():
            decisions[reason] = decisions.get(reason, 0) + count
    answering = decisions.pop(Decision.ANSWERED.label, 0)
    not_sampled = decisions.pop(Decision.NOT_SAMPLED.label, 0)
    return {
        "devices": analysis.fleet.size,
        "would_answer": answering,
        "not_sampled": not_sampled,
        "would_refuse": decisions,
        "min_cohort": parsed["min_cohort"],
        "meets_min_cohort": answering >= parsed["min_cohort"],
    }


def round_dispatch(*, round_id: int) -> list[int]:
    """Mark the round running and return the shard ids to run; [] if it is no longer queued."""
    with transaction.atomic():
        round_ = Round.objects.select_for_update().select_related("recipe__analysis").filter(pk=round_id).first()
        if round_ is None:
            return []
        shard_ids = list(
            FleetShard.objects.filter(fleet=round_.recipe.analysis.fleet).order_by("index").values_list("pk", flat=True)
        )
        if round_.status != Round.Status.QUEUED:
            return shard_ids if round_.status == Round.Status.RUNNING else []
        round_.status = Round.Status.RUNNING
        round_.shards_total = len(shard_ids)
        round_.started_at = timezone.now()
        round_.save(update_fields=["status", "shards_total", "started_at"])
    return shard_ids


def round_shard_run(*, round_id: int, shard_id: int) -> None:
    round_ = Round.objects.select_related("recipe__analysis__snapshot").filter(pk=round_id).first()
    if round_ is None or round_.status != Round.Status.RUNNING:
        return  # deleted, finished or failed meanwhile: a late or redelivered task does nothing
    shard_answer(shard_id=shard_id, task=device_task(round_))


def round_aggregate(*, round_id: int) -> Round | None:
    """Aggregate every batch with both aggregators, debias, and store the release. Idempotent."""
    with transaction.atomic():
        round_ = Round.objects.select_for_update().select_related("recipe__analysis").filter(pk=round_id).first()
        if round_ is None or round_.status != Round.Status.RUNNING:
            return round_
        progress = round_progress(round_)
        if progress["shards_done"] < round_.shards_total:
            raise ShardsPending(f"{progress['shards_done']} of {round_.shards_total} shards answered")
        recipe = round_.recipe
        encoding = recipe_encoding(recipe)
        batches = collection_release(collection_key=round_.task_key, estimator=recipe_estimator(recipe))
        Release.objects.create(round=round_, content=_release_content(round_, encoding, batches, progress))
        round_.status = Round.Status.RELEASED
        round_.finished_at = timezone.now()
        round_.save(update_fields=["status", "finished_at"])
        _wake_adaptive_runs(round_)
    return round_


def round_fail(*, round_id: int, error: str) -> None:
    with transaction.atomic():
        failed = (
            Round.objects.filter(pk=round_id)
            .exclude(status__in=Round.TERMINAL)
            .update(status=Round.Status.FAILED, error=error[:2000], finished_at=timezone.now())
        )
        if failed:
            round_ = Round.objects.select_related("recipe__analysis").get(pk=round_id)
            # A failed round is never released: what its collection holds (shares, reports still
            # waiting for verification) would only be kept for nothing.
            collection_discard(collection_key=round_.task_key)
            _wake_adaptive_runs(round_)


def round_cancel(*, round_: Round, user: AbstractBaseUser) -> Round:
    """Stop a round that has not finished: nothing is released and its stored shares are dropped.

    Shards that have not run never do (they check the status first); a shard already answering
    finishes, and its devices' budget stays spent, because they did send reports. The collection
    is closed, so no later report lands in it. A finished round cannot be cancelled (NotAllowed).
    """
    with transaction.atomic():
        locked = Round.objects.select_for_update().get(pk=round_.pk)
        if locked.is_finished:
            raise Conflict(f"Round {locked.pk} is already {locked.get_status_display().lower()}.")
        locked.status = Round.Status.CANCELLED
        locked.error = f"cancelled by {user.get_username()}"
        locked.finished_at = timezone.now()
        locked.save(update_fields=["status", "error", "finished_at"])
        collection_discard(collection_key=locked.task_key)
        _wake_adaptive_runs(locked)
    return locked


def _wake_adaptive_runs(round_: Round) -> None:
    from analyses.adaptive import adaptive_round_finished  # adaptive builds on this module

    adaptive_round_finished(round_)


def round_progress(round_: Round) -> dict[str, Any]:
    """Shards done and devices answered or refused by reason, derived from the shards' own records."""
    if device_rounds.is_device_round(round_):
        return device_rounds.round_progress_devices(round_)  # no shards: what the aggregators hold
    runs = ShardRun.objects.filter(task_key=round_.task_key)
    outcomes: dict[str, int] = {}
    answered = 0
    for run in runs.only("answered", "outcomes"):
        answered += run.answered
        for reason, count in run.outcomes.items():
            outcomes[reason] = outcomes.get(reason, 0) + count
    done = runs.count()
    elapsed, eta = _round_timing(round_, done)
    return {
        "status": round_.status,
        "shards_total": round_.shards_total,
        "shards_done": done,
        "devices_answered": answered,
        "devices_not_answering": outcomes,
        "error": round_.error,
        "elapsed_seconds": elapsed,
        "eta_seconds": eta,
    }


def _round_timing(round_: Round, shards_done: int) -> tuple[float | None, float | None]:
    """(seconds since the round started, or until it finished; seconds left if shards keep their pace).

    Shards run in any order at about the same speed, so the time left is the elapsed time scaled
    by the shards remaining over those done. Before a shard is done (or once the round ended)
    there is no estimate: None.
    """
    if round_.started_at is None:
        return None, None
    elapsed = max(((round_.finished_at or timezone.now()) - round_.started_at).total_seconds(), 0.0)
    if round_.is_finished or not shards_done:
        return elapsed, None
    return elapsed, elapsed * max(round_.shards_total - shards_done, 0) / shards_done


def _release_content(round_: Round, encoding: Encoding, batches: list, progress: dict) -> dict[str, Any]:
    recipe = round_.recipe
    released = [b for b in batches if not b.suppressed]
    return {
        "analysis": recipe.analysis.identifier,
        "recipe": recipe.identifier,
        "round": round_.pk,
        "field": recipe.encoded_field,
        "buckets": encoding.labels,
        # A joint histogram's buckets, row-major over its fields (the last varies fastest): a heatmap.
        "joint": (
            {"fields": list(encoding.fields), "labels": [e.labels for _, e in encoding.parts]}
            if isinstance(encoding, CombinationType)
            else None
        ),
        "noise": recipe.noise,
        "aggregator_sigma": AggregatorGaussian(recipe.epsilon, recipe.delta).sigma if recipe.aggregator_noise else None,
        "mechanism": recipe.mechanism,
        "epsilon0": recipe.epsilon0,
        "epsilon": recipe.epsilon,
        "delta": recipe.delta,
        "sampling_rate": recipe.sampling_rate,
        "min_cohort": recipe.min_cohort,
        "reports": sum(b.reports for b in released),
        # Each answering device spent epsilon once; with no released batch nothing was learned,
        # but the devices were charged all the same.
        "epsilon_spent": recipe.epsilon if progress["devices_answered"] else 0.0,
        "refusals": progress["devices_not_answering"],
        "rejected_reports": rejections(round_.task_key),
        "batches": [b.as_json() for b in batches],
    }


class ReleaseView:
    """How a release is shown: its intervals and its view of the estimates (privacy.intervals)."""

    LEVEL = 0.95

    def __init__(self, *, intervals: str = "per-bucket", view: str = "raw") -> None:
        problems = Problems()
        if intervals not in INTERVALS:
            problems.add("intervals", f"Must be one of {', '.join(INTERVALS)}.")
        if view not in VIEWS:
            problems.add("view", f"Must be one of {', '.join(VIEWS)}.")
        if problems:
            raise ValidationFailed(problems.errors)
        self.intervals, self.view = intervals, view

    def batches(self, release: Release) -> list[dict[str, Any]]:
        """Each batch with presented estimates and interval bounds per bucket."""
        batches = release.content["batches"]
        cells = sum(len(b["estimates"]) for b in batches if not b["suppressed"])
        z = z_value(level=self.LEVEL, cells=cells, intervals=self.intervals)
        shown = []
        for batch in batches:
            if batch["suppressed"]:
                shown.append(batch)
                continue
            presented = present(batch["estimates"], batch["standard_errors"], z=z, view=self.view)
            shown.append(
                {
                    **batch,
                    "estimates": presented.estimates.tolist(),
                    "ci_low": presented.ci_low.tolist(),
                    "ci_high": presented.ci_high.tolist(),
                    "raw_estimates": batch["estimates"],
                }
            )
        return shown

    def describe(self) -> dict[str, Any]:
        kind = (
            "simultaneous (Bonferroni over every released bucket)" if self.intervals == "simultaneous" else "per bucket"
        )
        return {
            "intervals": self.intervals,
            "view": self.view,
            "interval": f"{self.LEVEL:.0%} {kind}, normal approximation: estimate ± z standard errors",
            "rule": view_rule(self.view),
        }


def release_table(release: Release, view: ReleaseView | None = None) -> list[dict[str, Any]]:
    """Rows of (cohort, bucket, estimate, error, interval) for tables, CSV and the CLI."""
    rows = []
    for batch in (view or ReleaseView()).batches(release):
        if batch["suppressed"]:
            continue
        for i, label in enumerate(release.content["buckets"]):
            rows.append(
                {
                    "cohort": batch["cohort"],
                    "bucket": label,
                    "estimate": batch["estimates"][i],
                    "standard_error": batch["standard_errors"][i],
                    "ci_low": batch["ci_low"][i],
                    "ci_high": batch["ci_high"][i],
                }
            )
    return rows


RELEASE_CSV_COLUMNS = ("cohort", "bucket", "estimate", "standard_error", "ci_low", "ci_high")


def release_as_csv(release: Release, view: ReleaseView | None = None) -> str:
    """The release table (release_table) as CSV text with a header row, for the dashboard and the API."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=RELEASE_CSV_COLUMNS)
    writer.writeheader()
    writer.writerows(release_table(release, view))
    return out.getvalue()


def release_as_json(release: Release, view: ReleaseView | None = None) -> dict[str, Any]:
    """The release in the CLI's and API's shape: per bucket of each batch, and the round's cost."""
    view = view or ReleaseView()
    content = release.content
    batches, negative = [], 0
    for batch in view.batches(release):
        entry = {k: batch[k] for k in ("cohort", "reports", "min_cohort", "suppressed")}
        if batch["suppressed"]:
            entry["reason"] = batch["reason"]
        else:
            negative += sum(1 for x in batch["raw_estimates"] if x < 0)
            entry["buckets"] = [
                {
                    "label": label,
                    "estimate": batch["estimates"][i],
                    "standard_error": batch["standard_errors"][i],
                    "ci95": [batch["ci_low"][i], batch["ci_high"][i]],
                }
                for i, label in enumerate(content["buckets"])
            ]
        batches.append(entry)
    summary = {
        k: content[k]
        for k in (
            "analysis",
            "recipe",
            "round",
            "field",
            "noise",
            "aggregator_sigma",
            "mechanism",
            "epsilon0",
            "epsilon",
            "delta",
            "sampling_rate",
            "min_cohort",
            "reports",
            "epsilon_spent",
            "refusals",
            "rejected_reports",
            "joint",
        )
        if k in content  # releases stored before a key existed lack it
    }
    summary.update(view.describe())
    summary["notes"] = _release_notes(negative, view, content)
    released = [b for b in batches if not b["suppressed"]]
    # With no cohorts there is one batch: its buckets stand at the top level too.
    if len(batches) == 1 and released:
        summary["buckets"] = released[0]["buckets"]
    return {**summary, "batches": batches}


def _release_notes(negative: int, view: ReleaseView, content: dict) -> list[str]:
    notes = []
    if content.get("noise") == Recipe.Noise.AGGREGATOR:
        sigma = content["aggregator_sigma"]
        notes.append(
            f"Aggregator noise: devices sent their values with no local noise, secret-shared; the leader and "
            f"the helper each added discrete Gaussian noise with sigma {sigma:.4f} (analytic calibration for "
            f"epsilon {content['epsilon']:g}, delta {content['delta']:g}, L2 sensitivity sqrt 2). The guarantee "
            f"holds if at least one aggregator is honest; the standard error sigma * sqrt 2 = "
            f"{sigma * math.sqrt(2):.4f} counts both noises."
        )
    if not negative:
        return notes
    if view.view == "raw":
        notes.append(
            f"{negative} bucket estimate(s) are negative: the true counts there are small and the "
            "noise is larger. The estimates are unbiased, so they are shown as they are; choose the "
            "'clipped' or 'thresholded' view to hide them (a post-processing, it costs no privacy)."
        )
    else:
        notes.append(f"{negative} negative estimate(s) are shown under the '{view.view}' rule: {view_rule(view.view)}.")
    return notes
