"""Drill-down: from one bucket of a released round to a refined recipe, and what running it costs.

The rules (docs/dashboard.md, "Drill-down"):

- a numeric bucket [lo, hi) is split into at most ``MAX_SUB_BUCKETS`` buckets of equal width
  within [lo, hi); values below lo (and missing ones) then fall into OOV and values from hi on
  into [hi, ∞), as a BucketedType always encodes them;
- an n-gram bucket of a prefix tree (a prefix and the token after it) becomes the one leaf of the
  next tree: which token follows that n-gram;
- in a joint histogram, the first field whose bucket can be refined that way is refined, the
  others are kept;
- a bucket with no finer structure (OOV, [bk, ∞), the end of a phrase, a hashed sketch cell) is
  broken down by a cohort field the analysis allows and the recipe does not use yet; without one,
  it cannot be refined and no link is offered.

The refined recipe keeps the round's query and privacy parameters, so it costs every answering
device what the round did. A recipe cannot select devices by cohort: every device is asked, and
the clicked cohort's batch shows the refinement.
"""

from __future__ import annotations

import copy
import itertools
import json
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from django.contrib.auth.models import AbstractBaseUser

from analyses.forms.recipe_editor import recipe_problem_said
from analyses.models import Analysis, Recipe, Round
from analyses.reads import selectors
from analyses.reads.recipe_preview import recipe_preview, spend_digest
from analyses.services.policy import analysis_spent
from analyses.services.releases import is_walk
from pfs_base.errors import ValidationFailed
from pfs_device.decision import fields_of
from privacy.encoding import BucketedType, CombinationType, Encoding, content_encoding
from privacy.ngrams import END_LABEL, OOV_LABEL, HashedNgramType, PrefixTreeType, ngram_text

MAX_SUB_BUCKETS = 8
_IDENTIFIER_LENGTH = Recipe._meta.get_field("identifier").max_length


@dataclass(frozen=True)
class _Step:
    """How one field's bucket refines: its new schema and a sentence saying so; or why it cannot."""

    schema: dict | None
    says: str


def refined_recipe(*, round_: Round, cohort: str, bucket: int) -> dict[str, Any]:
    """The recipe (Figure 4's JSON) that refines ``bucket`` of ``cohort``'s batch of a released round.

    Returns ``{"recipe": dict | None, "explanation": str, "label": str, "cohort": str,
    "bucket": int}``; ``recipe`` is None when the bucket cannot be refined, and the explanation
    then says why. A round without a release, a bucket out of range or a cohort that was not
    released raise ValidationFailed.
    """
    release = _released(round_)
    if is_walk(release.content):
        raise ValidationFailed(
            {
                "refine": [
                    f"Round {round_.pk} walked a Poplar1 prefix tree: its release is the words found, not "
                    "buckets, so it cannot be refined. A new Poplar1Words recipe (more bits, a lower zScore) "
                    "looks further."
                ]
            }
        )
    labels = release.content["buckets"]
    if isinstance(bucket, bool) or not isinstance(bucket, int) or not 0 <= bucket < len(labels):
        raise ValidationFailed({"bucket": [f"Must be a bucket index from 0 to {len(labels) - 1}."]})
    released = [b["cohort"] for b in release.content["batches"] if not b["suppressed"]]
    if cohort not in released:
        raise ValidationFailed({"cohort": [f"Not a released cohort of round {round_.pk}."]})
    recipe = round_.recipe
    content = recipe.content
    step = _structure_step(content["dataTypeContent"], bucket)
    cohorts = list(content.get("cohorts", []))
    if step.schema is None:
        unused = unused_cohort_fields(recipe)
        if not unused:
            return _answer(
                None,
                f"{step.says} The analysis allows no other cohort field to break it down by.",
                labels,
                cohort,
                bucket,
            )
        cohorts.append(unused[0])
        step = _Step(
            content["dataTypeContent"],
            f"{step.says} The new recipe breaks the whole histogram down by {unused[0]} instead.",
        )
    refined = copy.deepcopy(content)
    refined["recipeIdentifier"] = _identifier(recipe, bucket)
    refined["AnalysisIdentifier"] = recipe.analysis.identifier
    refined["cohorts"] = cohorts
    refined["dataTypeContent"] = step.schema
    says = step.says
    if cohort:
        says += (
            f" A recipe cannot select devices by cohort: every device is asked again, and the batch of "
            f"{cohort} shows the refinement."
        )
    return _answer(refined, says, labels, cohort, bucket)


def refinable_buckets(round_: Round) -> list[bool]:
    """For each bucket of the round's release, whether ``refined_recipe`` would offer a recipe."""
    labels = _released(round_).content["buckets"]
    if unused_cohort_fields(round_.recipe):
        return [True] * len(labels)
    data_types = round_.recipe.content["dataTypeContent"]
    parsed = round_.recipe.parsed_content
    return [_structure_step(data_types, i, parsed, build=False).schema is not None for i in range(len(labels))]


