"""A heavy-hitters discovery walked over a Poplar1 collection: the analyst's side of the walk.

Each level asks the candidates privacy.heavy_hitters.WalkPlan chooses from the last level's noisy
counts (a byte a level; the first level every first byte of the alphabet), and the two aggregators
count them (aggregation.heavy_hitters_leader.level_run). What is kept is a function of released
counts only (post-processing), and each level's candidates extend kept prefixes, whose counts are
above the minimum cohort: the aggregators' own rule for the next level. A walk ends when nothing is
kept or its levels are spent; every planned level was charged when the collection was opened, so
an early end spends nothing less and leaks nothing more. Then both aggregators drop the reports.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from aggregation.heavy_hitters import prefix_key
from aggregation.heavy_hitters_leader import collection_finish, level_run
from aggregation.models import CollectionRules
from privacy.heavy_hitters import WalkPlan, finished, level_sigma, prefix_text
from privacy.vdaf.poplar1 import Prefix


@dataclass(frozen=True)
class WalkLevel:
    """One released level: how many prefixes were asked, the noisy counts of those kept (by text),
    the reports verified at it, and the threshold they had to reach."""

    level: int
    asked: int
    kept: dict[str, int]
    reports: int
    threshold: float
    ended: frozenset[str] = frozenset()  # the kept prefixes that end their word (END kept)


@dataclass
class Walk:
    """The words found (a word's count is its noisy count at the level its END was asked, or at the
    last level for a word that fills every byte), each aggregator's sigma, and the levels."""

    words: dict[str, int] = field(default_factory=dict)
    sigma: float = 0.0
    levels: list[WalkLevel] = field(default_factory=list)


def heavy_hitters_walk(collection_key: str, plan: WalkPlan) -> Walk:
    """Walk the collection's prefix tree with ``plan`` and return the words found."""
    rules = CollectionRules.objects.get(key=collection_key)
    if plan.bits != rules.length or plan.levels > (rules.levels or 0):
        raise ValueError("the plan's bits and levels must be the collection's")
    sigma = level_sigma(rules.noise_epsilon, rules.noise_delta, rules.levels)
    threshold = plan.threshold(sigma, rules.min_cohort)
    walk = Walk(sigma=sigma)
    candidates: list[Prefix] = plan.first()
    for step in range(plan.levels):
        if not candidates:
            break
        release = level_run(collection_key, (8 * (step + 1) - 1, candidates))
        counts = {prefix: release.counts[prefix_key(prefix)] for prefix in candidates}
        kept = plan.keep(counts, threshold)
        walk.levels.append(
            WalkLevel(
                level=release.level,
                asked=len(candidates),
                kept={prefix_text(prefix): counts[prefix] for prefix in kept},
                reports=release.reports,
                threshold=threshold,
                ended=frozenset(prefix_text(prefix) for prefix in kept if finished(prefix)),
            )
        )
        last = step == plan.levels - 1
        for prefix in kept:
            if finished(prefix) or last:
                walk.words[prefix_text(prefix)] = counts[prefix]
        candidates = plan.next(kept)
    # Nothing more will be asked: neither aggregator keeps the devices' shares any longer.
    collection_finish(collection_key)
    return walk
