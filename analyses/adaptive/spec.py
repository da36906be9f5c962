"""An adaptive run's spec: validation, the budget plan checked against the policy, and the recipe
of each round (the first, the next ones, the static baseline's)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from django.utils import timezone

from analyses.models import AdaptiveRun, Analysis
from analyses.rules.validation import Problems, sentence
from analyses.services.budget import budget_plan_refusal, budget_request_for
from analyses.services.recipes import recipe_validate
from pfs_base.errors import ValidationFailed
from pfs_device.streams import field_kind
from privacy.encoding import encoding_from_json
from privacy.heavy_hitters import DEFAULT_ALPHABET, MAX_BITS, Poplar1WordsType, walk_levels
from privacy.ngrams import UNITS, HashedNgramType, PrefixTreeType, SchemaError
from privacy.parameters import PrivacyParameters

# The static baseline's sketch when the spec does not say: 4 rows of 4,096 cells (Apple's
# count-mean sketch shape, seed 004, at a size comparable to a discovery round).
BASELINE_ROWS, BASELINE_COLUMNS = 4, 4096


# An adaptive spec's keys (docs/adaptive.md); any other is refused. Its privacy object goes into
# every round's recipe, where recipe_validate refuses unknown keys.
SPEC_KEYS = (
    "analysis",
    "kind",
    "field",
    "cohorts",
    "maxLength",
    "maxRounds",
    "privacy",
    "threshold",
    "unit",
    "vocabulary",
    "boundaries",
    "minWidth",
    "baseline",
    "confirmSmallCohorts",
    "alphabet",
    "comparison",
)
# A heavy-hitters walk's keys (privacy.heavy_hitters): one round of Poplar1 reports, walked by the
# aggregators a byte a level; its privacy is the whole walk's, every level composed within it.
HEAVY_HITTERS_KEYS = (
    "analysis",
    "kind",
    "field",
    "maxLength",
    "alphabet",
    "privacy",
    "threshold",
    "comparison",
    "confirmSmallCohorts",
)
HEAVY_HITTERS_PRIVACY = ("epsilon", "delta", "samplingRate", "minCohort")


@dataclass(frozen=True)
class Spec:
    analysis: Analysis
    kind: str
    field: str
    rounds: int  # planned rounds: maxLength, or maxRounds for refinement
    plan: list[dict[str, float]]
    privacy: dict[str, Any]
    z_score: float | None
    max_per_level: int | None
    cohorts: list[str]
    raw: dict[str, Any]


def adaptive_validate(*, spec: Any) -> Spec:
    """Check an adaptive analysis spec: its shape, its first round, and its whole budget plan."""
    if not isinstance(spec, dict):
        raise ValidationFailed({"spec": ["Must be a JSON object."]})
    problems = Problems()
    problems.only(spec, SPEC_KEYS)
    problems.only(spec.get("threshold"), ("zScore", "maxPerLevel", "maxBuckets"), "threshold.")
    identifier = problems.string(spec, "analysis", "analysis")
    analysis = Analysis.objects.filter(identifier=identifier).select_related("fleet").first() if identifier else None
    if identifier and analysis is None:
        problems.add("analysis", f"No analysis {identifier!r}.")
    kind = spec.get("kind")
    if kind not in AdaptiveRun.Kind.values:
        problems.add("kind", f"Must be one of {', '.join(AdaptiveRun.Kind.values)}.")
    field = problems.string(spec, "field", "field")
    if kind == AdaptiveRun.Kind.HEAVY_HITTERS:
        return _heavy_hitters_validate(problems, spec, analysis, field)
    if "alphabet" in spec:
        problems.add("alphabet", "Only a heavy-hitters walk has an alphabet; n-gram discovery has a vocabulary.")
    cohorts = problems.string_list(spec, "cohorts", "cohorts", default=[]) or []
    rounds_key = "maxLength" if kind == AdaptiveRun.Kind.NGRAM_DISCOVERY else "maxRounds"
    rounds = problems.integer(spec, rounds_key, rounds_key, minimum=1)
    if isinstance(spec.get(rounds_key), int) and spec[rounds_key] > 12:
        problems.add(rounds_key, "At most 12 rounds.")
        rounds = None
    privacy = problems.obj(spec, "privacy", "privacy") or {}
    plan = _budget_plan(problems, privacy, rounds)
    threshold = problems.obj(spec, "threshold", "threshold") or {}
    z_score = max_per_level = None
    if "zScore" in threshold:
        z_score = problems.number(threshold, "zScore", "threshold.zScore", positive=True)
    per_level_key = "maxPerLevel" if kind == AdaptiveRun.Kind.NGRAM_DISCOVERY else "maxBuckets"
    if per_level_key in threshold:
        max_per_level = problems.integer(threshold, per_level_key, f"threshold.{per_level_key}", minimum=1)
    if isinstance(spec.get("threshold"), dict) and not ({"zScore", per_level_key} & set(threshold)):
        problems.add("threshold", f"Give zScore (> 0), {per_level_key} (>= 1), or both.")
    if kind == AdaptiveRun.Kind.NGRAM_DISCOVERY:
        _check_ngram_spec(problems, spec)
    elif kind == AdaptiveRun.Kind.BUCKET_REFINEMENT:
        _check_refinement_spec(problems, spec)
    if analysis is not None and field:
        kind_of_field = field_kind(analysis.enforced.query_class.get("stream", ""), field)
        wanted = "text" if kind == AdaptiveRun.Kind.NGRAM_DISCOVERY else "number"
        if kind_of_field != wanted:
            problems.add("field", f"Must be a {wanted} field of the analysis's stream.")
    if problems:
        raise ValidationFailed(problems.errors)

    parsed = Spec(analysis, kind, field, rounds, plan, privacy, z_score, max_per_level, cohorts, spec)
    rounds_parsed = _check_plan(analysis, _round_recipes(parsed, analysis, first_recipe(parsed)), field, "")
    for planned, round_parsed in zip(plan, rounds_parsed, strict=True):
        # What each round will charge a device, so that later runs can reserve it (_reserved_requests).
        privacy = round_parsed.privacy
        planned.update(
            noise=privacy.noise, mechanism=privacy.mechanism, epsilon0=privacy.epsilon0, min_cohort=privacy.min_cohort
        )
    baseline = spec.get("baseline")
    if baseline is not None:
        _check_baseline(parsed, baseline)
    return parsed


def _heavy_hitters_validate(problems: Problems, spec: dict, analysis: Analysis | None, field: str | None) -> Spec:
    """A heavy-hitters walk: its one round's recipe (a Poplar1Words schema, aggregator noise at the
    walk's epsilon and delta), checked as every round is, and its budget against the policy."""
    for key in set(spec) - set(HEAVY_HITTERS_KEYS) - {"threshold"}:
        if key in SPEC_KEYS:
            problems.add(key, "A heavy-hitters walk has no such key: it spells words byte by byte from its alphabet.")
    problems.only(spec.get("threshold"), ("zScore", "maxPerLevel"), "threshold.")
    length = problems.integer(spec, "maxLength", "maxLength", minimum=1)
    if length is not None and length * 8 > MAX_BITS:
        problems.add("maxLength", f"At most {MAX_BITS // 8} bytes: a level a byte, {MAX_BITS // 8} levels at most.")
    privacy = problems.obj(spec, "privacy", "privacy") or {}
    problems.only(privacy, HEAVY_HITTERS_PRIVACY, "privacy.")
    epsilon = problems.number(privacy, "epsilon", "privacy.epsilon", positive=True)
    delta = problems.number(privacy, "delta", "privacy.delta", open_unit=True)
    threshold = spec.get("threshold", {})
    if not isinstance(threshold, dict):
        problems.add("threshold", "Must be an object.")
        threshold = {}
    z_score = problems.number(threshold, "zScore", "threshold.zScore", positive=True) if "zScore" in threshold else 4.0
    max_per_level = (
        problems.integer(threshold, "maxPerLevel", "threshold.maxPerLevel", minimum=1)
        if "maxPerLevel" in threshold
        else 32
    )
    if analysis is not None and field and field_kind(analysis.enforced.query_class.get("stream", ""), field) != "text":
        problems.add("field", "Must be a text field of the analysis's stream.")
    schema = None
    if length is not None and not problems:
        try:
            schema = Poplar1WordsType(
                bits=8 * length,
                alphabet=spec.get("alphabet", DEFAULT_ALPHABET),
                z_score=z_score,
                max_per_level=max_per_level,
            ).to_json()
        except SchemaError as error:
            key = {"bits": "maxLength", "zScore": "threshold.zScore", "maxPerLevel": "threshold.maxPerLevel"}
            problems.add(key.get(error.key, error.key), sentence(error))
    if problems:
        raise ValidationFailed(problems.errors)
    _check_walk_comparison(problems, spec, analysis, epsilon, length)
    plan = [{"round": 1, "epsilon": epsilon, "delta": delta}]
    parsed = Spec(analysis, AdaptiveRun.Kind.HEAVY_HITTERS, field, 1, plan, privacy, z_score, max_per_level, [], spec)
    # A refused budget is the walk's one epsilon's: privacy.epsilon, the key the spec gives it at.
    (round_parsed,) = _check_plan(analysis, [walk_recipe(parsed, schema)], field, "", epsilon_key="privacy.epsilon")
    plan[0].update(
        noise=round_parsed.privacy.noise,
        mechanism="",
        epsilon0=None,
        min_cohort=round_parsed.privacy.min_cohort,
        sampling_rate=round_parsed.privacy.sampling_rate,
        levels=length,
    )
    return parsed