def plain_labels(round_: Round) -> list[str]:
    """The round's bucket labels as the pages show them: "OOV" said as what it holds (below the
    first boundary or missing; no n-gram under the tree). Downloads and the API keep the labels."""
    try:
        encoding = round_.recipe.encoding
    except (KeyError, TypeError, ValueError):
        return []
    return _plain(encoding)


def bucketed_plain_labels(boundaries: list[float]) -> list[str]:
    """The labels of a histogram over ``boundaries`` as the pages show them (OOV said in words)."""
    return _plain(BucketedType(tuple(boundaries)))


def _plain(encoding: Encoding) -> list[str]:
    if isinstance(encoding, CombinationType):
        return [" × ".join(combo) for combo in itertools.product(*(_plain(part) for _, part in encoding.parts))]
    labels = list(encoding.labels)
    if isinstance(encoding, BucketedType) and labels and labels[0] == OOV_LABEL:
        labels[0] = f"below {_number(encoding.boundaries[0])} or missing"
    elif isinstance(encoding, PrefixTreeType):
        labels = [OOV_WORDS if label == OOV_LABEL else label for label in labels]
    return labels


# What the OOV bucket of an n-gram tree holds, in words.
OOV_WORDS = "other (no n-gram under the tree)"


def refinement_cost(*, round_: Round, recipe: dict) -> dict[str, Any]:
    """What running the refined ``recipe`` will cost, what is left now, and whether it will be refused.

    The verdict is the recipe editor's (``recipe_preview``, which judges exactly as
    ``recipe_validate`` does, budgets included): its reasons when it refuses. The figures left are
    ``analysis_spent``'s (every round started counts in full), shown for a refused recipe too. The
    refined recipe keeps the round's privacy parameters and fields, so one answering device is
    charged what the round charged.
    """
    analysis = round_.recipe.analysis
    reasons: list[str] = []
    question = None
    try:
        # Run's spend question, asked before the refinement spends (templates/analyses/includes/refine.html).
        question = {**recipe_preview(analysis=analysis, content=recipe), "digest": spend_digest(recipe)}
    except ValidationFailed as invalid:
        reasons = [recipe_problem_said(path, m) for path, ms in invalid.errors.items() for m in ms]
    spent = analysis_spent(analysis)
    fields = []
    enforced = analysis.enforced
    read = set(fields_of(round_.recipe.encoded_field))
    for policy in (p for p in enforced.field_budgets if p.field in read):
        used = spent["fields"].get(policy.field, {"epsilon": 0.0, "reports": 0})
        fields.append(
            {
                "field": policy.field,
                "epsilon_left": policy.epsilon - used["epsilon"],
                "epsilon_allowed": policy.epsilon,
                "reports_left": policy.reports - used["reports"],
                "reports_allowed": policy.reports,
            }
        )
    return {
        "epsilon": round_.recipe.privacy.epsilon,
        "delta": round_.recipe.privacy.delta,
        "analysis": {
            "epsilon_left": enforced.epsilon_allowed - spent["epsilon"],
            "epsilon_allowed": enforced.epsilon_allowed,
            "reports_left": enforced.reports_allowed - spent["reports"],
            "reports_allowed": enforced.reports_allowed,
        },
        "fields": fields,
        "rounds_that_fit": question["budget"]["rounds_that_fit"] if question else None,
        "question": question,
        "refused": bool(reasons),
        "reasons": reasons,
    }


def refinement_for_page(*, user: AbstractBaseUser, analysis: Analysis, query: Any) -> dict[str, Any]:
    """The analysis page's drill-down: ``?refine=<round>&cohort=<c>&bucket=<i>`` read, refined and costed.

    Another analyst's round is a 404 (``selectors.round_get``); bad parameters give ``error``.
    """
    try:
        round_id, bucket = int(query.get("refine", "")), int(query.get("bucket", ""))
    except ValueError:
        return {"error": "refine and bucket must be whole numbers (a round and one of its buckets)."}
    round_ = selectors.round_get(user=user, pk=round_id)
    if round_.recipe.analysis_id != analysis.pk:
        return {"error": f"Round {round_.pk} is not a round of {analysis.identifier}."}
    cohort = query.get("cohort", "")
    try:
        refinement = refined_recipe(round_=round_, cohort=cohort, bucket=bucket)
    except ValidationFailed as invalid:
        return {"error": " ".join(m for ms in invalid.errors.values() for m in ms)}
    result = {**refinement, "round": round_, "error": None, "initial": None, "cost": None, "line": ""}
    recipe = refinement["recipe"]
    if recipe is None:
        return result
    cost = refinement_cost(round_=round_, recipe=recipe)
    return {
        **result,
        "recipe_json": json.dumps(recipe, indent=2, ensure_ascii=False),
        "initial": form_initial(recipe),
        "cost": cost,
        "line": cost_line(round_=round_, label=refinement["label"], cost=cost),
    }


