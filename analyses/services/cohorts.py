"""Which batches of a recipe are expected to fall below the minimum cohort, before any device spends.

A recipe split by cohort fields releases one batch per value, each meeting the minimum cohort on
its own. A batch below it is suppressed, yet its devices spent their budget: a split that leaves
most batches small wastes most of the round. The server forecasts each batch from what it may
know, and a round expected to leave batches below needs an explicit confirmation to start:

- a simulated fleet: its enrollment, the devices in each batch times the sampling rate (the dry
  run refines it with the devices' own decisions);
- real devices: the batch sizes of the fleet's latest release with the same cohort fields (public:
  they were released), scaled by the sampling rates; a batch suppressed then is "fewer than m".
"""

from __future__ import annotations

from typing import Any

from analyses.models import Analysis, Round
from devices.services import fleet_batch_sizes


def cohort_forecast(
    analysis: Analysis, cohorts: list[str], sampling_rate: float, min_cohort: int
) -> list[dict[str, Any]]:
    """Each expected batch: {cohort, expected (reports, or None when unknown), below, source}."""
    if not cohorts:
        return []
    if not analysis.fleet.is_real:
        sizes = fleet_batch_sizes(fleet=analysis.fleet, cohorts=tuple(cohorts))
        return [
            _row(cohort, round(size * sampling_rate), min_cohort, "the fleet's enrollment times the sampling rate")
            for cohort, size in sorted(sizes.items())
        ]
    return _from_earlier_release(analysis, cohorts, sampling_rate, min_cohort)


def _from_earlier_release(
    analysis: Analysis, cohorts: list[str], sampling_rate: float, min_cohort: int
) -> list[dict[str, Any]]:
    earlier = (
        Round.objects.filter(recipe__analysis__fleet=analysis.fleet, status__in=Round.TERMINAL, release__isnull=False)
        .select_related("recipe", "release")
        .order_by("-finished_at", "-pk")
    )
    for round_ in earlier[:50]:
        if list(round_.recipe.content.get("cohorts", [])) != list(cohorts):
            continue
        scale = sampling_rate / round_.recipe.privacy.sampling_rate
        source = f"round {round_.pk}'s release, scaled by the sampling rates"
        rows = []
        for batch in round_.release.content["batches"]:
            if batch["suppressed"]:
                # Its size was never released: "fewer than m" then; below now unless m grew a lot.
                expected = None
                below = batch["min_cohort"] * scale < min_cohort
                rows.append({"cohort": batch["cohort"], "expected": expected, "below": below, "source": source})
            else:
                rows.append(_row(batch["cohort"], round(batch["reports"] * scale), min_cohort, source))
        return rows
    return []  # nothing released with these cohorts yet: no forecast


def _row(cohort: str, expected: int, min_cohort: int, source: str) -> dict[str, Any]:
    return {"cohort": cohort, "expected": expected, "below": expected < min_cohort, "source": source}


def cohort_release(forecast: list[dict[str, Any]], answering: int, min_cohort: int) -> dict[str, Any]:
    """What a round would release, batch by batch: the one verdict a dry run's headline and its table share.

    Each row's ``below`` is the truth for its batch; a batch can hold no more devices than answer in
    all, so with fewer than ``min_cohort`` answering every batch is below. Without batches (no split,
    or a real fleet nothing was released from yet) the answering total decides. ``release``: "all",
    "some" or "none"; ``released`` and ``suppressed`` name the batches.
    """
    too_few = answering < min_cohort
    rows = [{**row, "below": row["below"] or too_few} for row in forecast]
    released = [row["cohort"] for row in rows if not row["below"]]
    suppressed = [row["cohort"] for row in rows if row["below"]]
    if not rows:
        release = "none" if too_few else "all"
    else:
        release = "all" if not suppressed else "some" if released else "none"
    return {"cohorts": rows, "release": release, "released": released, "suppressed": suppressed}


def cohorts_suppressed(forecast: list[dict[str, Any]]) -> str | None:
    """The batches expected below the minimum cohort, in words ("4 of 5 batches ... en_GB (~900), ...");
    None if none is. What a spend question says before the analyst confirms."""
    below = [row for row in forecast if row["below"]]
    if not below:
        return None
    named = ", ".join(
        f"{row['cohort']} (~{row['expected']:,})" if row["expected"] is not None else f"{row['cohort']} (small)"
        for row in below
    )
    return (
        f"{len(below)} of {len(forecast)} batches are expected below the minimum cohort and would be "
        f"suppressed, though their devices spend budget: {named}."
    )


def small_cohorts_refusal(forecast: list[dict[str, Any]]) -> str | None:
    """Why a start needs a go-ahead for its batches below the minimum cohort, in words; None if none is."""
    suppressed = cohorts_suppressed(forecast)
    if suppressed is None:
        return None
    return f"{suppressed} Confirm to start anyway, or choose fewer cohort fields."