def walk_comparison_refusal(run: AdaptiveRun | None, *, fleet_id: int, epsilon: float, cut: int) -> str | None:
    """Why ``run`` cannot be a walk's local-DP comparison, or None: a finished character discovery of
    the same fleet, words as long, the same total epsilon."""
    if run is None:
        return "No such interactive analysis."
    if run.kind != AdaptiveRun.Kind.NGRAM_DISCOVERY or run.spec.get("unit") != "character":
        return "Must be an n-gram discovery with characters as tokens (unit character): it spells words too."
    if run.analysis.fleet_id != fleet_id:
        return "Must have run on the same fleet."
    if run.status != AdaptiveRun.Status.FINISHED:
        return f"Must have finished (it is {run.get_status_display().lower()})."
    if run.spec.get("maxLength") != cut:
        return (
            f"Must discover words of the same length: its maxLength is {run.spec.get('maxLength')}, this walk's {cut}."
        )
    spent = sum(p["epsilon"] for p in run.plan)
    if not math.isclose(spent, epsilon, rel_tol=1e-9):
        return f"Must have spent the same total epsilon: it planned {spent:g}, this walk {epsilon:g}."
    return None


def _check_walk_comparison(problems: Problems, spec: dict, analysis: Analysis, epsilon: float, length: int) -> None:
    """The optional ``comparison``: a local-DP character discovery of the same fleet at the same total
    epsilon, to put the walk's words beside (analyses.adaptive.comparison.walk_comparison)."""
    comparison = spec.get("comparison")
    if comparison is None:
        return
    if not isinstance(comparison, dict):
        raise ValidationFailed({"comparison": ["Must be an object."]})
    problems.only(comparison, ("run", "topK"), "comparison.")
    run_id = problems.integer(comparison, "run", "comparison.run", minimum=1)
    problems.integer(comparison, "topK", "comparison.topK", minimum=1, required=False)
    if run_id is not None:
        other = AdaptiveRun.objects.select_related("analysis").filter(pk=run_id).first()
        if other is not None and other.analysis.owner_id != analysis.owner_id:
            other = None  # another analyst's runs are not this analyst's to read
        refusal = walk_comparison_refusal(other, fleet_id=analysis.fleet_id, epsilon=epsilon, cut=length)
        if refusal:
            problems.add("comparison.run", refusal)
    if problems:
        raise ValidationFailed(problems.errors)


