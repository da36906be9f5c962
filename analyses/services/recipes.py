"""Recipes: validation against the analysis's policy, storage, and the task devices receive.

Server-side checks mirror the device's so that an analyst gets a clear 400 before anything is
sent; the devices still decide for themselves (devices.services.shard_answer).
"""

from __future__ import annotations

import math
import secrets
from dataclasses import dataclass
from typing import Any

import numpy as np
from django.contrib.auth.models import AbstractBaseUser
from django.utils import timezone

from analyses.audit_log import refusal_log
from analyses.models import Analysis, Recipe, Round
from analyses.recipe_content import recipe_content_keep
from analyses.rules.validation import Problems, sentence
from analyses.services.budget import budget_precheck, budget_request_for
from analyses.services.collector import (
    AggregatorNoiseEstimator,
    ClientNoiseEstimator,
    Estimator,
)
from pfs_base.errors import ValidationFailed
from pfs_device.decision import DeviceTask, fields_of
from pfs_device.encode import SCHEMAS_BY_KIND, schema_fits
from pfs_device.query import QueryRefused, verify_query
from pfs_device.streams import field_kind
from privacy.aggregator_noise import DISTRIBUTIONS, GAUSSIAN, LAPLACE, MIN_SIGMA, aggregator_noise
from privacy.amplification import MAX_COHORT
from privacy.encoding import CombinationType, Encoding, content_encoding
from privacy.enforced_cohort import min_cohort_enforced
from privacy.heavy_hitters import Poplar1WordsType, level_sigma, walk_levels
from privacy.limits import NUMBERS as LIMITS
from privacy.mechanisms import MECHANISMS, mechanism_get, replacement_epsilon0
from privacy.ngrams import SchemaError
from privacy.parameters import PrivacyParameters

# A recipe's keys: Figure 4's (seed 000; version, intervalTimeType and dataRecorderType are stored
# as given) and ours. Anything else is refused: a typo must not change the recipe silently.
RECIPE_KEYS = (
    "recipeIdentifier",
    "version",
    "AnalysisIdentifier",
    "policySnapshot",
    "query",
    "cohorts",
    "dataTypeContent",
    "intervalTimeType",
    "dataRecorderType",
    "privacy",
)
PRIVACY_CONTENT_KEYS = (
    "noise",
    "noiseDistribution",
    "mechanism",
    "epsilon0",
    "epsilon",
    "delta",
    "samplingRate",
    "minCohort",
)


@dataclass(frozen=True)
class ParsedRecipe:
    """A recipe as ``recipe_validate`` accepted it: what is stored, sent and charged."""

    identifier: str
    field: str  # the encoded field, or fields joined by commas (a CombinationType)
    encoding: Encoding | CombinationType
    cohorts: list[str]
    privacy: PrivacyParameters


