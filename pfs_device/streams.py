"""The data streams a device holds, the fields each exposes to queries, and how long events are kept.

Field kinds: "number" (a float column, NaN when missing), "category" (an integer code into the
fleet's vocabulary of that name) and "text" (typed phrases, kept as token ids in CSR columns).

Retention (seed 000, section 4: "a retention policy assures that each event is stored on the device
for a limited, approved period of time") applies to streams of events. A shard keeps each typed
phrase with its time (``phrase_time``), so KeyboardNGrams events can expire. Profile and
ModelMetrics hold one current value per device, overwritten when it changes rather than
accumulated, so there is no history to expire: their retention is ``None`` (kept).
"""

from __future__ import annotations

from collections import ChainMap
from collections.abc import Mapping

import numpy as np
import numpy.typing as npt

STREAMS: dict[str, dict[str, str]] = {
    # Figure 4 of seed 000 reads age next to the n-grams: the stream joins the profile in.
    "KeyboardNGrams": {"age": "number", "locale": "category", "ngrams": "text"},
    "Profile": {"age": "number", "locale": "category"},
    "ModelMetrics": {"perplexity": "number", "locale": "category"},
}

# Days an event of each stream is kept on the device; None: the stream holds state, not events.
RETENTION_DAYS: dict[str, int | None] = {
    # Typed text is the most sensitive data a device holds. 30 days cover the several rounds of an
    # interactive n-gram analysis (each round reads what was typed since the last few), and no
    # query needs older text.
    "KeyboardNGrams": 30,
    "Profile": None,  # the user's current age and locale
    "ModelMetrics": None,  # the keyboard model's current perplexity, recomputed in place
}

SECONDS_PER_DAY = 86_400


def field_kind(stream: str, field: str) -> str | None:
    return STREAMS.get(stream, {}).get(field)


def apply_retention(columns: Mapping[str, npt.NDArray], *, now: float) -> tuple[Mapping[str, npt.NDArray], int]:
    """A shard's columns without the keyboard phrases older than the KeyboardNGrams retention.

    A phrase typed at ``t`` is kept when ``t >= now - RETENTION_DAYS["KeyboardNGrams"] days``.
    Returns the new columns (the input is not modified; with nothing expired, the input itself) and
    the number of phrases dropped. The new columns are the rewritten ones (``retention_changes``)
    laid over the input, so that columns retention leaves alone, and not yet read from a shard, stay
    unread.
    """
    changed, dropped = retention_changes(columns, now=now)
    return (ChainMap(changed, columns) if dropped else columns), dropped


def retention_changes(columns: Mapping[str, npt.NDArray], *, now: float) -> tuple[dict[str, npt.NDArray], int]:
    """The columns retention rewrites (the phrases' and their tokens', none when nothing has
    expired) and the number of phrases dropped; see ``apply_retention``.

    The CSR offsets are rebuilt from cumulative sums of the kept phrases, vectorised over the shard.
    """
    if "phrase_time" not in columns:
        # Fail closed: without times nothing shows which phrases have expired.
        raise ValueError("the shard has no phrase_time column; re-create the fleet to give its phrases times")
    days = RETENTION_DAYS["KeyboardNGrams"]
    phrase_time = columns["phrase_time"]
    keep = phrase_time >= now - days * SECONDS_PER_DAY
    dropped = int(keep.size - np.count_nonzero(keep))
    if dropped == 0:
        return {}, 0

    kept_before = np.concatenate([[0], np.cumsum(keep, dtype=np.int64)])
    token_start = columns["token_start"]
    phrase_length = np.diff(token_start)
    return {
        "phrase_start": kept_before[columns["phrase_start"]],
        "phrase_time": phrase_time[keep],
        "token_start": np.concatenate([[0], np.cumsum(phrase_length[keep], dtype=np.int64)]),
        "tokens": columns["tokens"][np.repeat(keep, phrase_length)],
    }, dropped