def walk_recipe(spec: Spec, schema: dict | None = None) -> dict[str, Any]:
    """A heavy-hitters walk's one round: its Poplar1Words schema and the walk's privacy, aggregator noise."""
    if schema is None:
        raw = spec.raw
        schema = Poplar1WordsType(
            bits=8 * raw["maxLength"],
            alphabet=raw.get("alphabet", DEFAULT_ALPHABET),
            z_score=spec.z_score,
            max_per_level=spec.max_per_level,
        ).to_json()
    recipe = spec_recipe(spec, spec.analysis, 0, schema, "walk")
    recipe["privacy"] = {"noise": "aggregator", **recipe["privacy"]}
    return recipe


def _budget_plan(problems: Problems, privacy: dict, rounds: int | None) -> list[dict[str, float]]:
    per_round = privacy.get("epsilonPerRound")
    if isinstance(per_round, list):
        if rounds is not None and len(per_round) != rounds:
            problems.add("privacy.epsilonPerRound", f"A list must give one epsilon per round ({rounds}).")
            return []
        epsilons = [problems.number({"e": e}, "e", "privacy.epsilonPerRound", positive=True) for e in per_round]
    else:
        epsilons = [problems.number(privacy, "epsilonPerRound", "privacy.epsilonPerRound", positive=True)]
        epsilons = epsilons * (rounds or 1)
    delta = problems.number(privacy, "delta", "privacy.delta", open_unit=True)
    if None in epsilons or delta is None or rounds is None:
        return []
    return [{"round": i + 1, "epsilon": e, "delta": delta} for i, e in enumerate(epsilons)]


