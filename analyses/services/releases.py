"""Releases: what a round releases, and how a release is presented (intervals, views, tables, CSV, JSON)."""

from __future__ import annotations

import csv
import io
import math
import re
from typing import Any

from aggregation.reports import rejections
from analyses.models import Recipe, Release, Round
from analyses.validation import Problems
from pfs_base.errors import ValidationFailed
from privacy.aggregator_noise import AggregatorGaussian
from privacy.encoding import CombinationType, Encoding
from privacy.intervals import INTERVALS, VIEWS, present, view_rule, z_value
from privacy.parameters import PRIVACY_KEYS


def release_content(round_: Round, encoding: Encoding, batches: list, progress: dict) -> dict[str, Any]:
    recipe = round_.recipe
    privacy = recipe.privacy
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
        **privacy.as_json(),  # noise, mechanism, epsilon0, epsilon, delta, sampling_rate, min_cohort
        "aggregator_sigma": (
            AggregatorGaussian(privacy.epsilon, privacy.delta).sigma if privacy.aggregator_noise else None
        ),
        "reports": sum(b.reports for b in released),  # suppressed batches' sizes are never released
        # Each answering device spent epsilon once; with no released batch nothing was learned,
        # but the devices were charged all the same.
        "epsilon_spent": privacy.epsilon if progress["devices_answered"] or any(b.answered for b in batches) else 0.0,
        "refusals": progress["devices_not_answering"],
        "rejected_reports": rejections(round_.task_key),
        "batches": [b.as_json() for b in batches],
    }


# Releases stored before suppressed sizes were withheld say "3 reports is below the minimum cohort".
_STORED_SIZE = re.compile(r"^(\w+): [\d,]+ reports is below the minimum cohort of ([\d,]+)$")


def suppressed_shown(batch: dict[str, Any]) -> dict[str, Any]:
    """A suppressed batch as it may be shown: "fewer than m reports", never its exact size, even
    where a release stored before this rule has it."""
    reason = _STORED_SIZE.sub(r"\1: fewer than \2 reports (the minimum cohort)", batch.get("reason", ""))
    return {**batch, "reports": None, "reason": reason}


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
                shown.append(suppressed_shown(batch))
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


def release_table(
    release: Release, view: ReleaseView | None = None, *, buckets: int | None = None
) -> list[dict[str, Any]]:
    """Rows of (cohort, bucket, estimate, error, interval) for tables, CSV and the CLI.

    ``buckets``: only the first that many buckets of each batch (the round page's table), so a
    release of 131,072 buckets per cohort is not turned into rows only to be dropped.
    """
    rows = []
    labels = release.content["buckets"][:buckets]
    for batch in (view or ReleaseView()).batches(release):
        if batch["suppressed"]:
            continue
        for i, label in enumerate(labels):
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
            *PRIVACY_KEYS,
            "aggregator_sigma",
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


# A release page holds at most this many buckets of every batch: the API's JSON stays a few MB
# whatever the release (privacy.limits allows 131,072 buckets per cohort).
PAGE_BUCKETS = 10_000


def release_page(release_json: dict[str, Any], *, offset: int = 0, limit: int = PAGE_BUCKETS) -> dict[str, Any]:
    """One page of a release (``release_as_json``'s shape): every batch's buckets [offset, offset + limit)."""
    total = max((len(b["buckets"]) for b in release_json["batches"] if "buckets" in b), default=0)
    limit = max(1, min(limit, PAGE_BUCKETS))
    page = {**release_json}
    page["batches"] = [
        {**batch, "buckets": batch["buckets"][offset : offset + limit]} if "buckets" in batch else batch
        for batch in release_json["batches"]
    ]
    if "buckets" in release_json:
        page["buckets"] = release_json["buckets"][offset : offset + limit]
    page.update(
        buckets_total=total,
        bucket_offset=offset,
        bucket_limit=limit,
        next_offset=offset + limit if offset + limit < total else None,
    )
    return page


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
