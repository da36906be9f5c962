"""What an analyst reads about an analysis besides its releases: budget burn-down, audit, policy,
and two releases side by side. Read-only; shared by the dashboard pages and the REST API.

The burn-down counts budget exactly as ``services.analysis_spent`` does (every round started
counts in full, failed and cancelled ones included), so the pages cannot disagree with the
analysis page or with the server's pre-checks.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import IntegerField, Q, QuerySet
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Cast

from analyses.models import AdaptiveRun, Analysis, Round
from analyses.presenters.releases import release_as_json, release_total_over_cohorts
from analyses.reads import selectors
from analyses.rules.enforced_policy import EnforcedPolicy
from analyses.rules.validation import Problems
from analyses.services.budget import analysis_guarantees
from analyses.services.releases import WALK_KIND, ReleaseView, is_walk
from analyses.services.rounds import rounds_progress
from devices.models import PolicySnapshot
from pfs_base.errors import ValidationFailed
from pfs_device.budget import NANO, to_units
from pfs_device.decision import fields_of, snapshot_digest
from privacy.intervals import z_value
from privacy.parameters import PRIVACY_KEYS

# ---------------------------------------------------------------- budget burn-down


def budget_burndown(analysis: Analysis) -> dict[str, Any]:
    """Per scope (the analysis, then each field): one cumulative point per round started, in order.

    Sums run in the devices' integer nano-epsilon, so ten rounds of 0.1 end at exactly 1.0.
    """
    rounds = (
        Round.objects.filter(recipe__analysis=analysis)
        .select_related("recipe", "created_by")
        .order_by("created_at", "pk")
    )
    enforced = analysis.enforced  # the approved policy: an unapproved edit is not what devices enforce
    scopes: dict[str | None, dict[str, Any]] = {
        None: _scope("analysis", None, enforced.epsilon_allowed, enforced.reports_allowed)
    }
    for policy in enforced.field_budgets:
        scopes[policy.field] = _scope(f"field {policy.field}", policy.field, policy.epsilon, policy.reports)
    units: dict[str | None, int] = {}
    device_units: dict[str | None, int] = {}
    rounds = list(rounds)
    progress = rounds_progress(rounds)
    for round_ in rounds:
        recipe = round_.recipe
        # What devices spent: a round no device answered charged none of them.
        charged = progress[round_.pk]["devices_charged"]
        # A joint histogram charges every field it reads, as analysis_spent counts it.
        for key in (None, *fields_of(recipe.encoded_field)):
            # A field charged without a policy of its own still shows, with no allowed line.
            scope = scopes.setdefault(key, _scope(f"field {key}", key, None, None))
            units[key] = units.get(key, 0) + to_units(recipe.privacy.epsilon)
            device_units[key] = device_units.get(key, 0) + (to_units(recipe.privacy.epsilon) if charged else 0)
            scope["devices_reports"] = scope.get("devices_reports", 0) + (1 if charged else 0)
            scope["points"].append(
                {
                    "round": round_.pk,
                    "recipe": recipe.identifier,
                    "status": round_.status,
                    "created_at": round_.created_at,
                    "epsilon_round": recipe.privacy.epsilon,
                    "epsilon": units[key] / NANO,
                    "reports": len(scope["points"]) + 1,
                    "devices_answered": charged,
                    "epsilon_devices": device_units[key] / NANO,
                }
            )
    history = approval_history(analysis)
    guarantees = analysis_guarantees(analysis)
    for key, scope in scopes.items():
        spent = guarantees.get(key) or guarantees[None]
        scope["guarantee"] = {"epsilon": spent.epsilon, "delta": spent.delta, "account": spent.account}
    for scope in scopes.values():
        scope["allowed_steps"] = _allowed_steps(history, scope["field"])
        last = scope["points"][-1] if scope["points"] else {"epsilon": 0.0, "reports": 0}
        scope["epsilon_used"], scope["reports_used"] = last["epsilon"], last["reports"]
        # What the devices were actually charged, apart from what was requested (rounds no device
        # answered, for instance every device refusing, spent nothing on them).
        scope["epsilon_spent_by_devices"] = last.get("epsilon_devices", 0.0)
        scope["reports_spent_by_devices"] = scope.pop("devices_reports", 0)
        scope["epsilon_remaining"] = _remaining(scope["epsilon_allowed"], last["epsilon"])
        scope["reports_remaining"] = _remaining(scope["reports_allowed"], last["reports"])
    return {
        "analysis": analysis.identifier,
        "accountant": enforced.accountant,
        "delta": enforced.delta,
        "delta_total": enforced.delta_total,
        "approved_at": analysis.approved_at,
        # When the lines start: the first approval (no round starts before one), else the creation.
        "allowance_from": history[0][0] if history else analysis.created_at,
        "counting": "Requested: every round started counts in full, failed and cancelled ones included "
        "(basic composition: the sum of the rounds' epsilons); the server plans with it. Spent by devices: "
        "only rounds some device answered. Guarantee: what a device that answered every round started has "
        "spent, as one (epsilon, delta) statement composed by the analysis's accountant, its total delta "
        "included (each round's delta adds up; advanced composition adds the analysis delta to that sum, "
        "the Renyi account's conversion has the analysis delta alone).",
        "scopes": list(scopes.values()),
    }


def approval_history(analysis: Analysis) -> list[tuple[Any, EnforcedPolicy]]:
    """The policies devices were sent for ``analysis``, oldest first, each with when it was approved.

    Every approval is recorded (PolicyApproval). Analyses approved before that record existed are
    rebuilt from their snapshots (content-addressed, created when that content was first approved,
    ``approved_at`` the latest approval), which cannot see a return to an earlier policy (A, B, A,
    B): those earlier approvals come first, then the recorded ones. Snapshots older than the
    analysis belong to an earlier analysis of the same identifier.
    """
    if analysis.snapshot_id is None:
        return []
    recorded = [(a.approved_at, a.snapshot.content) for a in analysis.approvals.select_related("snapshot")]
    before = recorded[0][0] if recorded else None
    snapshots = PolicySnapshot.objects.filter(
        content__analysis=analysis.identifier, created_at__gte=analysis.created_at
    ).order_by("created_at", "pk")
    if before is not None:
        snapshots = snapshots.filter(created_at__lt=before)
    history = [(s.created_at, s.content) for s in snapshots if s.content.get("fleet") == analysis.fleet.name]
    history += recorded
    if not recorded and (not history or history[-1][1] != analysis.snapshot.content):
        history.append((analysis.approved_at, analysis.snapshot.content))
    return [(at, EnforcedPolicy.from_content(content)) for at, content in history]


def _allowed_steps(history: list[tuple[Any, EnforcedPolicy]], field: str | None) -> list[dict[str, Any]]:
    """What ``field`` (None: the analysis) was allowed from each approval that changed it, in order."""
    steps: list[dict[str, Any]] = []
    for at, policy in history:
        if field is None:
            allowed = (policy.epsilon_allowed, policy.reports_allowed)
        else:
            budget = next((b for b in policy.field_budgets if b.field == field), None)
            allowed = (budget.epsilon, budget.reports) if budget is not None else (None, None)
        if steps and (steps[-1]["epsilon"], steps[-1]["reports"]) == allowed:
            continue  # an approval that left this scope's budget as it was
        steps.append({"at": at, "epsilon": allowed[0], "reports": allowed[1]})
    return steps


def _scope(label: str, field: str | None, epsilon: float | None, reports: int | None) -> dict[str, Any]:
    return {"scope": label, "field": field, "epsilon_allowed": epsilon, "reports_allowed": reports, "points": []}


def _remaining(allowed: float | None, used: float) -> float | None:
    """What is left; never below 0 (a policy lowered after rounds ran leaves nothing, not a debt)."""
    if allowed is None:
        return None
    if isinstance(allowed, int) and isinstance(used, int):
        return max(allowed - used, 0)
    return max(to_units(allowed) - to_units(used), 0) / NANO


def burndown_table(burndown: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per round started, with every scope's cumulative use after it (the chart as a table)."""
    scopes = burndown["scopes"]
    analysis_points = scopes[0]["points"]
    by_round = [{p["round"]: p for p in scope["points"]} for scope in scopes]
    rows, running = [], [{"epsilon": 0.0, "reports": 0} for _ in scopes]
    for point in analysis_points:
        cells = []
        for i, points in enumerate(by_round):
            charged = point["round"] in points
            if charged:
                running[i] = points[point["round"]]
            cells.append({"epsilon": running[i]["epsilon"], "reports": running[i]["reports"], "charged": charged})
        rows.append({**point, "cells": cells})
    return rows