def recipe_validate(*, analysis: Analysis, content: Any) -> ParsedRecipe:
    """Check a recipe against the analysis's policy; the parsed recipe, or ValidationFailed per field."""
    if not isinstance(content, dict):
        raise ValidationFailed({"recipe": ["Must be a JSON object."]})
    problems = Problems()
    problems.only(content, RECIPE_KEYS)
    problems.only(content.get("privacy"), PRIVACY_CONTENT_KEYS, "privacy.")
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
            query = verify_query(query_text, [], analysis.enforced.query_class)
        except QueryRefused as refusal:
            problems.add("query", f"{refusal}.")
    unapproved = [c for c in cohorts if c not in analysis.enforced.query_class.get("cohortFields", [])]
    if unapproved:
        problems.add("cohorts", f"Not approved as non-sensitive cohort fields: {', '.join(unapproved)}.")

    field, encoding = _data_type_content(problems, content, query)
    privacy = problems.obj(content, "privacy", "privacy") or {}
    noise = privacy.get("noise", Recipe.Noise.CLIENT)
    if noise not in Recipe.Noise.values:
        problems.add("privacy.noise", f"Must be one of {', '.join(Recipe.Noise.values)}.")
    epsilon = problems.number(privacy, "epsilon", "privacy.epsilon", positive=True, limit=LIMITS["epsilon"])
    distribution = _noise_distribution(problems, privacy, noise)
    if distribution == LAPLACE:
        delta = _laplace_delta(problems, privacy)
    else:
        delta = problems.number(privacy, "delta", "privacy.delta", open_unit=True, limit=LIMITS["delta"])
    if isinstance(encoding, Poplar1WordsType):
        _walk_check(problems, noise, distribution, cohorts, epsilon, delta, encoding)
    sampling_rate = problems.number(
        privacy, "samplingRate", "privacy.samplingRate", default=1.0, unit=True, limit=LIMITS["samplingRate"]
    )
    stated_cohort = problems.integer(
        privacy, "minCohort", "privacy.minCohort", minimum=1, required=False, limit=LIMITS["minCohort"]
    )
    enforced = analysis.enforced
    if encoding is not None and enforced.max_buckets is not None and encoding.size > enforced.max_buckets:
        problems.add(
            "dataTypeContent",
            f"{encoding.size:,} buckets; this analysis allows at most {enforced.max_buckets:,} (its privacy officer's "
            "limit).",
        )
    if noise == Recipe.Noise.AGGREGATOR:
        mechanism, epsilon0 = "", None
        local_epsilon, min_cohort = _aggregator_noise_content(
            problems,
            privacy,
            epsilon,
            delta,
            stated_cohort,
            floor=enforced.aggregator_noise_min_cohort(),
            walk=isinstance(encoding, Poplar1WordsType),
        )
    else:
        mechanism, epsilon0, local_epsilon = _client_noise_content(problems, privacy, encoding)
        min_cohort = None
    if None not in (local_epsilon, epsilon, delta) and noise in Recipe.Noise.values:
        if noise == Recipe.Noise.CLIENT:
            min_cohort = _client_min_cohort(
                problems,
                mechanism,
                local_epsilon,
                epsilon,
                delta,
                stated_cohort,
                floor=enforced.min_cohort_floor or 0,
                domain_size=encoding.size if encoding else None,
            )
        checked = PrivacyParameters(
            noise=noise,
            mechanism=mechanism or "",
            epsilon0=epsilon0,
            epsilon=epsilon,
            delta=delta,
            sampling_rate=sampling_rate or 1.0,
            # Check 3 is the minimum cohort, computed just above: an unreachable one is already refused.
            min_cohort=min_cohort or MAX_COHORT,
        )
        budget_precheck(
            problems,
            analysis,
            field,
            budget_request_for(
                checked, field or "", encoding.size if encoding else None, walk_levels(encoding) if encoding else 0
            ),
        )
        if min_cohort and sampling_rate and min_cohort > analysis.fleet.size * sampling_rate:
            _fleet_too_small(problems, analysis, noise, min_cohort, stated_cohort, sampling_rate)
    if not problems and noise == Recipe.Noise.CLIENT:
        _estimator_check(problems, mechanism, epsilon0, encoding.size, min_cohort)
    if problems:
        raise ValidationFailed(problems.errors)
    return ParsedRecipe(
        identifier=identifier or f"r{timezone.now():%Y%m%d%H%M%S}-{secrets.token_hex(3)}",
        field=field,
        encoding=encoding,
        cohorts=cohorts,
        privacy=PrivacyParameters(
            noise=noise,
            mechanism=mechanism,
            epsilon0=epsilon0,
            epsilon=epsilon,
            delta=delta,
            sampling_rate=sampling_rate,
            min_cohort=min_cohort,
        ),
    )


def _fleet_too_small(
    problems: Problems, analysis: Analysis, noise: str, min_cohort: int, stated: int | None, sampling_rate: float
) -> None:
    """The minimum cohort is more than the fleet can give, said under the field to change: the stated
    minimum cohort when it is the larger; else the sampling rate when a larger one would reach the
    cohort (with the smallest that does); else epsilon (client noise: epsilon0, epsilon and delta set
    the cohort devices enforce)."""
    expected = f"the fleet's {analysis.fleet.size:,} devices at sampling rate {sampling_rate:g} give about " + (
        f"{analysis.fleet.size * sampling_rate:,.0f} reports"
    )
    smallest = _smallest_sampling_rate(min_cohort, analysis.fleet.size)
    raise_rate = "raise the sampling rate" + (f" to at least {smallest:g}" if smallest is not None else "")
    if stated is not None and stated >= min_cohort:
        problems.add(
            "privacy.minCohort",
            f"More than this fleet can reach: {expected}, fewer than {min_cohort:,}, so nothing would be released. "
            f"Lower it, or {raise_rate}.",
        )
    elif noise != Recipe.Noise.CLIENT:
        problems.add(
            "privacy.minCohort",
            f"This analysis's minimum cohort of {min_cohort:,} (its floor, or 1,000 with aggregator noise) is more "
            f"than this fleet can reach: {expected}. {raise_rate.capitalize()}.",
        )
    elif smallest is not None:
        problems.add(
            "privacy.samplingRate",
            f"Too small for the cohort: at this ε, ε₀ and δ devices need a minimum cohort of {min_cohort:,} "
            f"reports, but {expected}. {raise_rate.capitalize()} (or raise ε, or lower ε₀, for a smaller cohort).",
        )
    else:
        problems.add(
            "privacy.epsilon",
            f"Too small for this fleet: at this ε, ε₀ and δ devices need a minimum cohort of {min_cohort:,} reports, but "
            f"{expected}. Raise ε, or lower ε₀.",
        )


