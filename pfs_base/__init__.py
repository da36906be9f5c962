"""The ground floor: web plumbing every app shares, and no app of its own.

Domain errors (``errors``), the API's error format (``api_errors``), body and rate limits
(``api_limits``, ``rates``), the JSON parser (``api_parsers``), the task queue (``task_queue``),
typed environment settings and the .env file (``env``) and the Redis cache backend (``cache``).
Operations: log lines (``logs``), request ids (``request_context``), the probes ``/healthz``,
``/readyz`` and ``/metrics`` (``probes``, ``health``), Prometheus metrics (``metrics``) and error
reports (``error_reports``). Nothing here imports an app (analyses, devices, aggregation): the
import contracts in pyproject.toml say so.
"""
