"""Log lines: one JSON object per line, or plain text for a terminal (LOG_FORMAT=text).

A JSON line holds the time (UTC), the level, the logger, the message, the id of the request or task
it belongs to (pfs_base.request_context, pfs_web.celery), and every field a caller passed as
``extra`` at the top level: the audit log's lines (analyses.audit_log) are JSON a log pipeline reads
without parsing a message. No Django or Prometheus import here: the settings import this module
before anything is configured.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any

# The id of the request (X-Request-ID) or Celery task this thread is working for; None outside both.
request_id_var: ContextVar[str | None] = ContextVar("pfs_request_id", default=None)

# What every LogRecord carries; anything else on a record came from ``extra``.
_RECORD_FIELDS = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime", "taskName", "request_id"}


def _stamped(factory: Callable[..., logging.LogRecord]) -> Callable[..., logging.LogRecord]:
    """Records made while a request or task runs carry its id, whenever and wherever they are formatted."""

    def make(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = factory(*args, **kwargs)
        record.request_id = request_id_var.get()
        return record

    make.pfs_stamped = True  # type: ignore[attr-defined]
    return make


if not getattr(logging.getLogRecordFactory(), "pfs_stamped", False):
    logging.setLogRecordFactory(_stamped(logging.getLogRecordFactory()))


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        request_id = getattr(record, "request_id", None)
        if request_id is not None:
            line["request_id"] = request_id
        for key, value in record.__dict__.items():
            if key not in _RECORD_FIELDS and not key.startswith("_"):
                line.setdefault(key, value)
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        # default=str: a request object or a datetime in ``extra`` is written as text, never an error.
        return json.dumps(line, default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        record.request_id = getattr(record, "request_id", None) or "-"
        return super().format(record)


def logging_config(*, level: str, style: str) -> dict[str, Any]:
    """Django's LOGGING: every logger through one handler on stderr, in ``style`` (json or text)."""
    formatter = JsonFormatter if style == "json" else TextFormatter
    console = {"handlers": ["console"], "propagate": False}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"line": {"()": f"{formatter.__module__}.{formatter.__qualname__}"}},
        "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "line"}},
        "root": {"handlers": ["console"], "level": level},
        "loggers": {
            # Django's own handlers would print its lines a second time, in another format.
            "django": {**console, "level": level},
            # runserver's access lines: the request middleware writes one per request already.
            "django.server": {**console, "level": "WARNING"},
            "django.db.backends": {"level": "WARNING"},
            # One line per finished task is noise in-process; the metrics count tasks.
            "celery.app.trace": {"level": "WARNING"},
        },
    }