def _smallest_sampling_rate(min_cohort: int, fleet_size: int) -> float | None:
    """The smallest sampling rate, rounded up to two significant digits, whose expected reports
    (fleet × rate) reach ``min_cohort``; None when even every device is too few."""
    if min_cohort > fleet_size:
        return None
    rate = min_cohort / fleet_size
    step = 10.0 ** (math.floor(math.log10(rate)) - 1)
    rounded = round(math.ceil(round(rate / step, 9)) * step, 12)
    if fleet_size * rounded < min_cohort:  # the float rounding above fell a hair short
        rounded = round(rounded + step, 12)
    return min(1.0, rounded)


def _client_noise_content(
    problems: Problems, privacy: dict, encoding: Encoding | None
) -> tuple[str | None, float | None, float | None]:
    """(mechanism, epsilon0, its replacement-model epsilon0) of a client-noise recipe."""
    mechanism = problems.string(privacy, "mechanism", "privacy.mechanism")
    if mechanism and mechanism not in MECHANISMS:
        problems.add("privacy.mechanism", f"Unknown mechanism; known: {', '.join(sorted(MECHANISMS))}.")
    epsilon0 = problems.number(privacy, "epsilon0", "privacy.epsilon0", positive=True, limit=LIMITS["epsilon0"])
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
    problems: Problems,
    mechanism: str,
    epsilon0: float,
    epsilon: float,
    delta: float,
    stated: int | None,
    *,
    floor: int,
    domain_size: int | None,
) -> int | None:
    """The cohort devices enforce (the tightest bound proven for the mechanism: privacy.enforced_cohort),
    or the analysis's floor, or the recipe's own, if larger; never smaller. ``epsilon0``: replacement model."""
    try:
        needed = min_cohort_enforced(
            mechanism=mechanism, epsilon0=epsilon0, epsilon=epsilon, delta=delta, domain_size=domain_size
        ).min_cohort
    except ValueError as unreachable:  # UnreachableEpsilon, or parameters outside the bound's range
        problems.add("privacy.epsilon", sentence(unreachable))
        return None
    if stated is not None and stated < max(needed, floor):
        why = (
            f"the {needed:,} reports that epsilon0 {epsilon0:g}, epsilon {epsilon:g} and delta {delta:g} need"
            if needed >= floor
            else f"this analysis's floor of {floor:,} reports (set by its privacy officer)"
        )
        problems.add("privacy.minCohort", f"Below {why}: a recipe can raise the minimum cohort, never lower it.")
        return None
    return max(needed, floor, stated or 0)


def _noise_distribution(problems: Problems, privacy: dict, noise: str) -> str | None:
    """The aggregators' noise a recipe chooses (privacy.noiseDistribution, the discrete Gaussian unless
    it says otherwise); None with client noise, whose noise is the mechanism's, or a choice refused."""
    if noise != Recipe.Noise.AGGREGATOR:
        if "noiseDistribution" in privacy:
            problems.add("privacy.noiseDistribution", "Only aggregator noise has a distribution to choose.")
        return None
    distribution = privacy.get("noiseDistribution", GAUSSIAN)
    if distribution not in DISTRIBUTIONS:
        problems.add("privacy.noiseDistribution", f"Must be one of {', '.join(DISTRIBUTIONS)}.")
        return None
    return distribution


def _walk_check(
    problems: Problems,
    noise: str,
    distribution: str | None,
    cohorts: list[str],
    epsilon: float | None,
    delta: float | None,
    encoding: Poplar1WordsType,
) -> None:
    """A Poplar1 walk (privacy.heavy_hitters): the aggregators add the discrete Gaussian at every level
    (no local randomizer, no Laplace: its levels compose by PLD within epsilon and a positive delta),
    over one batch (no cohorts: a walk's levels are asked of all its reports)."""
    if noise != Recipe.Noise.AGGREGATOR:
        problems.add(
            "privacy.noise",
            'A Poplar1Words walk has no local randomizer: each aggregator adds its own noise. Use "aggregator".',
        )
    elif distribution == LAPLACE:
        problems.add("privacy.noiseDistribution", "A Poplar1Words walk adds the discrete Gaussian: leave it out.")
    if cohorts:
        problems.add("cohorts", "A Poplar1Words walk counts all its reports together: leave out cohorts.")
    if epsilon is not None and delta and not problems:
        try:
            sigma = level_sigma(epsilon, delta, encoding.levels)
        except ValueError as error:
            problems.add("privacy.epsilon", f"{str(error).capitalize()}.")
            return
        if sigma < MIN_SIGMA:
            problems.add(
                "privacy.epsilon",
                f"Each level's sigma {sigma:.3g} is below {MIN_SIGMA:g}, the smallest noise aggregators add (most "
                "counts would be released unchanged); choose a smaller epsilon or delta.",
            )


