"""How a release is written out: tables, CSV, the JSON of the API and the CLI, and its pages.

Presentation only: what a round releases (release_content) and how its estimates are shown (the
intervals and views of ReleaseView, the suppressed sizes withheld) are the services' rules
(analyses.services.releases); everything here is built from ReleaseView.batches.
"""

from __future__ import annotations

import csv
import io
import math
import re
from typing import Any

from analyses.models import Recipe, Release, Round
from analyses.services.releases import ReleaseView, is_walk, refusals_shown
from privacy.aggregator_noise import AggregatorLaplace
from privacy.heavy_hitters import Poplar1WordsType
from privacy.intervals import view_rule, z_value
from privacy.parameters import PRIVACY_KEYS


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
    """The release table (release_table) as CSV text with a header row, for the dashboard and the API;
    a walk's release (no buckets) as the words it found (walk_as_csv)."""
    if is_walk(release.content):
        return walk_as_csv(release.content)
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=RELEASE_CSV_COLUMNS)
    writer.writeheader()
    writer.writerows(release_table(release, view))
    return out.getvalue()


WALK_CSV_COLUMNS = ("word", "count", "standard_error", "complete")


def walk_as_csv(content: dict[str, Any]) -> str:
    """A walk's words found as CSV text, largest count first: a word not ``complete`` fills every
    byte, so it may be the start of a longer word. The levels are in the JSON."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=WALK_CSV_COLUMNS)
    writer.writeheader()
    writer.writerows({k: word[k] for k in WALK_CSV_COLUMNS} for word in content["walk"]["words"])
    return out.getvalue()


def walks(recipe: Recipe) -> bool:
    """Whether a recipe's rounds walk a Poplar1 prefix tree (a Poplar1Words recipe): their release is
    the words found, not a histogram. A recipe whose content no longer parses is shown as a histogram's,
    as the round page showed every recipe before walks (drilldown.plain_labels reads it as leniently)."""
    try:
        return isinstance(recipe.encoding, Poplar1WordsType)
    except (KeyError, TypeError, ValueError):
        return False


def walk_section(content: dict[str, Any]) -> dict[str, Any]:
    """What the round page shows of a walk's release (analyses.services.releases.walk_release_content):
    the words found with their 95% intervals, the levels, and the noise behind both in words."""
    walk = content["walk"]
    z = z_value(level=ReleaseView.LEVEL, cells=1, intervals="per-bucket")
    words = [
        {
            **word,
            # A word that fills every byte may be cut from a longer one: "hell…" of "hello".
            "shown": word["word"] if word["complete"] else f"{word['word']}…",
            "ci_low": word["count"] - z * word["standard_error"],
            "ci_high": word["count"] + z * word["standard_error"],
        }
        for word in walk["words"]
    ]
    return {
        "content": content,
        "bytes": walk["bits"] // 8,
        "words": words,
        "cut": any(not word["complete"] for word in words),
        "levels": walk["levels"],
        "sigma": content["aggregator_sigma"],
        "standard_error": walk["standard_error"],
        "z": z,
    }


def release_file_name(round_: Round, view: ReleaseView, extension: str) -> str:
    """A download's file name: the analysis, the round and the view, e.g.
    ``demo.keyboard-round-12-thresholded-simultaneous.csv``, so two views of one release saved side
    by side do not overwrite each other (issue 31, item 12). Identifiers are letters, digits, dots,
    dashes and underscores; anything else becomes a dash, so the name is safe in a header."""
    analysis = re.sub(r"[^A-Za-z0-9._-]", "-", round_.recipe.analysis.identifier)
    return f"{analysis}-round-{round_.pk}-{view.view}-{view.intervals}.{extension}"


def release_as_json(release: Release, view: ReleaseView | None = None) -> dict[str, Any]:
    """The release in the CLI's and API's shape: per bucket of each batch, and the round's cost. A
    walk's release is as stored: its counts are named by their prefixes, with no view or interval
    rule to apply to them."""
    if is_walk(release.content):
        return dict(release.content)
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
            "aggregator_laplace_scale",
            "reports",
            "epsilon_spent",
            "analysis_spent",
            "refusals",
            "rejected_reports",
            "joint",
        )
        if k in content  # releases stored before a key existed lack it
    }
    if "refusals" in summary:  # a release stored before the rule may count them where they give sizes
        summary["refusals"] = refusals_shown(
            summary["refusals"], charged=bool(content.get("epsilon_spent")), batches=content["batches"]
        )
    summary.update(view.describe(content))
    summary["notes"] = _release_notes(negative, view, content)
    released = [b for b in batches if not b["suppressed"]]
    # With no cohorts there is one batch: its buckets stand at the top level too.
    if len(batches) == 1 and released:
        summary["buckets"] = released[0]["buckets"]
    return {**summary, "batches": batches}


def release_total_over_cohorts(batches: list[dict[str, Any]], *, z: float) -> dict[str, Any] | None:
    """A split release's total over its released cohorts, as one more batch of ``release_as_json``'s
    shape (cohort ``""``, as an unsplit release's one batch), so it compares with an unsplit release.

    Per bucket the estimate is the sum of the cohorts' estimates and its standard error
    sqrt(Σ se²): the cohorts are disjoint sets of devices with independent noise, so their
    variances add. Its interval is estimate ± z·se. ``derived`` names the cohorts summed and the
    suppressed ones missing from it (their counts are withheld: with any missing the total
    undercounts). None when no cohort was released.
    """
    released = [batch for batch in batches if not batch["suppressed"]]
    if not released:
        return None
    buckets = []
    for i, bucket in enumerate(released[0]["buckets"]):
        estimate = math.fsum(batch["buckets"][i]["estimate"] for batch in released)
        error = math.sqrt(math.fsum(batch["buckets"][i]["standard_error"] ** 2 for batch in released))
        buckets.append(
            {
                "label": bucket["label"],
                "estimate": estimate,
                "standard_error": error,
                "ci95": [estimate - z * error, estimate + z * error],
            }
        )
    return {
        "cohort": "",
        "reports": sum(batch["reports"] for batch in released),
        "min_cohort": max(batch["min_cohort"] for batch in released),
        "suppressed": False,
        "derived": {
            "from": [batch["cohort"] for batch in released],
            "missing": [batch["cohort"] for batch in batches if batch["suppressed"]],
        },
        "buckets": buckets,
    }


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
        added, standard_error = _aggregator_noise_said(content)
        notes.append(
            "Aggregator noise: devices sent their values with no local noise, secret-shared; the leader and "
            f"the helper each added {added}. The guarantee holds if at least one aggregator is honest; "
            f"{standard_error} counts both noises."
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


def _aggregator_noise_said(content: dict) -> tuple[str, str]:
    """(the noise each aggregator added to a release and the calibration behind its guarantee, the
    standard error of a count with both noises)."""
    epsilon = content["epsilon"]
    if content.get("aggregator_laplace_scale") is not None:
        return (
            f"discrete Laplace noise of scale {content['aggregator_laplace_scale']:.4f} (pure epsilon-DP: epsilon "
            f"{epsilon:g} = L1 sensitivity 2 / scale, delta 0)",
            f"the standard error {AggregatorLaplace(epsilon).standard_error():.4f}",
        )
    sigma = content["aggregator_sigma"]
    return (
        f"discrete Gaussian noise with sigma {sigma:.4f} (analytic calibration for epsilon {epsilon:g}, "
        f"delta {content['delta']:g}, L2 sensitivity sqrt 2)",
        f"the standard error sigma * sqrt 2 = {sigma * math.sqrt(2):.4f}",
    )
