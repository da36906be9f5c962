"""Analyst pages beside the releases: budget burn-down, audit, policy, and comparing two releases.

Thin views over analyses.reads.analysis_reads; each page reads as HTML alone (charts are drawn from the
same numbers the tables show).
"""

from __future__ import annotations

import csv
import json
from typing import Any

from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from analyses.models import Round
from analyses.reads import analysis_reads, drilldown, selectors
from pfs_base.errors import ValidationFailed

AUDIT_PAGE_SIZE = 50
CHOICES = 200  # released rounds offered in the compare form, newest first


@login_required
@require_GET
def analysis_budget(request: HttpRequest, identifier: str) -> HttpResponse:
    analysis = selectors.analysis_get(user=request.user, identifier=identifier)
    burndown = analysis_reads.budget_burndown(analysis)
    context = {"analysis": analysis, "burndown": burndown, "rows": analysis_reads.burndown_table(burndown)}
    return render(request, "analyses/budget.html", context)


def _audit_page(request: HttpRequest, identifier: str):
    analysis = selectors.analysis_get(user=request.user, identifier=identifier)
    runs = analysis_reads.audit_adaptive_runs(analysis)
    return analysis, runs, analysis_reads.adaptive_round_starters(runs)


@login_required
@require_GET
def analysis_audit(request: HttpRequest, identifier: str) -> HttpResponse:
    analysis, runs, starters = _audit_page(request, identifier)
    page = Paginator(analysis_reads.audit_rounds(analysis), AUDIT_PAGE_SIZE).get_page(request.GET.get("page"))
    context = {
        "analysis": analysis,
        "page": page,
        "rows": [analysis_reads.audit_row(round_, starters) for round_ in page],
        "runs": [analysis_reads.adaptive_run_summary(run, starters) for run in runs],
    }
    return render(request, "analyses/audit.html", context)


@login_required
@require_GET
def analysis_audit_csv(request: HttpRequest, identifier: str) -> HttpResponse:
    analysis, _, starters = _audit_page(request, identifier)
    response = HttpResponse(content_type="text/csv")
    response["Content-Disposition"] = f'attachment; filename="audit-{analysis.identifier}.csv"'
    writer = csv.DictWriter(response, fieldnames=analysis_reads.AUDIT_CSV_COLUMNS)
    writer.writeheader()
    for round_ in analysis_reads.audit_rounds(analysis).iterator():
        writer.writerow(analysis_reads.audit_csv_row(analysis_reads.audit_row(round_, starters)))
    return response


@login_required
@require_GET
def analysis_policy(request: HttpRequest, identifier: str) -> HttpResponse:
    analysis = selectors.analysis_get(user=request.user, identifier=identifier)
    summary = analysis_reads.policy_summary(analysis)
    pending = summary["pending_changes"]
    context = {
        "analysis": analysis,
        "summary": summary,
        "pending_json": json.dumps(pending, indent=2) if pending else "",
    }
    return render(request, "analyses/policy.html", context)


@login_required
@require_GET
def release_compare(request: HttpRequest) -> HttpResponse:
    """Two releases side by side; with a or b missing, a form to choose them (the round page links here)."""
    chosen = {key: request.GET.get(key, "").strip() for key in ("a", "b")}
    context = {"chosen": chosen, "errors": {}, "show_chooser": False}
    if not (chosen["a"] and chosen["b"]) and all(v == "" or v.isdecimal() for v in chosen.values()):
        # Nothing chosen yet, or one round (a well-formed id): offer the choice. A Compare button
        # pressed (its form sends "compare") with a round missing says which, not a silent reload.
        context.update(show_chooser=True, choice_groups=_choice_groups(request, chosen))
        if "compare" in request.GET:
            missing = [key.upper() for key in ("a", "b") if not chosen[key]]
            context["errors"] = {
                key.lower(): ["Not chosen: choose two released rounds, A and B, then Compare."] for key in missing
            }
            return render(request, "analyses/compare.html", context, status=400)
        return render(request, "analyses/compare.html", context)
    try:
        a, b = analysis_reads.compare_ids(request.GET)
        context["comparison"] = _in_words(
            analysis_reads.release_compare(user=request.user, a=a, b=b),
            [selectors.round_get(user=request.user, pk=pk) for pk in (a, b)],
        )
    except ValidationFailed as invalid:
        context["errors"] = invalid.errors
        context.update(show_chooser=True, choice_groups=_choice_groups(request, chosen))
        return render(request, "analyses/compare.html", context, status=400)
    return render(request, "analyses/compare.html", context)


def _choice_groups(request: HttpRequest, chosen: dict[str, str]) -> list[dict[str, Any]]:
    """The released rounds to choose from, grouped by analysis, newest first in each: the analysis at
    hand (the one of a round already chosen) first, then the others by their newest round. Listing
    every round of every analysis in one run buried the rounds one came to compare."""
    groups: dict[str, list[Round]] = {}
    for round_ in analysis_reads.released_rounds(user=request.user)[:CHOICES]:
        groups.setdefault(round_.recipe.analysis.identifier, []).append(round_)
    at_hand = next(
        (
            identifier
            for identifier, rounds in groups.items()
            for round_ in rounds
            if str(round_.pk) in (chosen["a"], chosen["b"])
        ),
        None,
    )
    ordered = sorted(groups.items(), key=lambda item: item[0] != at_hand)  # stable: newest first otherwise
    return [
        {"analysis": identifier, "at_hand": identifier == at_hand, "rounds": rounds} for identifier, rounds in ordered
    ]


def _in_words(comparison: dict[str, Any], rounds: list[Round]) -> dict[str, Any]:
    """The page's bucket labels say "OOV" as what it holds (drilldown.plain_labels), when the two
    releases agree on what that is; the API's comparison keeps the labels."""
    words: dict[str, str] = {}
    for round_ in rounds:
        labels = round_.release.content.get("buckets", [])
        plain = drilldown.plain_labels(round_)
        for label, said in zip(labels, plain, strict=False) if len(plain) == len(labels) else ():
            if words.setdefault(label, said) != said:
                words[label] = label  # the releases disagree (other boundaries): keep the label
    for cohort in comparison["cohorts"]:
        for row in cohort["buckets"]:
            row["label"] = words.get(row["label"], row["label"])
    return comparison
