"""Dashboard pages of adaptive runs (analyses.adaptive): start, follow, steer, read."""

from __future__ import annotations

import json
import math
from collections import defaultdict
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import AbstractBaseUser
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods

from analyses.adaptive.chain import adaptive_next_edit, adaptive_pause, adaptive_resume, adaptive_start
from analyses.adaptive.presenters import adaptive_output
from analyses.adaptive.spec import adaptive_rounds_started, adaptive_validate, baseline_refusal
from analyses.forms.adaptive import AdaptiveJsonForm, AdaptiveSpecForm
from analyses.models import AdaptiveRun, Analysis, Release
from analyses.reads import selectors
from analyses.reads.drilldown import bucketed_plain_labels
from analyses.services.policy import analyses_spent, analysis_spent
from analyses.services.rounds import round_progress
from devices.synthetic import TOKENS
from pfs_base.errors import NotAllowed, ValidationFailed
from pfs_device.streams import field_kind
from privacy.heavy_hitters import DEFAULT_ALPHABET
from privacy.ngrams import END_LABEL, ngram_text

Z95 = 1.96  # estimate ± 1.96 standard errors: the 95% interval of one estimate

# Coarse first buckets of the numeric fields the streams know; other fields start from [0, 100).
_EXAMPLE_BOUNDARIES = {"perplexity": [0, 25, 50, 75, 100, 125], "age": [0, 20, 40, 60, 80, 100]}


def _example_privacy(analysis: Analysis, field: str, wanted_rounds: int) -> tuple[int, dict[str, Any]]:
    """As many rounds as wanted and the policy's reports allow, its epsilon split evenly between them."""
    enforced = analysis.enforced
    policy = enforced.field(field)
    reports = min(enforced.reports_allowed, policy.reports if policy else enforced.reports_allowed)
    rounds = max(1, min(wanted_rounds, reports))
    epsilon = min(enforced.epsilon_allowed, policy.epsilon if policy else enforced.epsilon_allowed)
    local = min(4.0, policy.local_epsilon) if policy else 4.0
    return rounds, {
        "mechanism": "asymmetric_ohe",
        "epsilon0": local,
        "epsilonPerRound": math.floor(1000 * epsilon / rounds) / 1000,
        "delta": min(1e-6, enforced.delta / rounds),
        "samplingRate": 1.0,
    }


def _walk_fields(analysis: Analysis, text: list[str]) -> list[str]:
    """The text fields a heavy-hitters walk can run on: their policy lets the aggregators add the noise."""
    policies = [analysis.enforced.field(f) for f in text]
    return [f for f, policy in zip(text, policies, strict=True) if policy is not None and policy.aggregator_noise]


