"""Refusals, logged for operators and privacy officers: who asked for what, and why it was refused.

One line per refusal on the ``pfs.audit`` logger. The event's fields go into the log line itself
(pfs_base.logs writes them as top-level JSON keys), so a log pipeline reads them as they are. Logging,
not a table: a refusal is raised inside the transaction it aborts, and a row written there would
be rolled back with it. What devices refuse is in their own audit (devices.ShardRun decisions) and
what the aggregators reject in their counters (aggregation.ReportRejection).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from django.contrib.auth.models import AbstractBaseUser

logger = logging.getLogger("pfs.audit")


def refusal_log(
    *, user: AbstractBaseUser | None, action: str, target: str, reasons: Mapping[str, list[str]] | str
) -> None:
    """Log that ``user`` was refused ``action`` on ``target`` (an analysis, round...) and why."""
    event = {
        "event": "refused",
        "action": action,
        "user": user.get_username() if user is not None else None,
        "target": target,
        "reasons": reasons if isinstance(reasons, str) else {k: list(v) for k, v in reasons.items()},
    }
    logger.warning("refused %s on %s", action, target, extra=event)
