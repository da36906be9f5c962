"""What is rendered from a release, kept in Django's cache: a release never changes once made.

A release is written once, when its round is released, and nothing edits it (the admin shows it
read-only). So its presentations (the API's JSON, the CSV, the round page's release section) are
computed once per view and served from the cache after that: the round page of a 320-bucket
release costs a cache read instead of rendering 320 table rows.

A key names the release by its id and the instant it was made (ids start again in a new
database, as in tests, and a shared cache may outlive a database), the view asked for, and
RENDERING, which is bumped whenever a presentation changes shape, so an upgrade never serves the
old one. Entries expire after TIMEOUT so the cache does not grow without end. Without the cache
(Redis restarting, say) a presentation is computed for the request, as it was before there was one.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, TypeVar

import redis
from django.core.cache import cache
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils.safestring import mark_safe

from analyses.models import Release, Round
from analyses.presenters import releases
from analyses.reads import drilldown
from analyses.services.releases import ReleaseView, is_walk
from privacy.intervals import INTERVALS, VIEWS

RENDERING = 2
TIMEOUT = 24 * 3600

T = TypeVar("T")
CACHE_ERRORS = (redis.RedisError, OSError)
logger = logging.getLogger("pfs_web.api")


def release_key(release: Release, view: ReleaseView, kind: str, *extra: object) -> str:
    """The cache key of one presentation (``kind``) of ``release`` under ``view``; ``extra`` for
    anything else the presentation depends on."""
    made = release.created_at.timestamp()
    parts = [f"release:{RENDERING}:{release.pk}:{made:.6f}", kind, view.intervals, view.view, *map(str, extra)]
    return ":".join(parts)


def cached(key: str, compute: Callable[[], T]) -> T:
    try:
        value = cache.get(key)
    except CACHE_ERRORS:
        logger.warning("The cache does not answer: %s rendered without it", key, exc_info=True)
        return compute()
    if value is None:
        value = compute()
        try:
            cache.set(key, value, timeout=TIMEOUT)
        except CACHE_ERRORS:
            logger.warning("The cache does not answer: %s not kept", key, exc_info=True)
    return value


def release_json(release: Release, view: ReleaseView) -> dict[str, Any]:
    """releases.release_as_json, cached."""
    return cached(release_key(release, view, "json"), lambda: releases.release_as_json(release, view))


def release_csv(release: Release, view: ReleaseView) -> str:
    """releases.release_as_csv, cached."""
    return cached(release_key(release, view, "csv"), lambda: releases.release_as_csv(release, view))


def release_section(round_: Round, release: Release, view: ReleaseView) -> str:
    """The round page's release section (summary, chart data, table with drill-down links), as HTML;
    a walk's (a Poplar1 round's), its words found and levels.

    Besides the release and the view it shows the drill-down links, which depend on the analysis
    (its identifier, and the cohort fields its query class allows): those are in the key.
    """
    if is_walk(release.content):  # no buckets: nothing to chart, view or drill down into
        key = release_key(release, view, "walk-page", round_.pk)
        return mark_safe(cached(key, lambda: _walk_html(round_, release)))  # noqa: S308 - our template's output
    analysis = round_.recipe.analysis
    unused = ",".join(drilldown.unused_cohort_fields(round_.recipe))
    key = release_key(release, view, "page", round_.pk, analysis.identifier, unused)
    return mark_safe(cached(key, lambda: _section_html(round_, release, view)))  # noqa: S308 - our template's output


# The round page draws and lists at most this many buckets of each cohort; the CSV and the API's
# pages hold them all. A page of 131,072 buckets per cohort would be hundreds of MB of HTML.
PAGE_BUCKETS = 2_000


def _section_html(round_: Round, release: Release, view: ReleaseView) -> str:
    shown = releases.release_page(release_json(release, view), limit=PAGE_BUCKETS)
    refinable = drilldown.refinable_buckets(round_)
    # The page says "OOV" as what it holds; the downloads keep the release's own labels.
    words = drilldown.plain_labels(round_)
    if len(words) == len(refinable):
        shown["batches"] = [
            {**batch, "buckets": [{**b, "label": words[i]} for i, b in enumerate(batch["buckets"])]}
            if "buckets" in batch
            else batch
            for batch in shown["batches"]
        ]
    table = []
    per_batch = min(PAGE_BUCKETS, len(refinable))
    for index, row in enumerate(releases.release_table(release, view, buckets=PAGE_BUCKETS)):
        # release_table lists the first PAGE_BUCKETS buckets of each released batch in order.
        row["bucket_index"] = index % per_batch
        if len(words) == len(refinable):
            row["bucket"] = words[row["bucket_index"]]
        row["refinable"] = refinable[row["bucket_index"]]
        table.append(row)
    context = {
        "round": round_,
        "release_view": view,
        "interval_choices": INTERVALS,
        "view_choices": VIEWS,
        "release_json": shown,
        "truncated": shown["next_offset"] is not None,
        "table": table,
        "drilldown": {
            "url": reverse("analysis-detail", args=[round_.recipe.analysis.identifier]),
            "round": round_.pk,
            "refinable": refinable,
        },
    }
    return render_to_string("analyses/includes/release_section.html", context)


def _walk_html(round_: Round, release: Release) -> str:
    context = {"round": round_, "walk": releases.walk_section(release.content)}
    return render_to_string("analyses/includes/walk_section.html", context)
