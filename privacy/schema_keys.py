"""Unknown keys are refused, never ignored: a typo must not silently change what a document says.

``"samplingrate": 0.1`` (for ``samplingRate``) would otherwise leave the sampling rate at its
default of 1: every device answers and spends its budget. Each unknown key is named, with the
known key it most resembles when one is close.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping


def unknown_keys(data: Mapping[str, object], known: Iterable[str]) -> dict[str, str]:
    """Each key of ``data`` that is not ``known``, with a message: "Unknown key; did you mean 'x'?"."""
    known = tuple(known)
    folded = {k.lower(): k for k in known}
    problems = {}
    for key in data:
        if key in known:
            continue
        close = folded.get(str(key).lower()) or next(iter(difflib.get_close_matches(str(key), known, n=1)), None)
        problems[str(key)] = (
            f"Unknown key; did you mean {close!r}?" if close else f"Unknown key; known: {', '.join(known)}."
        )
    return problems