def _check_ngram_spec(problems: Problems, spec: dict) -> None:
    unit = spec.get("unit", "word")
    if unit not in UNITS:
        problems.add("unit", f"Must be one of {', '.join(UNITS)}.")
    vocabulary = problems.string_list(spec, "vocabulary", "vocabulary")
    if vocabulary is not None:
        try:
            PrefixTreeType(tokens=tuple(vocabulary), unit=unit if unit in UNITS else "word")
        except ValueError as error:
            problems.add("vocabulary", sentence(error))


def _check_refinement_spec(problems: Problems, spec: dict) -> None:
    boundaries = spec.get("boundaries")
    try:
        encoding_from_json({"dataType": "BucketedType", "boundaries": boundaries})
    except ValueError as error:
        problems.add("boundaries", sentence(error))
        return
    if len(boundaries) < 2:
        problems.add("boundaries", "Give at least two boundaries: a bucket to refine lies between two.")
    problems.number(spec, "minWidth", "minWidth", positive=True)


def _check_baseline(spec: Spec, baseline: Any) -> None:
    if spec.kind != AdaptiveRun.Kind.NGRAM_DISCOVERY:
        raise ValidationFailed({"baseline": ["Only n-gram discovery has a static baseline."]})
    problems = Problems()
    if not isinstance(baseline, dict):
        raise ValidationFailed({"baseline": ["Must be an object."]})
    problems.only(baseline, ("analysis", "topK", "rows", "columns"), "baseline.")
    identifier = problems.string(baseline, "analysis", "baseline.analysis")
    other = Analysis.objects.filter(identifier=identifier).first() if identifier else None
    if identifier and other is None:
        problems.add("baseline.analysis", f"No analysis {identifier!r}.")
    elif other is not None and (refusal := baseline_refusal(spec.analysis, other, spec.field)):
        problems.add("baseline.analysis", refusal)
    problems.integer(baseline, "topK", "baseline.topK", minimum=1, required=False)
    if problems:
        raise ValidationFailed(problems.errors)
    try:
        baseline_encoding(spec)
    except ValueError as error:
        raise ValidationFailed({"baseline": [f"{error}."]}) from error
    _check_plan(other, _round_recipes(spec, other, baseline_recipe(spec, other, 0)), spec.field, "baseline ")


