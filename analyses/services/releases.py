"""Releases: what a round releases, and the rules of showing it (intervals, views, suppressed sizes).

Its formats (tables, CSV, JSON, pages) are analyses.presenters.releases.
"""

from __future__ import annotations

import math
import re
from typing import Any

from aggregation.reports import rejections
from analyses.models import Release, Round
from analyses.rules.validation import Problems
from analyses.services.budget import analysis_spent_statement
from analyses.services.heavy_hitters import Walk
from pfs_base.errors import ValidationFailed
from privacy.aggregator_noise import AggregatorGaussian, AggregatorLaplace, aggregator_noise
from privacy.encoding import CombinationType, Encoding
from privacy.intervals import INTERVALS, VIEWS, miss_probability, present, view_rule, z_value
from privacy.parameters import PrivacyParameters

# A walk's release says so in its "kind" (walk_release_content); the comparison's query filters on it.
WALK_KIND = "heavy_hitters"


def release_content(round_: Round, encoding: Encoding, batches: list, progress: dict) -> dict[str, Any]:
    recipe = round_.recipe
    privacy = recipe.privacy
    released = [b for b in batches if not b.suppressed]
    charged = progress["devices_charged"] or any(b.answered for b in batches)
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
        **_aggregator_noise_parameter(privacy),
        "reports": sum(b.reports for b in released),  # suppressed batches' sizes are never released
        # Each answering device spent epsilon once; with no released batch nothing was learned,
        # but the devices were charged all the same.
        "epsilon_spent": privacy.epsilon if charged else 0.0,
        # The analysis's whole spend as one (epsilon, delta) statement, total delta included.
        "analysis_spent": analysis_spent_statement(recipe.analysis, up_to_round=round_.pk),
        # Counted only where they cannot give a suppressed batch's size (refusals_countable).
        "refusals": refusals_shown(
            progress["devices_not_answering"], charged=charged, batches=[b.as_json() for b in batches]
        ),
        "rejected_reports": rejections(round_.task_key),
        "batches": [b.as_json() for b in batches],
    }


def walk_release_content(round_: Round, walk: Walk | None, progress: dict) -> dict[str, Any]:
    """A Poplar1 round's release: the walk's levels and the words found (analyses.services.heavy_hitters),
    in a release's frame (no buckets, no batches: a walk's counts are named by their prefixes). ``walk``
    None: withheld, its first level below the minimum cohort (whose size is then not released)."""
    recipe = round_.recipe
    privacy = recipe.privacy
    charged = bool(progress["devices_charged"])
    sigma = walk.sigma if walk is not None else None
    error = None if sigma is None else sigma * math.sqrt(2.0)  # both aggregators' noise on each count
    levels = walk.levels if walk is not None else []
    return {
        "analysis": recipe.analysis.identifier,
        "recipe": recipe.identifier,
        "round": round_.pk,
        "field": recipe.encoded_field,
        "kind": WALK_KIND,
        "buckets": [],
        "joint": None,
        **privacy.as_json(),
        "aggregator_sigma": sigma,
        "aggregator_laplace_scale": None,
        "reports": levels[0].reports if levels else 0,
        "epsilon_spent": privacy.epsilon if charged else 0.0,
        "analysis_spent": analysis_spent_statement(recipe.analysis, up_to_round=round_.pk),
        # A withheld walk's reports are fewer than the minimum cohort: the refusals would give them.
        "refusals": refusals_shown(
            progress["devices_not_answering"], charged=charged, batches=[{"suppressed": not levels}]
        ),
        "rejected_reports": {},
        "batches": [],
        "walk": {
            "bits": recipe.encoding.bits,
            "standard_error": error,
            "threshold": levels[0].threshold if levels else None,
            "levels": [
                {
                    "level": level.level,
                    "length": (level.level + 1) // 8,
                    "asked": level.asked,
                    "reports": level.reports,
                    "threshold": level.threshold,
                    # A kept prefix that ends its word (its END byte was asked and kept) is not extended.
                    "kept": [
                        {"prefix": text, "count": count, "end": text in level.ended}
                        for text, count in _largest(level.kept)
                    ],
                }
                for level in levels
            ],
            # A word that fills every byte may be the cut of a longer one ("hell" of "hello"): not complete.
            "words": [
                {
                    "word": word,
                    "count": count,
                    "standard_error": error,
                    "complete": len(word.encode()) < recipe.encoding.bits // 8,
                }
                for word, count in _largest(walk.words if walk is not None else {})
            ],
        },
    }


def is_walk(content: dict[str, Any]) -> bool:
    """Whether a release is a Poplar1 walk's (walk_release_content): the words found and the levels,
    named by their prefixes, with no buckets to show, compare or refine."""
    return content.get("kind") == WALK_KIND


def _largest(counts: dict[str, int]) -> list[tuple[str, int]]:
    return sorted(counts.items(), key=lambda item: (-item[1], item[0]))


def _aggregator_noise_parameter(privacy: PrivacyParameters) -> dict[str, float | None]:
    """Each aggregator's noise parameter: the discrete Gaussian's sigma, or the discrete Laplace's scale
    (a pure epsilon-DP recipe); both None with client noise."""
    noise = aggregator_noise(privacy.epsilon, privacy.delta) if privacy.aggregator_noise else None
    return {
        "aggregator_sigma": noise.sigma if isinstance(noise, AggregatorGaussian) else None,
        "aggregator_laplace_scale": float(noise.scale) if isinstance(noise, AggregatorLaplace) else None,
    }


def refusals_countable(content: dict[str, Any]) -> bool:
    """Whether a release's devices not answering may be counted: the fleet's size minus them is the
    devices that answered, the suppressed batches included, unless no batch was suppressed or no
    device answered (nothing to hide)."""
    return not content.get("epsilon_spent") or not any(b["suppressed"] for b in content["batches"])


def refusals_shown(refusals: dict[str, Any], *, charged: bool, batches: list[dict[str, Any]]) -> dict[str, Any]:
    """The refusals by reason as they may be shown: the reasons with None for counts where counting
    them would give the suppressed batches' total size (refusals_countable)."""
    if refusals_countable({"epsilon_spent": charged, "batches": batches}):
        return refusals
    return dict.fromkeys(refusals)


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
        z = self._standard_errors_wide(release.content, cells)
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

    def _standard_errors_wide(self, content: dict[str, Any], cells: int) -> float:
        """How many standard errors each side of an estimate its interval reaches: the normal quantile,
        or with discrete Laplace noise the exact quantile of both aggregators' noise (its tails are
        heavier than the normal's: a normal quantile would cover less than the level)."""
        if content.get("aggregator_laplace_scale") is None:
            return z_value(level=self.LEVEL, cells=cells, intervals=self.intervals)
        noise = AggregatorLaplace(content["epsilon"])
        miss = miss_probability(level=self.LEVEL, cells=cells, intervals=self.intervals)
        return noise.interval_half_width(miss) / noise.standard_error()

    def describe(self, content: dict[str, Any]) -> dict[str, Any]:
        """The intervals and view chosen, in words, for a release of ``content``."""
        kind = (
            "simultaneous (Bonferroni over every released bucket)" if self.intervals == "simultaneous" else "per bucket"
        )
        method = (
            "exact: estimate ± the quantile of both aggregators' discrete Laplace noise"
            if content.get("aggregator_laplace_scale") is not None
            else "normal approximation: estimate ± z standard errors"
        )
        return {
            "intervals": self.intervals,
            "view": self.view,
            "interval": f"{self.LEVEL:.0%} {kind}, {method}",
            "rule": view_rule(self.view),
        }