def _laplace_delta(problems: Problems, privacy: dict) -> float | None:
    """A discrete Laplace recipe's delta: 0, its pure epsilon-DP, whether it says so or not."""
    stated = privacy.get("delta", 0)
    if isinstance(stated, bool) or stated != 0:
        problems.add("privacy.delta", "The discrete Laplace is pure epsilon-DP: leave out delta (it is 0).")
        return None
    return 0.0


def _aggregator_noise_content(
    problems: Problems,
    privacy: dict,
    epsilon: float | None,
    delta: float | None,
    stated: int | None,
    *,
    floor: int,
    walk: bool = False,
) -> tuple[float | None, int | None]:
    """(local epsilon, minimum cohort) of an aggregator-noise recipe: no local randomizer at all.
    ``walk``: a Poplar1 walk's, whose noise is its levels' (_walk_check), not one release's."""
    for name in ("mechanism", "epsilon0"):
        if name in privacy:
            problems.add(
                f"privacy.{name}",
                "With aggregator noise devices use no local randomizer: leave out mechanism and epsilon0.",
            )
    if epsilon is not None and delta is not None and not walk:
        try:
            aggregator_noise(epsilon, delta).check()
        except ValueError as error:
            problems.add("privacy.epsilon", f"{str(error).capitalize()}.")
    if stated is not None and stated < floor:
        problems.add(
            "privacy.minCohort",
            f"Below this analysis's floor of {floor:,} reports: a recipe can raise the minimum cohort, never lower it "
            "(with aggregator noise the floor keeps a few sybil devices from singling one device out).",
        )
        return math.inf, None
    return math.inf, max(floor, stated or 0)


def _data_type_content(problems: Problems, content: dict, query: Any) -> tuple[str | None, Any]:
    """(the encoded field, or fields joined by commas, and their encoding) of a recipe."""
    data_types = problems.obj(content, "dataTypeContent", "dataTypeContent")
    if data_types is None:
        return None, None
    try:
        fields, encoding = content_encoding(data_types)
    except SchemaError as error:
        path = f"dataTypeContent.{error.key}" if error.key else "dataTypeContent"
        problems.add(path, sentence(error))
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


def recipe_create(*, analysis: Analysis, content: Any, user: AbstractBaseUser) -> Recipe:
    try:
        parsed = recipe_validate(analysis=analysis, content=content)
    except ValidationFailed as invalid:
        refusal_log(user=user, action="recipe.create", target=analysis.identifier, reasons=invalid.errors)
        raise
    recipe = recipe_unsaved(analysis, content, parsed, user)
    recipe.save()
    # Its rounds' shards and aggregation load it anew: they find the parse validation made.
    recipe_content_keep(recipe.pk, recipe.created_at, recipe.parsed_content)
    return recipe


def recipe_unsaved(analysis: Analysis, content: dict, parsed: ParsedRecipe, user: AbstractBaseUser | None) -> Recipe:
    """The (unsaved) recipe ``recipe_validate`` parsed from ``content``, holding that parse."""
    recipe = Recipe(
        analysis=analysis,
        identifier=parsed.identifier,
        content=content,
        encoded_field=parsed.field,
        privacy=parsed.privacy,
        created_by=user,
    )
    recipe.__dict__["parsed_content"] = (fields_of(parsed.field), parsed.encoding)  # the cached_property's slot
    return recipe


def _estimator_check(problems: Problems, mechanism: str, epsilon0: float, size: int, reports: int) -> None:
    """Build what the release will need, now: a round must never charge devices and then fail on its
    own parameters. The mechanism's estimator is run on an empty batch of the minimum cohort."""
    oracle = mechanism_get(mechanism, epsilon0)
    with np.errstate(all="ignore"):
        estimates = oracle.debias(np.zeros(oracle.report_length(size), dtype=np.int64), reports, size)
        variances = oracle.variance(estimates, reports, size)
    if not (np.isfinite(estimates).all() and np.isfinite(variances).all()):
        problems.add("privacy.epsilon0", "These parameters give no finite estimate: the release could not be computed.")


def recipe_estimator(recipe: Recipe) -> Estimator:
    size = recipe.encoding.size
    privacy = recipe.privacy
    if privacy.aggregator_noise:
        return AggregatorNoiseEstimator(epsilon=privacy.epsilon, delta=privacy.delta, domain_size=size)
    return ClientNoiseEstimator(mechanism=privacy.mechanism, epsilon0=privacy.epsilon0, domain_size=size)


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
        privacy=recipe.privacy,
        seed=seed,
        parsed=recipe.parsed_content,  # parsed once per recipe, not once per shard
    )
