"""gunicorn for the production profile: `make serve`, the Procfile's web, deploy/systemd/pfs-web.service.

Sync workers behind nginx, as gunicorn deploys them (bench/README.md measured why). What an operator
tunes comes from the environment, or from .env as the settings read it (docs/deployment.md):

    PFS_BIND         where to listen: 127.0.0.1:8000 (the default), or unix:/run/pfs/web.sock
    WEB_CONCURRENCY  worker processes (default: 2 per core, plus 1)
    PFS_WEB_TIMEOUT  seconds a request may take before its worker is replaced (default 60)
    LOG_LEVEL, LOG_FORMAT   as for the app: gunicorn's own lines are JSON too
"""

from __future__ import annotations

import os
from pathlib import Path

from pfs_base.env import env_choice, env_file_load, env_int, env_str
from pfs_base.logs import logging_config

env_file_load(Path(os.environ.get("PFS_ENV_FILE") or Path(__file__).resolve().parent / ".env"))

wsgi_app = "pfs_web.wsgi:application"
bind = [env_str("PFS_BIND", "127.0.0.1:8000")]
workers = env_int("WEB_CONCURRENCY", 2 * (os.cpu_count() or 1) + 1, minimum=1)
worker_class = "sync"
timeout = env_int("PFS_WEB_TIMEOUT", 60, minimum=1)
graceful_timeout = 30
proc_name = "pfs-web"

# One JSON line per request comes from the app, with its request id (pfs_base.request_context);
# gunicorn's access log would only repeat it without the id.
accesslog = None
errorlog = "-"
_logging = logging_config(
    level=env_choice("LOG_LEVEL", "INFO", ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")),
    style=env_choice("LOG_FORMAT", "json", ("json", "text")),
)
# gunicorn's own lines (booting, a worker that timed out) through the same handler and format.
_logging["loggers"]["gunicorn.error"] = {"handlers": ["console"], "level": "INFO", "propagate": False}
_logging["loggers"]["gunicorn.access"] = {"handlers": [], "propagate": False}
logconfig_dict = _logging


def on_starting(server) -> None:
    # Prometheus multiprocess mode: the folder where every worker writes its counts must exist
    # before a worker imports the app (the settings check it).
    folder = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
    # The helper's workers verify every aggregation job they serve: the compiled FLP query
    # (aggregation.flp_query_jit) is loaded here, once, before they fork, so that each has it from
    # its start and shares its memory with the others; and where it was not compiled at install
    # (`make`), it compiles here (about 15 s), not in a worker, which would time out doing so. The
    # dashboard's workers never verify and never load it.
    if os.environ.get("DJANGO_SETTINGS_MODULE") == "pfs_web.settings_helper":
        from aggregation.flp_query_jit import warm

        warm()


def child_exit(server, worker) -> None:
    # A worker that exited keeps its counters in the folder (they still count); only its live
    # gauges go, as prometheus_client's multiprocess mode asks.
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid)
