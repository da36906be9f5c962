"""The ground floor: web plumbing every app shares, and no app of its own.

Domain errors (``errors``), the API's error format (``api_errors``), body and rate limits
(``api_limits``, ``rates``), the JSON parser (``api_parsers``), the task queue (``task_queue``),
typed environment settings (``env``) and the Redis cache backend (``cache``). Nothing here
imports an app (analyses, devices, aggregation): the import contracts in pyproject.toml say so.
"""