# ---------------------------------------------------------------- audit


def audit_rounds(analysis: Analysis) -> QuerySet[Round]:
    """Every round of the analysis, newest first, whatever its status, with the reports it released."""
    return (
        Round.objects.filter(recipe__analysis=analysis)
        .select_related("recipe", "created_by")
        # Only the count is read from the release, not its (possibly large) estimates.
        .annotate(reports_released=Cast(KeyTextTransform("reports", "release__content"), IntegerField()))
        .order_by("-created_at", "-pk")
    )


def audit_adaptive_runs(analysis: Analysis) -> list[AdaptiveRun]:
    """The adaptive runs that started rounds here: the analysis's own, and runs whose baseline it holds."""
    runs = AdaptiveRun.objects.filter(
        Q(analysis=analysis) | Q(spec__baseline__analysis=analysis.identifier)
    ).select_related("created_by", "analysis")
    return list(runs.order_by("-created_at", "-pk"))


def adaptive_round_starters(runs: Iterable[AdaptiveRun]) -> dict[int, AdaptiveRun]:
    """Round id → the adaptive run that started it (its levels, its baseline, the round it waits on)."""
    starters: dict[int, AdaptiveRun] = {}
    for run in runs:
        round_ids = [entry["round"] for entry in (*run.levels, *run.baseline) if "round" in entry]
        if run.current_round_id is not None:
            round_ids.append(run.current_round_id)
        starters.update(dict.fromkeys(round_ids, run))
    return starters


