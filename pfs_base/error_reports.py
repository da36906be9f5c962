"""Error reports to Sentry (or a Sentry-compatible service), only when SENTRY_DSN is set.

sentry-sdk enables its Django and Celery integrations by itself when it finds them: unhandled
exceptions of requests and tasks, and ERROR log lines, become events. No personal data is sent
(the default), and no performance traces unless SENTRY_TRACES_SAMPLE_RATE asks for a share.
"""

from __future__ import annotations


def sentry_start(*, dsn: str, environment: str | None, traces_sample_rate: float) -> None:
    import sentry_sdk  # only when reporting is on: nothing of it loads otherwise

    sentry_sdk.init(dsn=dsn, environment=environment, traces_sample_rate=traces_sample_rate, send_default_pii=False)