def _spec_examples(analysis: Analysis, user: AbstractBaseUser) -> dict[str, dict[str, Any]]:
    """A spec of each kind the query class allows (docs/examples), n-gram discovery first."""
    stream = analysis.enforced.query_class.get("stream", "")
    fields = analysis.enforced.query_class.get("fields", [])
    text = sorted((f for f in fields if field_kind(stream, f) == "text"), key=lambda f: f != "ngrams")
    numbers = [f for f in fields if field_kind(stream, f) == "number"]
    walkable = _walk_fields(analysis, text)
    examples: dict[str, dict[str, Any]] = {}
    if text:
        rounds, privacy = _example_privacy(analysis, text[0], 3)
        spec: dict[str, Any] = {
            "analysis": analysis.identifier,
            "kind": AdaptiveRun.Kind.NGRAM_DISCOVERY.value,
            "field": text[0],
            "vocabulary": list(TOKENS),  # common English words: a public dictionary, not the devices' text
            "maxLength": rounds,
            "privacy": privacy,
            "threshold": {"zScore": 3.0, "maxPerLevel": 50},
        }
        # The demo's convention: a twin analysis "<identifier>-static" on the same fleet for the baseline.
        twin = (
            selectors.analysis_list(user=user)
            .filter(identifier=f"{analysis.identifier}-static", fleet=analysis.fleet_id)
            .first()
        )
        if twin is not None and baseline_refusal(analysis, twin, text[0]) is None:  # as the dropdown offers
            spec["baseline"] = {"analysis": f"{analysis.identifier}-static", "rows": 4, "columns": 4096, "topK": 20}
        examples[AdaptiveRun.Kind.NGRAM_DISCOVERY.value] = spec
    if numbers:
        rounds, privacy = _example_privacy(analysis, numbers[0], 4)
        examples[AdaptiveRun.Kind.BUCKET_REFINEMENT.value] = {
            "analysis": analysis.identifier,
            "kind": AdaptiveRun.Kind.BUCKET_REFINEMENT.value,
            "field": numbers[0],
            "boundaries": _EXAMPLE_BOUNDARIES.get(numbers[0], [0, 25, 50, 75, 100]),
            "minWidth": 1.0,
            "maxRounds": rounds,
            "privacy": privacy,
            "threshold": {"zScore": 4.0, "maxBuckets": 64},
        }
    if walkable:
        # One round: the whole walk's epsilon is what a single planned round may spend.
        _, privacy = _example_privacy(analysis, walkable[0], 1)
        examples[AdaptiveRun.Kind.HEAVY_HITTERS.value] = {
            "analysis": analysis.identifier,
            "kind": AdaptiveRun.Kind.HEAVY_HITTERS.value,
            "field": walkable[0],
            "maxLength": 8,
            "alphabet": DEFAULT_ALPHABET,
            "privacy": {
                "epsilon": privacy["epsilonPerRound"],
                "delta": privacy["delta"],
                "samplingRate": privacy["samplingRate"],
            },
            "threshold": {"zScore": 4.0, "maxPerLevel": 24},
        }
    return examples


def _pretty_json(document: dict[str, Any]) -> str:
    """Indented JSON, a vocabulary wrapped a dozen words a line rather than one a line."""
    vocabulary = document.get("vocabulary")
    if not isinstance(vocabulary, list):
        return json.dumps(document, indent=2)
    text = json.dumps({**document, "vocabulary": "\0"}, indent=2)
    lines = [", ".join(json.dumps(t) for t in vocabulary[i : i + 12]) for i in range(0, len(vocabulary), 12)]
    return text.replace('"\\u0000"', "[\n    " + ",\n    ".join(lines) + "\n  ]")


def _spec_refusals(analysis: Analysis, user: AbstractBaseUser, spec: dict[str, Any]) -> dict[str, list[str]]:
    """This page starts runs of its own analysis; a baseline the user may not see reads as missing."""
    spec.setdefault("analysis", analysis.identifier)
    errors: dict[str, list[str]] = {}
    if spec["analysis"] != analysis.identifier:
        errors["analysis"] = [f"Must be {analysis.identifier!r}: this page starts runs of this analysis."]
    baseline = spec.get("baseline")
    named = baseline.get("analysis") if isinstance(baseline, dict) else None
    if isinstance(named, str) and named and not selectors.analysis_list(user=user).filter(identifier=named).exists():
        errors["baseline.analysis"] = [f"No analysis {named!r}."]
    return errors


def _plan_rows(run: AdaptiveRun) -> list[dict[str, Any]]:
    interactive, baseline = adaptive_rounds_started(run)
    default_epsilon0 = run.spec.get("privacy", {}).get("epsilon0") if isinstance(run.spec, dict) else None
    rows = []
    for index, planned in enumerate(run.plan):
        level = run.levels[index] if index < len(run.levels) else {}
        rows.append(
            {
                "round": planned.get("round", index + 1),
                "epsilon0": planned.get("epsilon0", level.get("epsilon0", default_epsilon0)),
                "epsilon": planned["epsilon"],
                "delta": planned["delta"],
                "min_cohort": planned.get("min_cohort"),
                "spent": index < interactive,
                "baseline_spent": index < baseline,
            }
        )
    return rows


def _interval(estimate: float, error: float) -> dict[str, float]:
    return {
        "estimate": estimate,
        "standard_error": error,
        "low": estimate - Z95 * error,
        "high": estimate + Z95 * error,
    }