def adaptive_run_summary(run: AdaptiveRun, starters: Mapping[int, AdaptiveRun]) -> dict[str, Any]:
    return {
        "id": run.pk,
        "analysis": run.analysis.identifier,
        "kind": run.kind,
        "kind_label": run.get_kind_display(),
        "status": run.status,
        "created_by": run.created_by.get_username(),
        "created_at": run.created_at,
        "finished_at": run.finished_at,
        "rounds": sorted(pk for pk, started_by in starters.items() if started_by.pk == run.pk),
        "stop_reason": run.stop_reason,
    }


def audit_row(round_: Round, starters: Mapping[int, AdaptiveRun]) -> dict[str, Any]:
    """Who started a round, when, with what parameters, and how it ended."""
    recipe = round_.recipe
    run = starters.get(round_.pk)
    return {
        "round": round_.pk,
        "status": round_.status,
        "status_label": round_.get_status_display(),
        "created_by": round_.created_by.get_username(),
        "created_at": round_.created_at,
        "started_at": round_.started_at,
        "finished_at": round_.finished_at,
        "recipe": recipe.identifier,
        "field": recipe.encoded_field,
        **recipe.privacy.as_json(),  # noise, mechanism, epsilon0, epsilon, delta, sampling_rate, min_cohort
        "reports_released": getattr(round_, "reports_released", None),
        "error": round_.error,
        "adaptive_run": {"id": run.pk, "kind": run.kind} if run is not None else None,
    }


AUDIT_CSV_COLUMNS = [
    "round",
    "status",
    "created_by",
    "created_at",
    "started_at",
    "finished_at",
    "recipe",
    "field",
    *PRIVACY_KEYS,
    "reports_released",
    "adaptive_run",
    "error",
]