def baseline_refusal(analysis: Analysis, other: Analysis, field: str) -> str | None:
    """Why ``other`` cannot hold the static baseline of a discovery on ``analysis``'s ``field``; None
    if it can. The start checks it, and the start form offers only the analyses it passes, so the
    form never offers one the start refuses. The budget is the plan's to check: it depends on it."""
    if other.pk == analysis.pk or other.fleet_id != analysis.fleet_id:
        return "Must be another analysis of the same fleet: the baseline spends its own budget."
    if other.owner_id != analysis.owner_id:
        return "Must belong to the same analyst: the baseline spends its budget."
    if not other.is_approved:
        return f"{other.identifier} is not approved by a privacy officer yet: its rounds cannot start."
    enforced = other.enforced
    stream = enforced.query_class.get("stream", "")
    if field not in enforced.query_class.get("fields", []) or enforced.field(field) is None:
        return f"{other.identifier} has no policy for the field {field}: its query class does not read it."
    if field_kind(stream, field) != "text":
        return f"In {other.identifier}'s stream {stream}, {field} is not a text field: no n-gram sketch of it."
    return None


def _round_recipes(spec: Spec, analysis: Analysis, first: dict) -> list[dict]:
    """The recipe of every planned round, with round 1's schema: what the plan will ask of devices."""
    return [{**first, "privacy": {**first["privacy"], **_round_privacy(spec, i)}} for i in range(spec.rounds)]


def _check_plan(
    analysis: Analysis, recipes: list[dict], field: str, label: str, epsilon_key: str = "privacy.epsilonPerRound"
) -> list[dict]:
    """Each planned round must be valid, and all of them together must fit the policy's budget,
    after the rounds other running analyses have planned but not sent yet. Returns the parsed rounds."""
    parsed = []
    for i, recipe in enumerate(recipes):
        try:
            parsed.append(recipe_validate(analysis=analysis, content=recipe))
        except ValidationFailed as failed:
            raise ValidationFailed({f"{label}round {i + 1}: {k}": v for k, v in failed.errors.items()}) from failed
    requests = [budget_request_for(p.privacy, p.field, p.encoding.size, walk_levels(p.encoding)) for p in parsed]
    refusal = budget_plan_refusal(analysis, field, requests, reserved=_reserved_requests(analysis))
    if refusal:
        index, errors = refusal
        raise ValidationFailed(
            {
                f"{label}{epsilon_key}": [
                    f"The budget plan exceeds the policy of {analysis.identifier} at round {index + 1} of "
                    f"{len(recipes)}: {message}"
                    for message in errors
                ]
            }
        )
    return parsed


def _reserved_requests(analysis: Analysis) -> list:
    """The rounds that running or paused runs have planned on ``analysis`` and not started yet."""
    reserved = []
    active = AdaptiveRun.objects.filter(status__in=[AdaptiveRun.Status.RUNNING, AdaptiveRun.Status.PAUSED])
    for run in active:
        interactive_started, baseline_started = adaptive_rounds_started(run)
        field = run.spec["field"]
        if run.analysis_id == analysis.pk and not run.stop_reason:
            reserved += [_planned_request(p, field) for p in run.plan[interactive_started:]]
        if (run.spec.get("baseline") or {}).get("analysis") == analysis.identifier:
            reserved += [_planned_request(p, field) for p in run.plan[baseline_started:]]
    return reserved


def adaptive_rounds_started(run: AdaptiveRun) -> tuple[int, int]:
    """Rounds started, so charged to devices' budgets: (interactive, static baseline), the current
    (or failed) round included."""
    current = run.current_round
    if run.kind == AdaptiveRun.Kind.HEAVY_HITTERS:  # its one round: its levels are the walk's, not rounds
        return (1 if current is not None or run.levels else 0), 0
    in_baseline = current is not None and current.recipe.analysis_id != run.analysis_id
    interactive = len(run.levels) + (1 if current is not None and not in_baseline else 0)
    return interactive, len(run.baseline) + (1 if in_baseline else 0)


