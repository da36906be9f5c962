"""The leader's upload path: a cheap, durable append; both aggregators verify later, in bulk.

    POST /api/device/reports/    body: a report in pfs_device.wire's JSON

What is checked here is what costs nothing per report and needs no secret: the upload rate of the
address (the ``uploads`` rate), the body's size (the hard cap, then the collection's largest
honest report), that the body parses as a report, and that its collection exists and is open.
Then one INSERT stores the body as it came (PendingReport) and the answer is 202 Accepted: the
report is received, not yet verified. aggregation.ingest runs the aggregators' checks on the
pending reports in bulk — from a task at most once a second per collection and process while the
collection is open (with a Celery worker), and always before the collection is released — so a
bad token, a replayed token or a share that does not open is counted as a rejection then, not
answered to the device.

The INSERT names the collection's rules row FOR SHARE and only inserts while it is open: closing
the collection waits for the uploads in flight, and an upload after the close inserts nothing
(409 collection_closed). So every report received before the close is in the drain before the
release, and none after it.

pfs_web.wsgi sends this one path here before Django's middleware (``upload_application``); the
DRF view (aggregation.api) answers the same through ``upload_answer`` where Django serves the
request itself (the test client, the live test server).
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from http import HTTPStatus
from types import SimpleNamespace
from typing import Any

from django.conf import settings
from django.db import close_old_connections, connection
from django.http.request import HttpHeaders
from rest_framework.settings import api_settings
from rest_framework.throttling import BaseThrottle

from aggregation import reports
from aggregation.batch_rules import arrival_coarse
from aggregation.ingest import INGEST_TASK
from aggregation.models import CollectionRules, PendingReport
from pfs_base.api_errors import error_body, server_error_body
from pfs_base.api_limits import window_wait
from pfs_base.rates import rate_parse
from pfs_base.task_queue import task_named
from pfs_device import wire

logger = logging.getLogger("pfs_web.api")

UPLOAD_PATH = "/api/device/reports/"
# Above any honest report of any collection this server runs; a collection's own limit is usually
# far lower. The Django path refuses a body over PFS_API_MAX_BODY_BYTES before a view runs.
HARD_LIMIT = 1_048_576
# How long a process trusts that a collection is open without asking: the INSERT checks it again
# anyway, so a stale entry costs one query on a late upload, never a wrong answer.
OPEN_TTL = 1.0
# How often a process sends the verification task of a collection (with a Celery worker).
INGEST_EVERY = 1.0
# The caches below are per process and bounded: a flood of made-up keys cannot grow them.
CACHE_ENTRIES = 10_000

REASONS = {
    reports.UNKNOWN_COLLECTION: "No collection has this key.",
    reports.COLLECTION_CLOSED: "The collection is closed: it takes no more reports.",
}


@dataclass(frozen=True)
class Answer:
    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)


RECEIVED = Answer(HTTPStatus.ACCEPTED, {"received": True})

# collection key -> (monotonic time it expires, the largest honest body)
_open_limits: dict[str, tuple[float, int]] = {}
# collection key -> monotonic time the verification task was last sent
_ingest_sent: dict[str, float] = {}


def upload_answer(meta: Mapping[str, Any], read: Callable[[int], bytes]) -> Answer:
    """The answer to one upload. ``meta``: the WSGI environ (or request.META); ``read(n)``: the body.

    The body is read only once the rate and its declared size allow it.
    """
    wait = _throttled(meta)
    if wait is not None:
        seconds = max(1, math.ceil(wait))
        detail = f"Request was throttled. Expected available in {seconds} second{'s' if seconds > 1 else ''}."
        return Answer(HTTPStatus.TOO_MANY_REQUESTS, error_body(detail, "throttled"), {"Retry-After": str(seconds)})
    try:
        length = int(meta.get("CONTENT_LENGTH") or 0)
    except ValueError:
        length = 0  # as Django reads an unparsable length: no body
    if length > HARD_LIMIT:
        return _too_large(f"The body is {length:,} bytes; at most {HARD_LIMIT:,} are read.")
    body = read(length) if length > 0 else b""
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, ValueError):
        return _invalid({"non_field_errors": ["The body is not JSON."]})
    except RecursionError:  # nested deeper than the parser goes: no report is anything like it
        return _invalid({"non_field_errors": ["The body is JSON nested too deep to be a report."]})
    key = wire.collection_key_of(data)
    limit = _open_limit(key) if key else None
    if limit is not None and len(body) > limit:
        reports.report_refuse(collection_key=key, reason=reports.REPORT_TOO_LARGE)
        return _too_large(f"The body is {len(body):,} bytes; a report of this collection has at most {limit:,}.")
    try:
        report = wire.report_parse(data)
    except wire.WireError as malformed:
        if key:
            reports.report_refuse(collection_key=key, reason=reports.REPORT_MALFORMED)
        return _invalid(malformed.fields)
    if limit is None or not _append(report.collection_key, body):
        return _refused(report.collection_key)
    _ingest_soon(report.collection_key)
    return RECEIVED


def upload_application(environ: dict[str, Any], start_response: Callable) -> Iterable[bytes]:
    """A WSGI application for POST /api/device/reports/ alone (pfs_web.wsgi routes it here).

    Django's request signals do not run, so the database connection is checked here: reused
    across requests (CONN_MAX_AGE) and closed when it is too old or broken.
    """
    close_old_connections()
    try:
        answer = upload_answer(environ, environ["wsgi.input"].read)
    except Exception:
        logger.exception("Unhandled exception in the upload path")
        answer = Answer(HTTPStatus.INTERNAL_SERVER_ERROR, server_error_body())
    finally:
        close_old_connections()
    payload = json.dumps(answer.body).encode()
    headers = [
        ("Content-Type", "application/json"),
        ("Content-Length", str(len(payload))),
        ("X-Content-Type-Options", "nosniff"),
        *answer.headers.items(),
    ]
    status = HTTPStatus(answer.status)
    start_response(f"{status.value} {status.phrase}", headers)
    return [payload]


# ---------------------------------------------------------------- the steps


def _append(collection_key: str, body: bytes) -> bool:
    """Store the body if the collection is open: one statement, committed on its own. False if not stored."""
    pending, rules = PendingReport._meta.db_table, CollectionRules._meta.db_table
    # FOR SHARE: a close (an UPDATE of the row) waits for this insert, and an insert behind a
    # close sees it closed. SQLite has no row locks; it serialises every write instead.
    lock = " FOR SHARE" if connection.vendor == "postgresql" else ""
    received_at = connection.ops.adapt_datetimefield_value(arrival_coarse())  # issue 17: coarse
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {pending} (collection_key, body, received_at) "  # noqa: S608 (the models' tables)
            f"SELECT %s, %s, %s FROM {rules} WHERE key = %s AND NOT closed{lock}",
            [collection_key, body, received_at, collection_key],
        )
        return cursor.rowcount == 1


def _refused(collection_key: str) -> Answer:
    """The answer for a collection that does not exist or is closed (one query: the rare path)."""
    _open_limits.pop(collection_key, None)
    if CollectionRules.objects.filter(key=collection_key).exists():
        reports.rejections_add(
            collection_key=collection_key,
            counts={(role, reports.COLLECTION_CLOSED): 1 for role in ("leader", "helper")},
        )
        reason, status = reports.COLLECTION_CLOSED, HTTPStatus.CONFLICT
    else:
        reason, status = reports.UNKNOWN_COLLECTION, HTTPStatus.BAD_REQUEST
    return Answer(status, error_body(REASONS[reason], reason))


def _open_limit(collection_key: str) -> int | None:
    """The largest honest body of an open collection; None if it does not exist or is closed."""
    now = time.monotonic()
    cached = _open_limits.get(collection_key)
    if cached is not None and cached[0] > now:
        return cached[1]
    rules = reports.collection_rules_get(collection_key=collection_key)
    if rules is None or rules.closed:
        _open_limits.pop(collection_key, None)
        return None
    if len(_open_limits) >= CACHE_ENTRIES:
        _open_limits.clear()
    limit = reports.upload_body_limit(rules)
    _open_limits[collection_key] = (now + OPEN_TTL, limit)
    return limit


def _ingest_soon(collection_key: str) -> None:
    """Send the collection's verification task, at most once per INGEST_EVERY in this process.

    It runs INGEST_EVERY later, so an upload that sends none finds one still to come: nothing
    waits longer than about twice INGEST_EVERY to be verified. Without a worker (tasks in-process)
    nothing is sent: the drain before the release verifies every report.
    """
    if settings.PFS_TASK_MODE != "celery":
        return
    now = time.monotonic()
    if now - _ingest_sent.get(collection_key, -math.inf) < INGEST_EVERY:
        return
    if len(_ingest_sent) >= CACHE_ENTRIES:
        _ingest_sent.clear()
    _ingest_sent[collection_key] = now
    try:
        task_named(INGEST_TASK).apply_async((collection_key,), countdown=INGEST_EVERY)
    except Exception:  # the report is stored: the drain before the release verifies it anyway
        logger.warning("Could not send the verification of %s", collection_key, exc_info=True)


def _throttled(meta: Mapping[str, Any]) -> float | None:
    """Seconds to wait when the address is over the ``uploads`` rate, else None.

    The same fixed window and key as pfs_base.api_limits.ScopeRateThrottle.
    """
    address = BaseThrottle().get_ident(SimpleNamespace(META=meta, headers=HttpHeaders(meta)))
    rate = _rate(api_settings.DEFAULT_THROTTLE_RATES["uploads"])
    return window_wait(scope="uploads", who=f"addr-{address}", rate=rate)


@lru_cache(maxsize=32)
def _rate(rate: str) -> tuple[int, int]:
    return rate_parse(rate)


def _too_large(detail: str) -> Answer:
    return Answer(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, error_body(detail, "payload_too_large"))


def _invalid(fields: dict[str, list[str]]) -> Answer:
    named = [name for name in fields if name != "non_field_errors"]
    detail = f"Invalid input: {', '.join(named)}." if named else " ".join(fields["non_field_errors"])
    return Answer(HTTPStatus.BAD_REQUEST, error_body(detail, "invalid", fields))
