"""The data streams a device holds and the fields each exposes to queries.

Field kinds: "number" (a float column, NaN when missing), "category" (an integer code into the
fleet's vocabulary of that name) and "text" (typed phrases, kept as token ids in CSR columns).
"""

from __future__ import annotations

STREAMS: dict[str, dict[str, str]] = {
    # Figure 4 of seed 000 reads age next to the n-grams: the stream joins the profile in.
    "KeyboardNGrams": {"age": "number", "locale": "category", "ngrams": "text"},
    "Profile": {"age": "number", "locale": "category"},
    "ModelMetrics": {"perplexity": "number", "locale": "category"},
}


def field_kind(stream: str, field: str) -> str | None:
    return STREAMS.get(stream, {}).get(field)
