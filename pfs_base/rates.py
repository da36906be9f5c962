"""Request rates as settings write them ("30/minute"); pure, so settings can check them at start-up."""

from __future__ import annotations

import re

from django.core.exceptions import ImproperlyConfigured

RATE_PATTERN = re.compile(r"^(?P<count>[1-9][0-9]*)/(?P<unit>s|sec|second|m|min|minute|h|hour|d|day)$")
SECONDS = {"s": 1, "m": 60, "h": 3_600, "d": 86_400}


def rate_parse(rate: str) -> tuple[int, int]:
    """'30/minute' → (30, 60): requests allowed per window, and the window in seconds."""
    match = RATE_PATTERN.match(rate.strip())
    if match is None:
        raise ImproperlyConfigured(f"A rate must read like 30/minute (per s, m, h or d), not {rate!r}")
    return int(match["count"]), SECONDS[match["unit"][0]]