def audit_csv_row(row: dict[str, Any]) -> dict[str, Any]:
    """An audit row flattened for CSV: dates in ISO 8601, the adaptive run as its id."""
    flat = {k: row[k] for k in AUDIT_CSV_COLUMNS}
    for key in ("created_at", "started_at", "finished_at"):
        flat[key] = row[key].isoformat() if row[key] else ""
    flat["adaptive_run"] = row["adaptive_run"]["id"] if row["adaptive_run"] else ""
    return {k: "" if v is None else v for k, v in flat.items()}


# ---------------------------------------------------------------- policy


def policy_summary(analysis: Analysis) -> dict[str, Any]:
    """The approved policy (the snapshot devices enforce), who approved it, and any edit not yet approved.

    Devices enforce the snapshot taken at approval; the live rows (``Analysis.edited_policy``) take
    effect only when a privacy officer approves again.
    """
    live = analysis.edited_policy()
    snapshot = analysis.snapshot
    policy = snapshot.content if snapshot else live
    accountants = dict(Analysis._meta.get_field("accountant").choices)
    return {
        "analysis": analysis.identifier,
        "status": analysis.status,
        "approved_by": analysis.approved_by.get_username() if analysis.approved_by else None,
        "approved_at": analysis.approved_at,
        "snapshot_digest": snapshot.digest if snapshot else None,
        # Before approval there is no snapshot: the policy shown is the one awaiting approval.
        "policy": policy,
        # Snapshots taken before accountants were pluggable name none: they compose basically.
        "accountant_label": accountants.get(policy["budget"].get("accountant", "basic"), "unknown"),
        "delta_total_max": delta_total_max(policy["budget"]),
        "unbudgeted_fields": [f for f in policy["queryClass"]["fields"] if f not in policy["fields"]],
        "pending_changes": live if snapshot is not None and snapshot_digest(live) != snapshot.digest else None,
        "pending_lines": analysis.pending_changes,
    }


def delta_total_max(budget: dict[str, Any]) -> float:
    """The largest total delta a device's guarantee can reach under ``budget``: every report spent,
    each at the largest delta a query may claim, plus delta' where advanced composition may give the
    epsilon (pfs_device.budget.Accountant.guarantee); never more than the officer's cap
    (budget.deltaTotal), which devices enforce."""
    delta, reports = budget["delta"], budget["reports"]
    with_delta_prime = budget.get("accountant", "basic") in ("advanced", "tightest")
    total = math.fsum([delta] * reports + ([delta] if with_delta_prime else []))
    cap = budget.get("deltaTotal")
    return total if cap is None else min(total, cap)


# ---------------------------------------------------------------- comparing two releases

COMPARE_LEVEL = ReleaseView.LEVEL


def compare_ids(params: Mapping[str, Any]) -> tuple[int, int]:
    """The round ids ``a`` and ``b`` of a comparison; ValidationFailed per parameter."""
    problems = Problems()
    ids = {}
    for key in ("a", "b"):
        text = str(params.get(key) or "").strip()
        if not text:
            problems.add(key, "Required: the id of a released round.")
        elif not text.isdecimal() or int(text) < 1:
            problems.add(key, "Must be a round id (a positive whole number).")
        else:
            ids[key] = int(text)
    if not problems and ids["a"] == ids["b"]:
        problems.add("b", "Must be another round than a.")
    if problems:
        raise ValidationFailed(problems.errors)
    return ids["a"], ids["b"]


def released_rounds(*, user: AbstractBaseUser) -> QuerySet[Round]:
    """The released rounds the user may read and compare, newest first (what a comparison can
    choose from): not a Poplar1 walk's, whose release is words, not buckets (release_compare
    refuses it)."""
    visible = selectors.analysis_list(user=user)
    return (
        Round.objects.filter(status=Round.Status.RELEASED, recipe__analysis__in=visible)
        # A histogram's release has no "kind": SQL's NULL would drop it from a bare exclude.
        .filter(Q(release__content__kind__isnull=True) | ~Q(release__content__kind=WALK_KIND))
        .select_related("recipe__analysis")
        .order_by("-created_at", "-pk")
    )


