"""A recipe's dataTypeContent parsed once per recipe, not once per use.

A round reads its recipe's encoding when it starts (the aggregators' batch rules), in every shard
(the devices' task) and when it is aggregated (the estimator and the release). A recipe of 1,023
boundaries takes a third of a millisecond to parse, a prefix tree of thousands of leaves much
longer; and each shard is a task of its own that loads its round anew. So the parse is kept per
recipe in the process, not only on one Recipe object (analyses.models.Recipe.parsed_content).
"""

from __future__ import annotations

import threading
from datetime import datetime

from pfs_device.encode import ParsedContent
from privacy.encoding import content_encoding

# Recipes kept: a worker runs a few rounds at a time; an old entry is dropped first.
KEPT = 64

_parsed: dict[tuple[int, datetime], ParsedContent] = {}
_lock = threading.Lock()


def recipe_content_parsed(recipe_id: int | None, created_at: datetime | None, data_types: dict) -> ParsedContent:
    """``content_encoding(data_types)`` of one stored recipe: parsed on its first use in this process.

    A recipe never changes once stored, so its parse is kept under its id and creation time (an id
    alone may come back: SQLite reuses the largest one after a delete). An unsaved recipe (a dry
    run) has neither and is parsed. Raises content_encoding's errors, and keeps nothing then.
    """
    if recipe_id is None or created_at is None:
        return content_encoding(data_types)
    with _lock:
        kept = _parsed.get((recipe_id, created_at))
    if kept is not None:
        return kept
    parsed = content_encoding(data_types)
    recipe_content_keep(recipe_id, created_at, parsed)
    return parsed


def recipe_content_keep(recipe_id: int, created_at: datetime, parsed: ParsedContent) -> None:
    """Keep ``parsed``, the content of the recipe just stored, as parsed when it was validated."""
    with _lock:
        while len(_parsed) >= KEPT:
            del _parsed[next(iter(_parsed))]  # the oldest: dicts keep insertion order
        _parsed[(recipe_id, created_at)] = parsed