def cost_line(*, round_: Round, label: str, cost: dict[str, Any]) -> str:
    """'Refining bucket [30, 40) of round #12: this round will spend ε = 1 on every device that answers
    (analysis: ε 3 of 3 left now, 2 after; 2 of 2 reports left now, 1 after; …)': before and after, said."""

    def scope(name: str, left: dict[str, Any]) -> str:
        eps_left, reports_left = left["epsilon_left"], left["reports_left"]
        return (
            f"{name}: ε {_figure(eps_left)} of {_figure(left['epsilon_allowed'])} left now, "
            f"{_figure(max(eps_left - cost['epsilon'], 0.0))} after; {reports_left} of {left['reports_allowed']} "
            f"{_plural(left['reports_allowed'], 'report')} left now, {max(reports_left - 1, 0)} after"
        )

    parts = [scope("analysis", cost["analysis"])] + [scope(f"field {f['field']}", f) for f in cost["fields"]]
    return (
        f"Refining bucket {label} of round #{round_.pk}: this round will spend ε = {_figure(cost['epsilon'])} "
        f"on every device that answers ({'; '.join(parts)})."
    )


def _plural(n: int, word: str) -> str:
    return word if n == 1 else f"{word}s"


def form_initial(recipe: dict) -> dict[str, Any]:
    """The recipe form's initial values for ``recipe``: its JSON, and its fields when they can hold it.

    The form's fields describe one numeric field's buckets; another refinement (a prefix tree, a
    joint histogram) fills only the JSON, and runs from the drill-down's own button.
    """
    initial: dict[str, Any] = {"recipe_json": json.dumps(recipe, indent=2, ensure_ascii=False)}
    (field, schema), *others = recipe["dataTypeContent"].items()
    if others or schema.get("dataType") != "BucketedType":
        return initial
    privacy = recipe["privacy"]
    initial.update(
        field=field,
        boundaries=", ".join(_number(b) for b in schema["boundaries"]),
        cohorts=list(recipe.get("cohorts", [])),
        noise=privacy.get("noise", Recipe.Noise.CLIENT),
        mechanism=privacy.get("mechanism"),
        epsilon0=privacy.get("epsilon0"),
        epsilon=privacy["epsilon"],
        delta=privacy["delta"],
        sampling_rate=privacy.get("samplingRate", 1.0),
        min_cohort=privacy.get("minCohort"),
    )
    return initial


# ---------------------------------------------------------------- the refinement rules


def split_bucket(lo: float, hi: float) -> list[float]:
    """Boundaries of at most ``MAX_SUB_BUCKETS`` equal-width buckets covering [lo, hi).

    Integer edges at least 2 apart get integer widths: the largest count of buckets from 2 to 8
    that divides hi - lo evenly, else width ceil((hi - lo) / 8) with a narrower last bucket. Other
    edges get 8 buckets of width (hi - lo) / 8.
    """
    width = hi - lo
    if float(lo).is_integer() and float(hi).is_integer() and width >= 2:
        span = int(width)
        evenly = [n for n in range(2, MAX_SUB_BUCKETS + 1) if span % n == 0]
        step = span // max(evenly) if evenly else math.ceil(span / MAX_SUB_BUCKETS)
        return [float(b) for b in range(int(lo), int(hi), step)] + [float(hi)]
    # 12 significant digits keep 0.1 + 0.2 from reading 0.30000000000000004 in the recipe.
    return [float(f"{lo + width * k / MAX_SUB_BUCKETS:.12g}") for k in range(MAX_SUB_BUCKETS)] + [hi]


def _structure_step(data_types: dict, bucket: int, parsed: tuple | None = None, *, build: bool = True) -> _Step:
    """Refine ``bucket`` by the structure of its encoding (see the module docstring).

    ``parsed``: ``content_encoding(data_types)``, when the caller already has it. ``build=False``
    only asks whether the bucket refines (a schema of ``{}`` says yes): a page asks it of every
    bucket, and building each refined tree would take seconds for a tree of ten thousand buckets.
    """
    fields, encoding = parsed or content_encoding(data_types)
    if not isinstance(encoding, CombinationType):
        step = _field_step(fields[0], encoding, bucket, build)
        return _Step({fields[0]: step.schema} if step.schema is not None else None, step.says)
    indices = np.unravel_index(bucket, encoding.shape)
    reasons = []
    for (field, part), index in zip(encoding.parts, indices, strict=True):
        step = _field_step(field, part, int(index), build)
        if step.schema is not None:
            kept = ", ".join(f for f in encoding.fields if f != field)
            return _Step({**data_types, field: step.schema}, f"{step.says} The joint histogram keeps {kept} as it was.")
        reasons.append(step.says)
    return _Step(None, " ".join(reasons))