def _tree_nodes(run: AdaptiveRun) -> list[dict[str, Any]]:
    """The discovered prefix tree: every kept n-gram under its prefix, with the level that found it.

    A prefix nobody kept (an edited recipe may ask for any) is added without an estimate.
    """
    # A heavy-hitters walk spells words a byte (a character) a level.
    unit = "character" if run.kind == AdaptiveRun.Kind.HEAVY_HITTERS else run.spec.get("unit", "word")
    nodes: dict[str, dict[str, Any]] = {}
    for number, level in enumerate(run.levels, start=1):
        for kept in level.get("kept", []):
            tokens = list(kept["tokens"])
            for depth in range(1, len(tokens)):
                prefix = ngram_text(unit, tuple(tokens[:depth]))
                if prefix not in nodes:
                    nodes[prefix] = _tree_node(unit, tokens[:depth], number, None)
            nodes[ngram_text(unit, tuple(tokens))] = _tree_node(unit, tokens, number, kept)
    return list(nodes.values())


def _tree_node(unit: str, tokens: list[str], level: int, kept: dict | None) -> dict[str, Any]:
    node = {
        "id": ngram_text(unit, tuple(tokens)),
        "parent": ngram_text(unit, tuple(tokens[:-1])) if len(tokens) > 1 else "",
        "label": "(end)" if tokens[-1] == END_LABEL else tokens[-1],
        "depth": len(tokens),
        "level": level,
        "kept": kept is not None,
    }
    if kept is not None:
        node.update(_interval(kept["estimate"], kept["standard_error"]))
    return node


def _sunburst(nodes: list[dict[str, Any]]) -> dict[str, list]:
    """Plotly sunburst arrays of the tree. The inner ring shares the circle between the 1-grams by
    their estimates; each outer wedge splits its prefix's wedge between the kept extensions, by
    their estimates. Each round's estimates count that round's reports, so only siblings compare;
    hovering shows each n-gram's own estimate and interval."""
    children: dict[str, list[dict]] = defaultdict(list)
    for node in nodes:
        children[node["parent"]].append(node)
    weights: dict[str, float] = {}

    def weigh(node: dict) -> float:  # a prefix nobody kept weighs what its extensions do
        kids = sum(weigh(kid) for kid in children[node["id"]])
        weights[node["id"]] = max(node.get("estimate", 0.0), 0.0) if node["kept"] else kids
        return weights[node["id"]]

    values: dict[str, float] = {}

    def share(parent: str, total: float | None) -> None:
        kids = children[parent]
        total_weight = sum(weights[kid["id"]] for kid in kids)
        for kid in kids:
            weight = weights[kid["id"]] if total_weight > 0 else 1.0
            if total is None:  # the inner ring: the estimates themselves
                values[kid["id"]] = weight if total_weight > 0 else 1.0
            else:  # a hair under the parent's value: plotly drops children that overflow it
                values[kid["id"]] = total * (1 - 1e-9) * weight / (total_weight if total_weight > 0 else len(kids))
            share(kid["id"], values[kid["id"]])

    for root in children[""]:
        weigh(root)
    share("", None)
    return {
        "ids": [n["id"] for n in nodes],
        "parents": [n["parent"] for n in nodes],
        "labels": [n["label"] for n in nodes],
        "values": [values[n["id"]] for n in nodes],
        "customdata": [
            [n["level"], n.get("estimate"), n.get("low"), n.get("high")]
            if n["kept"]
            else [n["level"], None, None, None]
            for n in nodes
        ],
    }


