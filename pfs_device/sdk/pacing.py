"""When a device asks for its token and when it uploads: at random times, so that neither the
issuer's records nor the aggregators' can be joined by time (issue 17, item 4).

The issuer learns which device asked for a token and, however coarsely it records it, in what
order; the aggregators learn in what order reports arrived. If a device fetched its token and
uploaded at once, the two orders would be the same and every report could be attributed to its
device. So, once it has decided to answer, a device draws two independent times from the OS's
CSPRNG:

- its token, uniformly in the first TOKEN_SHARE of the spread: [0, TOKEN_SHARE x spread);
- its upload, uniformly in the rest: [TOKEN_SHARE x spread, spread).

The token always comes first, yet the two draws are independent, so among devices that decide
together the order of the tokens says nothing about the order of the uploads. The uploads stay
spread over 95 % of the collection's spread (PFS_REPORT_SPREAD_SECONDS, served with each task), so
they arrive at 1.05 times the rate rate validation expects, far below the twice it refuses.
"""

from __future__ import annotations

import random
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field

TOKEN_SHARE = 0.05
# Uploads end this long before the window's deadline, so that a slow network still makes it.
DEADLINE_MARGIN = 30.0


@dataclass(frozen=True)
class Plan:
    token_delay: float  # seconds after the decision
    upload_delay: float  # seconds after the decision, always after token_delay


def plan_draw(spread: float, rng: random.Random) -> Plan:
    """The two independent uniform delays over ``spread`` seconds (0: both at once)."""
    if spread <= 0:
        return Plan(0.0, 0.0)
    phase = TOKEN_SHARE * spread
    return Plan(token_delay=rng.uniform(0.0, phase), upload_delay=phase + rng.uniform(0.0, spread - phase))


@dataclass
class Pacing:
    """How a device spreads its requests; tests inject the clock, the sleep and the coins."""

    spread: float | None = None  # seconds; None: the spread the task is served with
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.time
    rng: random.Random = field(default_factory=secrets.SystemRandom)

    def plan(self, served_spread: float, *, closes_at: float | None = None) -> Plan:
        """The plan for one task: over the chosen spread, cut to end before the window's deadline."""
        spread = served_spread if self.spread is None else self.spread
        if closes_at is not None:
            spread = min(spread, max(0.0, closes_at - self.clock() - DEADLINE_MARGIN))
        return plan_draw(spread, self.rng)

    def wait_until(self, start: float, delay: float) -> None:
        remaining = start + delay - self.clock()
        if remaining > 0:
            self.sleep(remaining)