def _field_step(field: str, encoding: Encoding, index: int, build: bool) -> _Step:
    # Labels are read one at a time: a sketch or a large tree has tens of thousands of buckets.
    if isinstance(encoding, BucketedType):
        return _numeric_step(field, encoding, index, build)
    if isinstance(encoding, PrefixTreeType):
        return _prefix_step(field, encoding, index, build)
    if isinstance(encoding, HashedNgramType):
        return _Step(None, f"A {field} bucket of a hashed sketch mixes many n-grams: it has no finer structure.")
    return _Step(None, f"This {field} bucket has no finer structure.")


def _numeric_step(field: str, encoding: BucketedType, index: int, build: bool) -> _Step:
    boundaries = encoding.boundaries
    if index == 0:
        return _Step(
            None,
            f"{field}'s first bucket (below {_number(boundaries[0])} or missing) holds values below "
            f"{_number(boundaries[0])} and missing ones: it has no lower bound to split within.",
        )
    label = encoding.labels[index]
    if index == len(boundaries):
        return _Step(None, f"{field} bucket {label} has no upper bound to split within.")
    if not build:
        return _Step({}, "")
    lo, hi = boundaries[index - 1], boundaries[index]
    split = split_bucket(lo, hi)
    says = (
        f"Splits {field} bucket {label} into {len(split) - 1} buckets; values below {_number(lo)} (and missing "
        f"ones) fall into its first bucket, below {_number(lo)} or missing, and values from {_number(hi)} on "
        f"into [{_number(hi)}, ∞)."
    )
    return _Step({"dataType": "BucketedType", "boundaries": [_json_number(b) for b in split]}, says)


def _prefix_step(field: str, tree: PrefixTreeType, index: int, build: bool) -> _Step:
    ngram = tree.bucket_ngram(index)
    if ngram is None:
        return _Step(None, f"{field} bucket “{OOV_WORDS}” holds devices with no n-gram under the tree.")
    prefix, extension = ngram
    label = ngram_text(tree.unit, (*prefix, extension))
    if extension == END_LABEL:
        return _Step(None, f"{field} bucket “{label}” is a whole phrase: nothing follows it.")
    if extension == OOV_LABEL:
        return _Step(None, f"{field} bucket “{label}” holds words outside the tokens.")
    if not build:
        return _Step({}, "")
    leaf = (*prefix, extension)
    refined = PrefixTreeType(tokens=tree.tokens, leaves=(leaf,), unit=tree.unit)
    says = (
        f"Extends the n-gram “{ngram_text(tree.unit, leaf)}” one level: which of the {len(tree.tokens)} tokens "
        f"follows it, or whether the phrase ends there ({refined.size} buckets)."
    )
    return _Step(refined.to_json(), says)


# ---------------------------------------------------------------- helpers


def _released(round_: Round) -> Any:
    if round_.status != Round.Status.RELEASED:
        raise ValidationFailed({"refine": [f"Round {round_.pk} has no release to refine."]})
    return round_.release


def unused_cohort_fields(recipe: Recipe) -> list[str]:
    """The cohort fields the analysis's query class allows that ``recipe`` does not break down by."""
    used = set(recipe.content.get("cohorts", []))
    return [c for c in recipe.analysis.enforced.query_class.get("cohortFields", []) if c not in used]


def _identifier(recipe: Recipe, bucket: int) -> str:
    """``<recipe>-refine-<bucket>``, with -2, -3, … when the analysis already has that recipe."""
    taken = set(Recipe.objects.filter(analysis=recipe.analysis).values_list("identifier", flat=True))
    suffix = f"-refine-{bucket}"
    for n in range(1, len(taken) + 2):
        ending = suffix if n == 1 else f"{suffix}-{n}"
        candidate = recipe.identifier[: _IDENTIFIER_LENGTH - len(ending)] + ending
        if candidate not in taken:
            return candidate
    raise AssertionError("unreachable: one of len(taken) + 1 candidates is free")


def _answer(recipe: dict | None, explanation: str, labels: list[str], cohort: str, bucket: int) -> dict[str, Any]:
    return {"recipe": recipe, "explanation": explanation, "label": labels[bucket], "cohort": cohort, "bucket": bucket}


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:.12g}"


def _json_number(value: float) -> int | float:
    return int(value) if float(value).is_integer() else value


def _figure(value: float) -> str:
    """An epsilon for a sentence: sums of floats such as 0.1 + 0.2 read as 0.3."""
    return f"{round(value, 9):g}"