def _tree_rows(nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Depth first, each n-gram right under its prefix, siblings by estimate (largest first)."""
    children: dict[str, list[dict]] = defaultdict(list)
    for node in nodes:
        children[node["parent"]].append(node)
    rows: list[dict[str, Any]] = []

    def visit(parent: str) -> None:
        for node in sorted(children[parent], key=lambda n: -n.get("estimate", 0.0)):
            rows.append(node)
            visit(node["id"])

    visit("")
    return rows


def _level_views(run: AdaptiveRun, output: dict[str, Any]) -> list[dict[str, Any]]:
    """Per level: its summary and its table rows (kept n-grams, or the histogram's buckets)."""
    views = []
    for number, level in enumerate(output["levels"], start=1):
        if run.kind != AdaptiveRun.Kind.BUCKET_REFINEMENT:
            rows = [
                {"ngram": k["ngram"], "end": k["end"], **_interval(k["estimate"], k["standard_error"])}
                for k in level["kept"]
            ]
        else:
            split = set(level["split"])
            rows = [
                {"bucket": plain, "split": b["bucket"] in split, **_interval(b["estimate"], b["standard_error"])}
                for plain, b in zip(bucketed_plain_labels(level["boundaries"]), level["histogram"], strict=True)
            ]
        views.append({"number": number, "level": level, "rows": rows})
    return views


def _refinement_charts(output: dict[str, Any]) -> list[dict[str, Any]]:
    split = [set(level["split"]) for level in output["levels"]]
    return [
        {
            "labels": bucketed_plain_labels(level["boundaries"]),
            "estimates": [b["estimate"] for b in level["histogram"]],
            "errors": [Z95 * b["standard_error"] for b in level["histogram"]],
            "split": [b["bucket"] in split[i] for b in level["histogram"]],
        }
        for i, level in enumerate(output["levels"])
    ]


def _combined_chart(combined: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The pooled histogram as one more bar chart, after the rounds' (its index: the number of levels)."""
    if not combined or not combined["available"] or combined["rounds"] < 2:
        return []
    buckets = combined["buckets"]
    return [
        {
            "labels": bucketed_plain_labels(combined["boundaries"]),
            "estimates": [b["estimate"] for b in buckets],
            "errors": [Z95 * b["standard_error"] for b in buckets],
            "split": [False] * len(buckets),
            "title": "bucket (every round pooled)",
        }
    ]


def _combined_view(combined: dict[str, Any] | None, *, chart_index: int) -> dict[str, Any] | None:
    """The pooled histogram's section: shown once two rounds are released (one round is its own)."""
    if not combined or combined["rounds"] < 2:
        return None
    rows = [
        {
            **b,
            "bucket": plain,
            "low": b["estimate"] - Z95 * b["standard_error"],
            "high": b["estimate"] + Z95 * b["standard_error"],
        }
        for plain, b in zip(bucketed_plain_labels(combined["boundaries"]), combined["buckets"], strict=True)
    ]
    return {**combined, "rows": rows, "chart_index": chart_index}


# A heavy-hitters walk's comparison: its methods, in the order the table shows them.
WALK_METHODS = (
    ("poplar1", "Poplar1 walk (no local noise)"),
    ("local", "Local-DP discovery (characters)"),
    ("static", "Static baseline (sketch)"),
)


def _comparison_rows(comparison: dict[str, Any] | None) -> list[dict[str, Any]]:
    if not comparison or not comparison.get("available"):
        return []
    if comparison.get("kind") == "heavy_hitters":
        shown = [name for name, _ in WALK_METHODS if comparison["methods"].get(name) is not None]
        return [
            {
                "ngram": row["word"],
                "devices": row["devices"],
                "methods": [_found_cell(row.get(name)) for name in shown],
            }
            for row in comparison["rows"]
        ]
    return [
        {
            "ngram": row["ngram"],
            "devices": row["devices"],
            "methods": [_found_cell(found) for found in (row.get("interactive"), row.get("static"))],
        }
        for row in comparison["rows"]
    ]


def _found_cell(found: dict[str, Any] | None) -> dict[str, Any] | None:
    """A method's estimate, its 95% interval, and the estimand the interval is about (the expected
    reports naming the n-gram, from the ground truth): whether the interval covers it."""
    if not found:
        return None
    cell = _interval(found["estimate"], found["standard_error"])
    estimand = found.get("estimand")
    cell["estimand"] = estimand
    cell["covers"] = estimand is not None and cell["low"] <= estimand <= cell["high"]
    return cell


def _comparison_pending(run: AdaptiveRun) -> bool:
    """Finished with a static baseline (a walk: with a discovery to compare with): the comparison on
    ground truth follows (its own task)."""
    compared = bool(run.baseline) or (run.kind == AdaptiveRun.Kind.HEAVY_HITTERS and bool(run.spec.get("comparison")))
    return run.status == AdaptiveRun.Status.FINISHED and compared and run.comparison is None


def _walk_methods(comparison: dict[str, Any] | None) -> list[dict[str, Any]]:
    """A walk comparison's methods that ran, each with its label and metrics, in the table's order."""
    if not comparison or comparison.get("kind") != "heavy_hitters" or not comparison.get("available"):
        return []
    return [
        {"name": name, "label": label, **comparison["methods"][name]}
        for name, label in WALK_METHODS
        if comparison["methods"].get(name) is not None
    ]


def _current_round(run: AdaptiveRun) -> dict[str, Any] | None:
    current = run.current_round
    if current is None:
        return None
    interactive, baseline = adaptive_rounds_started(run)
    in_baseline = current.recipe.analysis_id != run.analysis_id
    return {
        "round": current,
        "label": f"Static baseline round {baseline} of {len(run.plan)}"
        if in_baseline
        else f"Round {interactive} of {len(run.plan)}",
        "in_baseline": in_baseline,
        "progress": (progress := round_progress(current)),
        "walk": progress.get("walk"),
    }


def _adaptive_context(run: AdaptiveRun, *, next_form: AdaptiveJsonForm | None, refusal: str) -> dict[str, Any]:
    output = adaptive_output(run)
    plan = _plan_rows(run)
    spent = [row for row in plan if row["spent"]]
    discovery = run.kind in (AdaptiveRun.Kind.NGRAM_DISCOVERY, AdaptiveRun.Kind.HEAVY_HITTERS)
    nodes = _tree_nodes(run) if discovery else []
    if run.status != AdaptiveRun.Status.PAUSED or run.next_recipe is None:
        next_form = None  # nothing waits to be edited (any more)
    elif next_form is None:
        next_form = _next_recipe_form(run.kind, None, initial=_pretty_json(run.next_recipe["recipe"]))
    chart = {
        "kind": run.kind,
        # The tree as it stood after each level: the chart grows level by level.
        "tree": [_sunburst([n for n in nodes if n["level"] <= i]) for i in range(1, len(run.levels) + 1)]
        if discovery
        else [],
        "levels": [] if discovery else _refinement_charts(output) + _combined_chart(output.get("combined")),
    }
    return {
        "run": run,
        "analysis": run.analysis,
        "output": output,
        "discovery": discovery,
        "walk": _walk_view(run),
        "plan": plan,
        "has_baseline": isinstance(run.spec, dict) and bool(run.spec.get("baseline")),
        "plan_total": {
            "epsilon": sum(row["epsilon"] for row in plan),
            "delta": sum(row["delta"] for row in plan),
            "spent_epsilon": sum(row["epsilon"] for row in spent),
            "spent_rounds": len(spent),
        },
        "levels": _level_views(run, output),
        "combined": _combined_view(output.get("combined"), chart_index=len(run.levels)),
        "stop_text": _stop_text(run),
        "tree_rows": _tree_rows(nodes),
        "current": _current_round(run),
        "comparison_pending": _comparison_pending(run),
        "follow": not run.is_finished or _comparison_pending(run),
        "comparison": output.get("comparison"),
        "comparison_rows": _comparison_rows(output.get("comparison")),
        "walk_methods": _walk_methods(output.get("comparison")),
        "next_form": next_form,
        "refusal": refusal,
        "chart": chart,
        "spec_json": _pretty_json(run.spec) if isinstance(run.spec, dict) else json.dumps(run.spec),
    }


def _walk_view(run: AdaptiveRun) -> dict[str, Any] | None:
    """A heavy-hitters run's walk: its levels at most, each aggregator's sigma, and, once released,
    the words found with their intervals (from its round's release)."""
    if run.kind != AdaptiveRun.Kind.HEAVY_HITTERS:
        return None
    walk = {"levels": run.spec.get("maxLength"), "sigma": None, "standard_error": None, "words": None}
    round_id = run.levels[0]["round"] if run.levels else None
    release = Release.objects.filter(round_id=round_id).values_list("content", flat=True).first() if round_id else None
    if release is not None:
        error = release["walk"]["standard_error"]
        walk.update(
            sigma=release["aggregator_sigma"],
            standard_error=error,
            words=[{**word, **_interval(word["count"], error)} for word in release["walk"]["words"]],
        )
    return walk


def _stop_text(run: AdaptiveRun) -> str:
    """Why the run ended (or its interactive part did), in words: a run that did all its planned
    rounds finished; it did not stop."""
    reason = run.stop_reason
    if not reason:
        return ""
    planned = len(run.plan)
    normal = reason.startswith("Reached the planned") and len(run.levels) >= planned
    if run.status == AdaptiveRun.Status.FAILED:
        return f"Failed: {reason}"
    if run.kind == AdaptiveRun.Kind.HEAVY_HITTERS:  # one round; its reason says how far the walk went
        return f"Finished: {reason}" if run.is_finished else ""
    if run.is_finished:
        if normal:
            extra = ", then the static baseline" if run.baseline else ""
            return f"Finished: all {planned} planned rounds ran{extra}."
        return f"Finished early: {reason}"
    if normal:
        return f"All {planned} planned rounds ran; the static baseline runs now."
    return f"The interactive part ended early: {reason}"


# What an edit of the next round can do, in each kind's own words.
_NEXT_EDITS = {
    AdaptiveRun.Kind.NGRAM_DISCOVERY: "e.g. drop prefixes you do not want extended",
    AdaptiveRun.Kind.BUCKET_REFINEMENT: "e.g. move, add or remove bucket boundaries",
}


def _next_recipe_form(kind: str, data: Any, initial: str | None = None) -> AdaptiveJsonForm:
    return AdaptiveJsonForm(
        data,
        initial={"document": initial} if initial is not None else None,
        label="Next round's recipe (JSON)",
        help_text=f"Edit what the next round asks of the devices, {_NEXT_EDITS[kind]}. "
        "Its privacy must stay as planned: the budget plan was checked at start.",
    )


def _start_form(request: HttpRequest, analysis: Analysis, examples: dict[str, dict[str, Any]]) -> AdaptiveSpecForm:
    """The start form: each kind the query class allows with its fields, and the user's other
    analyses of the same fleet as possible static baselines."""
    stream = analysis.enforced.query_class.get("stream", "")
    fields = analysis.enforced.query_class.get("fields", [])
    kinds = {
        kind: [f for f in fields if field_kind(stream, f) == wanted]
        for kind, wanted in (
            (AdaptiveRun.Kind.NGRAM_DISCOVERY.value, "text"),
            (AdaptiveRun.Kind.BUCKET_REFINEMENT.value, "number"),
        )
    }
    text = kinds[AdaptiveRun.Kind.NGRAM_DISCOVERY.value]
    kinds[AdaptiveRun.Kind.HEAVY_HITTERS.value] = _walk_fields(analysis, text)
    # Text fields but none a walk can run on: the page says why heavy hitters are not offered.
    kinds_refused = (
        {
            AdaptiveRun.Kind.HEAVY_HITTERS.value: "Heavy hitters (Poplar1) are not offered: the policy of "
            f"{', '.join(text)} does not allow aggregator noise, which a walk adds instead of local noise. "
            "A privacy officer can allow it for a field."
        }
        if text and not kinds[AdaptiveRun.Kind.HEAVY_HITTERS.value]
        else {}
    )
    first = next(iter(examples.values()), None)
    form = AdaptiveSpecForm(
        request.POST if request.method == "POST" else None,
        request.FILES if request.method == "POST" else None,
        analysis=analysis,
        kinds={kind: names for kind, names in kinds.items() if names},
        kinds_refused=kinds_refused,
        baselines=_baselines(request.user, analysis, text),
        examples=examples,
        initial={"document": _pretty_json(_with_unit(first))} if first else None,
    )
    return form


def _baselines(user: AbstractBaseUser, analysis: Analysis, fields: list[str]) -> dict[str, dict[str, Any]]:
    """The analyses that can hold a discovery's static baseline (the start's own rule,
    baseline_refusal), each with the text fields it can for and the budget it has left: the page's
    plan counts the baseline's spend against it too."""
    others = selectors.analysis_list(user=user).filter(fleet=analysis.fleet_id).exclude(pk=analysis.pk)
    usable = {
        other: [f for f in fields if baseline_refusal(analysis, other, f) is None]
        for other in others.order_by("identifier")
    }
    usable = {other: names for other, names in usable.items() if names}
    spent = analyses_spent(list(usable))
    return {
        other.identifier: {
            "fields": names,
            "left": round(other.enforced.epsilon_allowed - spent[other.pk]["epsilon"], 9),
            "reports_left": other.enforced.reports_allowed - spent[other.pk]["reports"],
            "fields_left": {
                name: round(
                    other.enforced.field(name).epsilon
                    - spent[other.pk]["fields"].get(name, {"epsilon": 0.0})["epsilon"],
                    9,
                )
                for name in names
            },
        }
        for other, names in usable.items()
    }


def _with_unit(spec: dict[str, Any]) -> dict[str, Any]:
    """The example as the form writes it: a discovery states its unit."""
    if spec.get("kind") != AdaptiveRun.Kind.NGRAM_DISCOVERY:
        return spec
    ordered = {key: spec[key] for key in ("analysis", "kind", "field") if key in spec}
    return {**ordered, "unit": spec.get("unit", "word"), **spec}


def _plan_check(analysis: Analysis, spec: dict[str, Any]) -> dict[str, Any]:
    """The budget plan a spec would fix, checked as a start would check it, without starting."""
    parsed = adaptive_validate(spec=spec)
    spent = analysis_spent(analysis)
    enforced = analysis.enforced
    policy = enforced.field(parsed.field)
    used = spent["fields"].get(parsed.field, {"epsilon": 0.0, "reports": 0})
    return {
        "rows": parsed.plan,
        # Rounded as budgets are kept (nano-epsilon): no 0.30000000000000004 on the page.
        "epsilon": round(sum(row["epsilon"] for row in parsed.plan), 9),
        "delta": round(sum(row["delta"] for row in parsed.plan), 15),
        "analysis_left": round(enforced.epsilon_allowed - spent["epsilon"], 9),
        "reports_left": enforced.reports_allowed - spent["reports"],
        "field": parsed.field,
        "field_left": round(policy.epsilon - used["epsilon"], 9) if policy else None,
        "devices_expected": round(analysis.fleet.size * float(parsed.privacy.get("samplingRate", 1.0))),
        "baseline": (spec.get("baseline") or {}).get("analysis"),
    }


@login_required
@require_http_methods(["GET", "POST"])
def adaptive_list(request: HttpRequest, identifier: str) -> HttpResponse:
    analysis = selectors.analysis_get(user=request.user, identifier=identifier)
    examples = _spec_examples(analysis, request.user)
    form = _start_form(request, analysis, examples)
    plan = None
    ask_to_start = False
    if request.method == "POST" and form.is_valid():
        spec = form.spec()
        refused = _spec_refusals(analysis, request.user, spec)
        action = request.POST.get("action")
        try:
            if refused:
                raise ValidationFailed(refused)
            if action == "check" or (action == "start" and request.POST.get("ask_before_spending")):
                # Reads only: nothing is started or spent. The page's Start asks first, showing
                # the plan it would fix (a post without ask_before_spending starts at once).
                plan = _plan_check(analysis, spec)
                ask_to_start = action == "start"
            else:
                run = adaptive_start(spec=spec, user=request.user)
                return redirect("adaptive-detail", pk=run.pk)
        except ValidationFailed as invalid:
            form.add_problems(invalid.errors)
        except NotAllowed as refusal:
            form.add_error(None, str(refusal))
    rows = []
    for run in analysis.adaptive_runs.select_related("current_round__recipe"):
        interactive, _ = adaptive_rounds_started(run)
        rows.append(
            {
                "run": run,
                "levels": len(run.levels),
                "planned": len(run.plan),
                "spent": sum(p["epsilon"] for p in run.plan[:interactive]),
                "planned_epsilon": sum(p["epsilon"] for p in run.plan),
            }
        )
    spent = analysis_spent(analysis)
    form.focus_first_error()
    context = {
        "analysis": analysis,
        "form": form,
        "plan": plan,
        "ask_to_start": ask_to_start,
        "rows": rows,
        "budget_left": {
            "analysis": round(analysis.enforced.epsilon_allowed - spent["epsilon"], 9),
            "reports": analysis.enforced.reports_allowed - spent["reports"],
            "fields": {
                p.field: round(p.epsilon - spent["fields"].get(p.field, {"epsilon": 0.0})["epsilon"], 9)
                for p in analysis.enforced.field_budgets
            },
            "fleet": analysis.fleet.size,
            # Devices compose by this accountant: beyond basic, a plan over the plain sums may still fit.
            "accountant": analysis.enforced.accountant,
        },
        "other_examples": [
            {"kind": AdaptiveRun.Kind(kind).label, "json": _pretty_json(spec)}
            for kind, spec in list(examples.items())[1:]
        ],
    }
    return render(request, "analyses/adaptive_list.html", context, status=400 if form.errors else 200)


# What each action of the run page did, at the top of the page it lands on.
_ACTION_OUTCOMES = {
    "pause": "Paused: the current round finishes; the next one then waits, editable, until you continue.",
    "continue": "Continued: the run goes on with the next round.",
    "edit": "The next round's recipe is saved; it waits until you continue.",
    "edit-continue": "The next round's recipe is saved and the run goes on.",
}


@login_required
@require_http_methods(["GET", "POST"])
def adaptive_detail(request: HttpRequest, pk: int) -> HttpResponse:
    run = selectors.adaptive_run_get(user=request.user, pk=pk)
    next_form = None
    refusal = ""
    status = 200
    if request.method == "POST":
        action = request.POST.get("action", "")
        try:
            if action == "pause":
                adaptive_pause(run=run, user=request.user)
            elif action == "continue":
                adaptive_resume(run=run, user=request.user)
            elif action in ("edit", "edit-continue"):
                next_form = _next_recipe_form(run.kind, request.POST)
                if next_form.is_valid():
                    try:
                        adaptive_next_edit(run=run, recipe=next_form.cleaned_data["document"], user=request.user)
                    except ValidationFailed as invalid:
                        next_form.add_problems(invalid.errors)
                if next_form.errors:
                    next_form.focus_errors()
                    status = 400
                elif action == "edit-continue":
                    adaptive_resume(run=run, user=request.user)
            else:
                refusal, status = f"Unknown action {action!r}.", 400
        except NotAllowed as refused:
            refusal, status = str(refused), 409
        if status == 200:
            messages.success(request, _ACTION_OUTCOMES[action])
            return redirect("adaptive-detail", pk=run.pk)
        run = selectors.adaptive_run_get(user=request.user, pk=pk)
    context = _adaptive_context(run, next_form=next_form, refusal=refusal)
    return render(request, "analyses/adaptive_detail.html", context, status=status)


@login_required
@require_GET
def adaptive_status(request: HttpRequest, pk: int) -> JsonResponse:
    """What the run page polls: adaptive_output, and the current round's progress if one runs."""
    run = selectors.adaptive_run_get(user=request.user, pk=pk)
    output = adaptive_output(run)
    current = _current_round(run)
    output["current_round"] = (
        {"id": current["round"].pk, "label": current["label"], "progress": current["progress"]} if current else None
    )
    output["baseline_rounds"] = len(run.baseline)
    output["comparison_pending"] = _comparison_pending(run)
    response = JsonResponse(output)
    response["Cache-Control"] = "no-store"
    return response