def _planned_request(planned: dict, field: str):
    # A plan stored before a key existed lacks it; the sampling rate does not change the charge.
    privacy = PrivacyParameters(
        noise=planned["noise"],
        mechanism=planned["mechanism"],
        epsilon0=planned["epsilon0"],
        epsilon=planned["epsilon"],
        delta=planned["delta"],
        sampling_rate=planned.get("sampling_rate", 1.0),
        min_cohort=planned["min_cohort"],
    )
    # Reserved rounds are charged, never checked: an unknown domain only makes their PLD pair the
    # more conservative one (Hadamard response's FMT 2020 clones), never the check-3 cohort.
    return budget_request_for(privacy, field, None, planned.get("levels", 0))


def _round_privacy(spec: Spec, index: int) -> dict[str, Any]:
    planned = spec.plan[index]
    return {"epsilon": planned["epsilon"], "delta": planned["delta"]}


def spec_recipe(spec: Spec, analysis: Analysis, index: int, schema: dict, label: str) -> dict[str, Any]:
    privacy = {k: v for k, v in spec.privacy.items() if k != "epsilonPerRound"}
    privacy.update(_round_privacy(spec, index))
    stream = analysis.enforced.query_class["stream"]
    return {
        "recipeIdentifier": f"{label}-{timezone.now():%Y%m%d%H%M%S%f}",
        "AnalysisIdentifier": analysis.identifier,
        "query": f"select {spec.field} from {stream}",  # noqa: S608 - a recipe query the devices verify, not SQL
        "cohorts": spec.cohorts,
        "dataTypeContent": {spec.field: schema},
        "privacy": privacy,
    }


def first_recipe(spec: Spec) -> dict[str, Any]:
    if spec.kind == AdaptiveRun.Kind.HEAVY_HITTERS:
        return walk_recipe(spec)
    if spec.kind == AdaptiveRun.Kind.NGRAM_DISCOVERY:
        tree = PrefixTreeType(tokens=tuple(spec.raw["vocabulary"]), unit=spec.raw.get("unit", "word"))
        return spec_recipe(spec, spec.analysis, 0, tree.to_json(), "level1")
    schema = {"dataType": "BucketedType", "boundaries": spec.raw["boundaries"]}
    return spec_recipe(spec, spec.analysis, 0, schema, "round1")


def baseline_encoding(spec: Spec) -> HashedNgramType:
    baseline = spec.raw["baseline"]
    return HashedNgramType(
        tokens=tuple(spec.raw["vocabulary"]),
        length=spec.rounds,
        rows=baseline.get("rows", BASELINE_ROWS),
        columns=baseline.get("columns", BASELINE_COLUMNS),
        unit=spec.raw.get("unit", "word"),
    )


def baseline_recipe(spec: Spec, analysis: Analysis, index: int) -> dict[str, Any]:
    return spec_recipe(spec, analysis, index, baseline_encoding(spec).to_json(), f"static{index + 1}")


def spec_of(run: AdaptiveRun) -> Spec:
    """The run's spec as parsed at start (the plan stored then, not recomputed)."""
    raw = run.spec
    threshold = raw.get("threshold", {})
    rounds = raw.get("maxLength") if run.kind == AdaptiveRun.Kind.NGRAM_DISCOVERY else raw.get("maxRounds")
    per_level = threshold.get("maxPerLevel" if run.kind == AdaptiveRun.Kind.NGRAM_DISCOVERY else "maxBuckets")
    if run.kind == AdaptiveRun.Kind.HEAVY_HITTERS:  # one round; the walk's defaults as validated
        rounds, per_level = 1, threshold.get("maxPerLevel", 32)
        threshold = {"zScore": threshold.get("zScore", 4.0)}
    return Spec(
        run.analysis,
        run.kind,
        raw["field"],
        rounds,
        run.plan,
        raw["privacy"],
        threshold.get("zScore"),
        per_level,
        raw.get("cohorts", []),
        raw,
    )


def spec_unit(spec: Spec) -> dict:
    return {"unit": spec.raw["unit"]} if "unit" in spec.raw else {}