def release_compare(*, user: AbstractBaseUser, a: int, b: int) -> dict[str, Any]:
    """Two released rounds side by side, bucket by bucket and cohort by cohort, with B − A.

    Each estimate, error and interval is the release's own (``release_as_json``, per-bucket 95%
    intervals, raw view). The two releases use independent noise, so the difference has standard
    error sqrt(se_A² + se_B²); it is significant at 95% when |B − A| > z · se (z = 1.96).
    A round the user may not read is a 404 (``round_get``); one not released is ValidationFailed.
    """
    rounds = {"a": selectors.round_get(user=user, pk=a), "b": selectors.round_get(user=user, pk=b)}
    problems = Problems()
    for key, round_ in rounds.items():
        if round_.status != Round.Status.RELEASED:
            problems.add(
                key,
                f"Round {round_.pk} is {round_.get_status_display().lower()}, not released: "
                "only released rounds can be compared.",
            )
        elif is_walk(round_.release.content):
            problems.add(
                key,
                f"Round {round_.pk} walked a Poplar1 prefix tree: its release is the words found, not "
                "buckets, so it cannot be compared bucket by bucket. Its round page lists them.",
            )
    if problems:
        raise ValidationFailed(problems.errors)
    view = ReleaseView()
    releases = {key: release_as_json(round_.release, view) for key, round_ in rounds.items()}
    labels = {key: round_.release.content["buckets"] for key, round_ in rounds.items()}
    z = z_value(level=COMPARE_LEVEL, cells=1, intervals="per-bucket")
    batches = {key: {batch["cohort"]: batch for batch in release["batches"]} for key, release in releases.items()}
    _derive_total(batches, z)
    cohorts = _union(batches["a"], batches["b"])
    return {
        "a": _side(rounds["a"], releases["a"]),
        "b": _side(rounds["b"], releases["b"]),
        "level": COMPARE_LEVEL,
        "z": z,
        "difference": "b - a",
        "cohorts": [
            _cohort_compare(cohort, batches["a"].get(cohort), batches["b"].get(cohort), labels, z) for cohort in cohorts
        ],
        "notes": _compare_notes(rounds["a"], rounds["b"], batches),
    }


def _derive_total(batches: dict[str, dict[str, dict]], z: float) -> None:
    """Where one release is unsplit (its one batch, cohort "") and the other split by cohort, give the
    split one its total over cohorts (release_total_over_cohorts) as its "" batch, first, to compare
    with the unsplit one: without it every row of the comparison was "—" (issue 31, item 5)."""
    for key, other in (("a", "b"), ("b", "a")):
        if set(batches[other]) == {""} and batches[key] and "" not in batches[key]:
            total = release_total_over_cohorts(list(batches[key].values()), z=z)
            if total is not None:
                batches[key] = {"": total, **batches[key]}


def _union(first: Iterable[str], second: Iterable[str]) -> list[str]:
    """Both sequences' items, each once: the first's order, then the second's new ones."""
    return list(dict.fromkeys([*first, *second]))


def _side(round_: Round, release: dict[str, Any]) -> dict[str, Any]:
    recipe = round_.recipe
    return {
        "round": round_.pk,
        "analysis": recipe.analysis.identifier,
        "recipe": recipe.identifier,
        "field": recipe.encoded_field,
        **recipe.privacy.as_json(),  # noise, mechanism, epsilon0, epsilon, delta, sampling_rate, min_cohort
        "noise_label": recipe.noise_label,
        "reports": release["reports"],
        "epsilon_spent": release["epsilon_spent"],
        "released_at": round_.release.created_at,
    }


