"""When a device asks for its token and when it uploads: at random times, so that neither the
issuer's records nor the aggregators' can be joined by time (issue 17, item 4).

The issuer learns which device asked for a token and, however coarsely it records it, in what
order; the aggregators learn in what order reports arrived. If a device fetched its token and
uploaded at once, the two orders would be the same and every report could be attributed to its
device. So, once it has decided to answer, a device draws two independent times from the OS's
CSPRNG:

- its token, uniformly in the first TOKEN_SHARE of the spread: [0, TOKEN_SHARE x spread);
- its upload, uniformly in the rest after a gap: [(TOKEN_SHARE + GAP_SHARE) x spread, spread).

The token always comes first, yet the two draws are independent, so among devices that decide
together the order of the tokens says nothing about the order of the uploads. The uploads stay
spread over 85 % of the collection's spread (PFS_REPORT_SPREAD_SECONDS, served with each task), so
no device's upload is likelier than 1 / (0.85 x spread) per second: the bound rate validation
assumes of honest devices (aggregation.batch_rules).

The spread is the server's to send, and a server that sent 0, or a deadline a few seconds away,
would have every device ask for its token and upload back to back, which joins the two orders
again (issue 29, requirement 3). So the device keeps floors of its own, whatever it is served:

- it paces over at least MIN_SPREAD seconds (``Pacing.min_spread``, the device's own setting:
  the CLI's --min-spread, default MIN_SPREAD; an operator's --spread below it is refused);
- its upload comes at least GAP_SHARE of the spread after its token: the token is drawn in
  [0, TOKEN_SHARE x spread), the upload in [(TOKEN_SHARE + GAP_SHARE) x spread, spread), still
  independently, so at the floor the two are more than MIN_GAP (60 s) apart;
- a task whose deadline (``closes_at`` less DEADLINE_MARGIN) leaves less than its floor is
  declined (TOO_LITTLE_TIME, raised as TooLittleTime): nothing charged, no token, no upload.

MIN_SPREAD is 10 minutes: 60 of the leader's 10-second arrival buckets and 10 of the SDK's default
one-minute polls, a sixth of the default served spread (PFS_REPORT_SPREAD_SECONDS, an hour), so an
honest server never meets it, while a window that closes sooner than that is declined.
"""

from __future__ import annotations

import math
import random
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field

TOKEN_SHARE = 0.05
# The share of the spread between the end of the token phase and the start of the upload phase.
GAP_SHARE = 0.10
# The device's own floor on the spread (seconds), whatever the server sends; see above.
MIN_SPREAD = 600.0
# At the floor, the least time between a device's token and its upload (seconds).
MIN_GAP = GAP_SHARE * MIN_SPREAD
# Uploads end this long before the window's deadline, so that a slow network still makes it.
DEADLINE_MARGIN = 30.0
# The decision a device records for a task whose deadline leaves less than its floor.
TOO_LITTLE_TIME = "too_little_time"


class TooLittleTime(Exception):
    """The task's deadline leaves less time than the device's floor: decline it, do not rush it."""

    def __init__(self, available: float, needed: float) -> None:
        super().__init__(
            f"the window leaves {max(available, 0.0):.0f} s before its deadline (less {DEADLINE_MARGIN:.0f} s "
            f"of margin); this device paces its token and upload over at least {needed:.0f} s"
        )
        self.available = available
        self.needed = needed


@dataclass(frozen=True)
class Plan:
    token_delay: float  # seconds after the decision
    upload_delay: float  # seconds after the decision, always after token_delay


def plan_draw(spread: float, rng: random.Random) -> Plan:
    """The two independent uniform delays over ``spread`` seconds (0: both at once): the token in
    [0, TOKEN_SHARE x spread), the upload in [(TOKEN_SHARE + GAP_SHARE) x spread, spread)."""
    if not spread > 0:
        return Plan(0.0, 0.0)
    phase = TOKEN_SHARE * spread
    opens = phase + GAP_SHARE * spread
    return Plan(token_delay=rng.uniform(0.0, phase), upload_delay=opens + rng.uniform(0.0, spread - opens))


@dataclass
class Pacing:
    """How a device spreads its requests; tests inject the clock, the sleep and the coins.

    ``min_spread``: the device's own floor (seconds), whatever the server or ``spread`` says. Below
    MIN_SPREAD the issuer's and the aggregators' records can be joined: for tests only."""

    spread: float | None = None  # seconds; None: the spread the task is served with
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.time
    rng: random.Random = field(default_factory=secrets.SystemRandom)
    min_spread: float = MIN_SPREAD

    def plan(self, served_spread: float, *, closes_at: float | None = None) -> Plan:
        """The plan for one task: over the chosen spread, never less than ``min_spread``, cut to end
        DEADLINE_MARGIN before the window's deadline. Raises TooLittleTime when that deadline leaves
        less than ``min_spread``."""
        chosen = served_spread if self.spread is None else self.spread
        if not math.isfinite(chosen):  # NaN or infinity from the server: the floor
            chosen = 0.0
        spread = max(chosen, self.min_spread)
        if closes_at is not None:
            available = closes_at - self.clock() - DEADLINE_MARGIN
            if not available >= self.min_spread:  # also NaN
                raise TooLittleTime(available, self.min_spread)
            spread = min(spread, available)
        return plan_draw(spread, self.rng)

    def wait_until(self, start: float, delay: float) -> None:
        remaining = start + delay - self.clock()
        if remaining > 0:
            self.sleep(remaining)