def _cohort_compare(
    cohort: str, batch_a: dict | None, batch_b: dict | None, labels: dict[str, list[str]], z: float
) -> dict[str, Any]:
    """One cohort's buckets, aligned by label; a side without the bucket (or the batch) is None."""
    sides = {"a": batch_a, "b": batch_b}
    incomplete = any(batch and batch.get("derived", {}).get("missing") for batch in sides.values())
    estimates = {
        key: {bucket["label"]: bucket for bucket in batch.get("buckets", [])} if batch else {}
        for key, batch in sides.items()
    }
    buckets = []
    for label in _union(labels["a"], labels["b"]):
        a, b = estimates["a"].get(label), estimates["b"].get(label)
        row: dict[str, Any] = {
            "label": label,
            "a": _estimate(a),
            "b": _estimate(b),
            "difference": None,
            "standard_error": None,
            "significant": None,
        }
        if a is not None and b is not None:
            difference = b["estimate"] - a["estimate"]
            error = math.hypot(a["standard_error"], b["standard_error"])
            # A total derived without its suppressed cohorts undercounts: no significance is claimed.
            significant = None if incomplete else abs(difference) > z * error
            row.update(difference=difference, standard_error=error, significant=significant)
        buckets.append(row)
    return {
        "cohort": cohort,
        "a": _batch_state(batch_a),
        "b": _batch_state(batch_b),
        "buckets": buckets,
    }


def _estimate(bucket: dict | None) -> dict[str, Any] | None:
    if bucket is None:
        return None
    low, high = bucket["ci95"]
    # margin: the interval's half-width (raw view, so the interval is symmetric): "estimate ± margin".
    return {**{k: bucket[k] for k in ("estimate", "standard_error", "ci95")}, "margin": (high - low) / 2}


def _batch_state(batch: dict | None) -> dict[str, Any]:
    if batch is None:
        return {"present": False, "suppressed": False, "reports": None, "reason": "No such cohort in this release."}
    return {
        "present": True,
        "suppressed": batch["suppressed"],
        "reports": batch["reports"],
        "reason": batch.get("reason", ""),
        "derived": batch.get("derived"),
    }


def _compare_notes(round_a: Round, round_b: Round, batches: dict) -> list[str]:
    """What makes the two releases less comparable than they look."""
    a, b = round_a.recipe, round_b.recipe
    notes = []
    if a.encoded_field != b.encoded_field:
        notes.append(
            f"The releases histogram different fields ({a.encoded_field} and {b.encoded_field}): "
            "buckets are matched by label only."
        )
    if a.privacy.sampling_rate != b.privacy.sampling_rate:
        notes.append(
            f"Sampling rates differ ({a.privacy.sampling_rate:g} and {b.privacy.sampling_rate:g}): estimates count "
            "reporting devices, so they scale with the rate."
        )
    # A release whose every batch was suppressed (or that has none) released no count at all: that,
    # not its cohorts, is why nothing can be compared.
    empty = [key.upper() for key in ("a", "b") if all(batch["suppressed"] for batch in batches[key].values())]
    if empty:
        which = " and ".join(f"Release {key}" for key in empty)
        notes.append(
            f"{which} released no count: every cohort was below its minimum cohort, so there is "
            f"nothing to compare{' with it' if len(empty) == 1 else ''}."
        )
    elif set(batches["a"]) != set(batches["b"]):
        notes.append("The releases are split into different cohorts: a cohort found in one only has no difference.")
    for key in ("a", "b"):
        derived = batches[key].get("", {}).get("derived")
        if derived:
            note = (
                f"Release {key.upper()} is split by cohort and the other is not: its total over all devices is "
                f"derived, the sum of its cohorts' estimates ({', '.join(derived['from'])}), with standard "
                "error the square root of the sum of their variances (the cohorts are disjoint, their noise "
                "independent), and compared with the other's."
            )
            if derived["missing"]:
                note += (
                    f" Cohorts {', '.join(derived['missing'])} were suppressed and are not in it: the derived "
                    "total undercounts, so no difference is called significant."
                )
            notes.append(note)
    notes.append(
        "Significance is per bucket at 95% (|B − A| > 1.96 standard errors of the difference): "
        "about one bucket in twenty whose true counts are equal still looks significant by chance."
    )
    return notes
