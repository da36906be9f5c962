"""PFS Studio settings, all read from the environment (see .env.example).

Embedded default: a SQLite file and tasks run in-process in a background thread, so that
`make run` works on a fresh machine. Set DATABASE_URL for PostgreSQL and REDIS_URL for a real
Celery worker consuming from Redis. The production profile (`make serve`, deploy/) is described in
docs/deployment.md.
"""

from __future__ import annotations

import hashlib
import ipaddress
import os
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from pfs_base.env import (
    env_bool,
    env_choice,
    env_file_load,
    env_float,
    env_int,
    env_key,
    env_keys,
    env_list,
    env_str,
)
from pfs_base.logs import logging_config
from pfs_base.rates import rate_parse
from pfs_device.attestation import public_of
from pfs_device.sdk.pacing import MIN_SPREAD

BASE_DIR = Path(__file__).resolve().parent.parent

# This checkout's own settings (`make setup` writes .env: DEBUG on, a generated SECRET_KEY), so that
# manage.py works the same in a plain shell as under make. The environment wins over the file.
env_file_load(Path(os.environ.get("PFS_ENV_FILE") or BASE_DIR / ".env"))

DEBUG = env_bool("DEBUG", False)
SECRET_KEY = env_str("SECRET_KEY")
if SECRET_KEY is None:
    if not DEBUG:
        raise ImproperlyConfigured("SECRET_KEY must be set when DEBUG is off (`make setup` writes one into .env)")
    SECRET_KEY = "insecure-development-key-never-use-in-production"  # noqa: S105
# Keys the simulated devices' coins with each round's seed (devices.services._coins), so a seed
# alone reveals nothing. Rotating it changes only rounds not yet run.
PFS_COIN_SECRET = env_str("PFS_COIN_SECRET") or SECRET_KEY
# Seconds over which real devices are asked to spread their token requests and uploads after they see
# a task (served with each task; the SDK paces over at least its own floor, pfs_device.sdk.pacing).
PFS_REPORT_SPREAD_SECONDS = env_int("PFS_REPORT_SPREAD_SECONDS", 3600, minimum=1)

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["127.0.0.1", "localhost"])


def _proxy_ssl_header(value: str | None) -> tuple[str, str] | None:
    """'X-Forwarded-Proto: https' -> ('HTTP_X_FORWARDED_PROTO', 'https'), as Django's META names it."""
    if value is None:
        return None
    header, colon, expected = (part.strip() for part in value.partition(":"))
    if not colon or not header or not expected:
        raise ImproperlyConfigured(f"SECURE_PROXY_SSL_HEADER must read 'Header-Name: value', not {value!r}")
    return "HTTP_" + header.upper().replace("-", "_"), expected


# HTTPS, when a proxy in front terminates TLS (deploy/nginx). Each setting comes from the
# environment. With DEBUG off, HSTS (a year, sent only on answers over HTTPS) and secure cookies are
# on unless the environment says 0: a browser then never sends the session or the CSRF cookie over
# plain HTTP (browsers count http://localhost and 127.0.0.1 as secure, so `make serve` on a laptop
# still signs in; a script's cookie jar over plain HTTP, as bench/api_load.py's, sets both to 0).
# The redirect to HTTPS and the proxy's header stay off by default: which header a proxy sets is the
# deployment's to say, and a redirect behind a proxy that does not say would loop. deploy/pfs.env
# sets them all, and `manage.py check --deploy` is clean with it (tested).
SECURE_PROXY_SSL_HEADER = _proxy_ssl_header(env_str("SECURE_PROXY_SSL_HEADER"))
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", False)
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 0 if DEBUG else 31_536_000)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", False)
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", False)
SESSION_COOKIE_SECURE = env_bool("SESSION_COOKIE_SECURE", not DEBUG)
CSRF_COOKIE_SECURE = env_bool("CSRF_COOKIE_SECURE", not DEBUG)
# Origins allowed to POST forms (the dashboard's own, as the browser names it: https://pfs.example.org).
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])
for _origin in CSRF_TRUSTED_ORIGINS:
    if not _origin.startswith(("https://", "http://")):
        raise ImproperlyConfigured(f"CSRF_TRUSTED_ORIGINS: {_origin!r} must start with https:// (or http://)")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "drf_spectacular_sidecar",  # Swagger UI and ReDoc as static files: no CDN
    "devices",
    "aggregation",
    "analyses",
    "pfs_web",  # operations commands: worker_health, database_create
]

MIDDLEWARE = [
    # Every request gets an id (X-Request-ID), one log line and its latency in the metrics.
    "pfs_base.request_context.RequestContextMiddleware",
    # /healthz, /readyz and /metrics answer here: before the host check and the HTTPS redirect, so
    # that a load balancer or Prometheus can probe the process by its address over plain HTTP.
    "pfs_base.probes.ProbeMiddleware",
    "django.middleware.security.SecurityMiddleware",
    # Content-Security-Policy on every answer: scripts from this origin only, none inline.
    "pfs_base.security_headers.ContentSecurityPolicyMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",  # static files, from the web process itself
    "pfs_base.api_limits.ApiBodyLimitMiddleware",  # before anything reads a body
    "pfs_base.api_limits.ApiNullCharacterMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "pfs_base.method_not_allowed.MethodNotAllowedPageMiddleware",  # a 405 page in words, not a blank one
    "pfs_base.not_found_page.NotFoundPageMiddleware",  # templates/404.html, not Django's debug page
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "pfs_web.urls"
WSGI_APPLICATION = "pfs_web.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]


SQLITE_PAGE_SIZE = 16_384


def _database(url: str, *, test_sqlite: str) -> dict:
    database = dj_database_url.parse(
        url,
        # Persistent connections: opening one per request costs PostgreSQL a process fork, more
        # than most of our requests. Health checks drop one the server closed.
        conn_max_age=env_int("PFS_DB_CONN_MAX_AGE", 60, minimum=0),
        conn_health_checks=True,
    )
    if database["ENGINE"] == "django.db.backends.postgresql":
        # A database that does not answer fails a request (and /readyz) in seconds, not minutes.
        database.setdefault("OPTIONS", {})["connect_timeout"] = env_int("PFS_DB_CONNECT_TIMEOUT", 5, minimum=1)
    if database["ENGINE"] == "django.db.backends.sqlite3":
        # Shard tasks and page requests write concurrently: wait for the lock instead of failing.
        database.setdefault("OPTIONS", {})["timeout"] = 30
        # Take the write lock when a transaction starts: a deferred transaction that reads, then writes,
        # cannot wait for the lock (SQLite fails it at once with "database is locked").
        database["OPTIONS"]["transaction_mode"] = "IMMEDIATE"
        # Write-ahead log: a commit appends to one file and syncs it once (the default rollback journal
        # syncs a journal and the database, then deletes the journal), and pages read while a shard
        # task writes do not wait for it. Durability is unchanged (synchronous stays FULL).
        # 16 KiB pages, not SQLite's 4 KiB: a shard is a blob of about 0.9 MB per 10,000 devices,
        # stored as a chain of overflow pages, each logged then checkpointed with its own writes, and
        # retention rewrites every shard. Rewriting 100 such blobs took half the CPU and wall clock
        # at 16 KiB (bench/README.md, "What the first round pays"). A small row's commit logs 16 KiB
        # pages instead of 4. A page size is fixed when the file is created: an existing database
        # keeps its own (docs/deployment.md says how to convert one).
        database["OPTIONS"]["init_command"] = f"PRAGMA page_size={SQLITE_PAGE_SIZE}; PRAGMA journal_mode=WAL"
        # A file, not memory, so that a Celery worker process can share the test database.
        database["TEST"] = {"NAME": test_sqlite}
    return database


def _store_database_url(default_url: str, role: str) -> str:
    """A role's own store (seed 003, 4.3; "issuer" or "helper"): <ROLE>_DATABASE_URL, or beside the
    default one — its own SQLite file <role>.sqlite3 in the default file's folder (var/ on the
    embedded default), or on the same PostgreSQL server a database named <name>_<role>."""
    explicit = env_str(f"{role.upper()}_DATABASE_URL")
    if explicit:
        return explicit
    if default_url.startswith("sqlite:"):
        path = dj_database_url.parse(default_url)["NAME"]
        folder = Path(path).parent if path and path != ":memory:" else BASE_DIR / "var"
        return f"sqlite:///{folder / f'{role}.sqlite3'}"
    base, slash, name = default_url.partition("?")[0].rpartition("/")
    if not slash or not name:
        raise ImproperlyConfigured(f"DATABASE_URL names no database: set {role.upper()}_DATABASE_URL too")
    query = default_url.partition("?")[2]
    return f"{base}/{name}_{role}" + (f"?{query}" if query else "")


# Separated stores (pfs_base.db_router): the token issuer keeps its keys and its records of who got a
# token in a database of its own, so the aggregators' stores hold nothing to join them with; the
# helper keeps its shares, its records and its private keys in another, so the leader's holds none.
_DEFAULT_DATABASE_URL = env_str("DATABASE_URL", f"sqlite:///{BASE_DIR / 'var' / 'pfs.sqlite3'}")
DATABASES = {
    "default": _database(
        _DEFAULT_DATABASE_URL, test_sqlite=env_str("TEST_SQLITE_PATH", str(BASE_DIR / "var" / "test.sqlite3"))
    ),
    "issuer": _database(
        _store_database_url(_DEFAULT_DATABASE_URL, "issuer"),
        test_sqlite=env_str("TEST_ISSUER_SQLITE_PATH", str(BASE_DIR / "var" / "test-issuer.sqlite3")),
    ),
}
# The helper's store: its own service's database (pfs_web.settings_helper). The leader reaches the
# helper over HTTP only (aggregation.helper_client) and has no connection to it, but in the unit
# tests, which run the helper's views in this process (PFS_HELPER_TRANSPORT=in-process).
HELPER_DATABASE = _database(
    _store_database_url(_DEFAULT_DATABASE_URL, "helper"),
    test_sqlite=env_str("TEST_HELPER_SQLITE_PATH", str(BASE_DIR / "var" / "test-helper.sqlite3")),
)
PFS_HELPER_TRANSPORT = env_choice("PFS_HELPER_TRANSPORT", "http", ("http", "in-process"))
if PFS_HELPER_TRANSPORT == "in-process":
    DATABASES["helper"] = HELPER_DATABASE
DATABASE_ROUTERS = ["pfs_base.db_router.StoreRouter"]
# The role this process plays: the leader (with the dashboard, the API and the devices' endpoints),
# or the helper's own service (pfs_web.settings_helper). Each aggregator serves its own HPKE
# configuration at /hpke_config; HELPER_URL is where devices and the leader reach the helper's.
PFS_ROLE = "leader"
# Unset, the helper `make run` starts beside the dashboard: HELPER_HOST and HELPER_PORT, as the Makefile reads them.
HELPER_URL = (
    env_str("HELPER_URL") or f"http://{env_str('HELPER_HOST', '127.0.0.1')}:{env_int('HELPER_PORT', 8001, minimum=1)}"
).rstrip("/")
# The Oblivious HTTP relay (pfs_relay, a third operator's) that `manage.py device_register` names in
# the credentials it writes: devices send their uploads through it, so the leader never sees their
# addresses. Unset, the one `make run` starts beside the dashboard (RELAY_HOST, RELAY_PORT);
# "none" for devices that upload directly (the SDK says, on every run, that the leader sees them).
_relay = env_str("RELAY_URL") or f"http://{env_str('RELAY_HOST', '127.0.0.1')}:{env_int('RELAY_PORT', 8002, minimum=1)}"
RELAY_URL = None if _relay.strip().lower() == "none" else _relay.rstrip("/")
if RELAY_URL is not None and not RELAY_URL.startswith(("http://", "https://")):
    raise ImproperlyConfigured(f"RELAY_URL: {RELAY_URL!r} must be an http:// or https:// URL, or none")
# The leader's requests to the helper (aggregation.helper_client): seconds each, and attempts
# (with backoff, about half a minute in all) before it leaves the work to be resumed.
PFS_HELPER_TIMEOUT = env_float("PFS_HELPER_TIMEOUT", 60.0, minimum=0.1)
PFS_HELPER_ATTEMPTS = env_int("PFS_HELPER_ATTEMPTS", 6, minimum=1)
# The secret the two operators exchange at set-up, from which each collection's aggregator auth
# token is derived (aggregation.dap.auth_token). Both hosts set the same value; unset, it is derived
# from SECRET_KEY, which only works where both services share one .env (the embedded default).
PFS_AGGREGATOR_AUTH_SECRET = (env_str("PFS_AGGREGATOR_AUTH_SECRET") or f"derived from SECRET_KEY|{SECRET_KEY}").encode()
# The helper operator's own rules, which no request of the leader's can lower: the smallest minimum
# cohort it releases a batch at, and whether it takes simulated fleets' collections at all (shares
# made up by the leader's simulator: off for a helper that serves real devices only).
PFS_HELPER_MIN_COHORT_FLOOR = env_int("PFS_HELPER_MIN_COHORT_FLOOR", 0)
PFS_HELPER_ACCEPT_SIMULATED = env_bool("PFS_HELPER_ACCEPT_SIMULATED", True)
# The least time (seconds) each aggregator's operator trusts real devices to pace their uploads over:
# the devices' own floor (pfs_device.sdk.pacing.MIN_SPREAD, 600 s), whatever the leader serves them.
# Rate validation bounds honest arrivals with it (aggregation.batch_rules); each aggregator reads its
# own, so the leader cannot loosen the helper's. Lower only where devices run with a lower --min-spread (tests).
PFS_DEVICE_MIN_SPREAD = env_float("PFS_DEVICE_MIN_SPREAD", MIN_SPREAD, minimum=1.0)

# Private keys (docs/deployment.md, "Keys"): each of the leader's and the helper's HPKE keys, and the
# issuer's key-wrapping key, from the environment (PFS_<ROLE>_KEY: base64 of 32 bytes, the current
# key first, comma-separated) or a file (PFS_<ROLE>_KEY_FILE, written by `manage.py rotate_keys`);
# neither set: the role's own database (the embedded default).
PFS_KEYS: dict[str, list[bytes]] = {}
PFS_KEY_FILES: dict[str, str | None] = {}
for _role in ("leader", "helper", "issuer"):
    PFS_KEYS[_role] = env_keys(f"PFS_{_role.upper()}_KEY")
    PFS_KEY_FILES[_role] = env_str(f"PFS_{_role.upper()}_KEY_FILE")
    if PFS_KEYS[_role] and PFS_KEY_FILES[_role]:
        raise ImproperlyConfigured(f"set PFS_{_role.upper()}_KEY or PFS_{_role.upper()}_KEY_FILE, not both")


def _development_key(purpose: str) -> bytes:
    """A key for `make run` only (DEBUG): derived from SECRET_KEY, so both services sharing one .env agree."""
    return hashlib.sha256(f"pfs-studio development {purpose}|{SECRET_KEY}".encode()).digest()


# Device attestation (pfs_device.attestation; docs/deployment.md, "Keys"). The attestation authority
# stands for the platform's device attestation: its Ed25519 key (PFS_ATTESTATION_KEY[_FILE], base64 of
# a 32-byte seed) signs devices' public keys (manage.py attestation_sign) and is held by the authority
# alone. The leader (at enrolment) and the issuer (for each token) hold only its public key
# (PFS_ATTESTATION_PUBLIC_KEY[_FILE]). Neither set under DEBUG: a development authority derived from
# SECRET_KEY; neither set with DEBUG off: no device enrols or gets a token (fail closed).
PFS_ATTESTATION_KEY = env_key("PFS_ATTESTATION_KEY")
PFS_ATTESTATION_PUBLIC_KEY = env_key("PFS_ATTESTATION_PUBLIC_KEY")
if DEBUG and PFS_ATTESTATION_KEY is None and PFS_ATTESTATION_PUBLIC_KEY is None:
    PFS_ATTESTATION_KEY = _development_key("attestation authority")
    PFS_ATTESTATION_PUBLIC_KEY = public_of(PFS_ATTESTATION_KEY)
# The issuer's statement key (aggregation.issuer.issued_statement): Ed25519, its own and not any
# collection's blind-signing key (a blind signer signs whatever it is sent). It signs how many tokens
# the issuer gave per collection; the helper, configured with its public key (exchanged at set-up like
# PFS_AGGREGATOR_AUTH_SECRET), validates rates and plausibility against that count. Unset under DEBUG:
# derived from SECRET_KEY (one .env for both services); unset with DEBUG off: the issuer publishes no
# count and the helper takes no batch of real devices (fail closed).
PFS_ISSUER_STATEMENT_KEY = env_key("PFS_ISSUER_STATEMENT_KEY")
PFS_ISSUER_STATEMENT_PUBLIC_KEY = env_key("PFS_ISSUER_STATEMENT_PUBLIC_KEY")
if DEBUG and PFS_ISSUER_STATEMENT_KEY is None and PFS_ISSUER_STATEMENT_PUBLIC_KEY is None:
    PFS_ISSUER_STATEMENT_KEY = _development_key("issuer statements")
    PFS_ISSUER_STATEMENT_PUBLIC_KEY = public_of(PFS_ISSUER_STATEMENT_KEY)

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "analysis-list"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = Path(env_str("STATIC_ROOT", str(BASE_DIR / "var" / "static")))
STATICFILES_DIRS = [BASE_DIR / "static"]
# DEBUG off: `collectstatic` names every file by its content's hash and gzips it, and WhiteNoise
# serves it with a year-long immutable cache header (a changed file gets a new name). DEBUG on:
# files are served as they are, from their folders.
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"
        if DEBUG
        else "whitenoise.storage.CompressedManifestStaticFilesStorage"
    },
}


def _env_rate(name: str, default: str) -> str:
    """A request rate such as 30/minute, checked at start-up."""
    rate = env_str(name, default) or default
    try:
        rate_parse(rate)
    except ImproperlyConfigured as bad:
        raise ImproperlyConfigured(f"{name}: {bad}") from None
    return rate


# The API (docs/api.md): errors in one format (pfs_base.api_errors), request rates per user (or per
# address when anonymous) counted in the cache, and an OpenAPI schema at /api/schema/.
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.PageNumberPagination",
    "PAGE_SIZE": 50,
    "EXCEPTION_HANDLER": "pfs_base.api_errors.api_exception_handler",
    "DEFAULT_PARSER_CLASSES": [
        "pfs_base.api_parsers.JSONParser",  # DRF's, refusing absurdly deep nesting with a 400
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_THROTTLE_CLASSES": ["pfs_base.api_limits.UserRateThrottle", "pfs_base.api_limits.ScopeRateThrottle"],
    "DEFAULT_THROTTLE_RATES": {
        # Reads and everything else a signed-in user does; the round page polls twice a second.
        "user": _env_rate("PFS_API_USER_RATE", "1200/minute"),
        # Anonymous requests (signing in for a token), per client address.
        "anon": _env_rate("PFS_API_ANON_RATE", "60/minute"),
        # Starting rounds and adaptive runs: each one asks every device of a fleet.
        "round_start": _env_rate("PFS_ROUND_START_RATE", "30/minute"),
        # Device reports, per client address: well above a benchmark of 2,000 reports a second
        # from one machine, but a flood from one source stops.
        "uploads": _env_rate("PFS_UPLOAD_RATE", "5000/second"),
    },
    # Proxies in front of the app whose X-Forwarded-For is trusted for the client's address;
    # with 0 the address is the connection's, so a client cannot pick its own.
    "NUM_PROXIES": env_int("PFS_NUM_PROXIES", 0),
}
# Larger request bodies to /api/ are refused with 413 (pfs_base.api_limits.ApiBodyLimitMiddleware).
PFS_API_MAX_BODY_BYTES = env_int("PFS_API_MAX_BODY_BYTES", 1_048_576, minimum=1)

SPECTACULAR_SETTINGS = {
    "TITLE": "PFS Studio API",
    "DESCRIPTION": "Private federated statistics: analyses, recipes, rounds, releases and adaptive runs. "
    "Errors share one format: {detail, code, fields}. See docs/api.md.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
}

# Tasks: with REDIS_URL a Celery worker consumes from Redis; without it they run in-process.
REDIS_URL = env_str("REDIS_URL")
PFS_TASK_MODE = env_str("PFS_TASK_MODE", "celery" if REDIS_URL else "thread")
if PFS_TASK_MODE not in {"celery", "thread", "sync"}:
    raise ImproperlyConfigured(f"PFS_TASK_MODE must be celery, thread or sync, not {PFS_TASK_MODE!r}")
if PFS_TASK_MODE == "celery" and not REDIS_URL:
    raise ImproperlyConfigured("PFS_TASK_MODE=celery needs REDIS_URL")
# The cache holds the API's request counts and what is rendered from releases: in Redis,
# shared by every process, when there is one.
if REDIS_URL:
    CACHES = {"default": {"BACKEND": "pfs_base.cache.RedisCache", "LOCATION": REDIS_URL}}
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": "pfs"}}
CACHES["default"]["KEY_PREFIX"] = "pfs"
CELERY_BROKER_URL = REDIS_URL or "memory://"
CELERY_RESULT_BACKEND = REDIS_URL or "cache+memory://"
CELERY_TASK_ALWAYS_EAGER = PFS_TASK_MODE != "celery"
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_TIME_LIMIT = env_int("PFS_TASK_TIME_LIMIT", 600, minimum=1)
CELERY_TASK_SOFT_TIME_LIMIT = max(1, CELERY_TASK_TIME_LIMIT - 30)
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# A task taken by a worker that died unacknowledged goes back to the queue after this many seconds.
# Tasks are idempotent, so a redelivery of a task still running elsewhere changes nothing.
# A worker looks for such tasks every 10 x PFS_UNACKED_RESTORE_INTERVAL seconds (kombu's Redis
# transport scans on every tenth tick).
# The scan holds a lock in Redis that kombu lets expire after 5 minutes: a worker killed while
# holding it would delay every redelivery by that much, so it lasts no longer than the visibility
# timeout itself.
_VISIBILITY_TIMEOUT = env_int("PFS_VISIBILITY_TIMEOUT", 3600, minimum=1)
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": _VISIBILITY_TIMEOUT,
    "unacked_restore_interval": env_int("PFS_UNACKED_RESTORE_INTERVAL", 10, minimum=1),
    "unacked_mutex_expire": min(300, _VISIBILITY_TIMEOUT),
}
CELERY_TASK_DEFAULT_QUEUE = env_str("PFS_TASK_QUEUE", "celery")

# Devices per shard of a new fleet: one shard is one task, one lock and one transaction.
# Each shard pays about 20 ms of queries, commits and a request to the helper whatever its size,
# while 25,000 devices privatize a 1,024-bucket encoding in about 15 ms: smaller shards would
# spend most of a round on that fixed cost (bench/results/fleet_round_target.md).
PFS_SHARD_SIZE = env_int("PFS_SHARD_SIZE", 25_000, minimum=1)

# The reaper (analyses.reaper): a round with no progress for PFS_ROUND_STUCK_AFTER seconds is
# resumed; one older than PFS_ROUND_FAIL_AFTER seconds is failed instead. With `celery beat`
# running it looks every 5 minutes; without, run `manage.py reap_rounds` from cron.
PFS_ROUND_STUCK_AFTER = env_int("PFS_ROUND_STUCK_AFTER", 900, minimum=1)
PFS_ROUND_FAIL_AFTER = env_int("PFS_ROUND_FAIL_AFTER", 86_400, minimum=1)
PFS_REAPER_INTERVAL = env_int("PFS_REAPER_INTERVAL", 300, minimum=1)
CELERY_BEAT_SCHEDULE = {
    "reap-stuck-rounds": {"task": "analyses.tasks.reap_rounds", "schedule": float(PFS_REAPER_INTERVAL)}
}
# Beat is its own process (`make beat`, deploy/): one per deployment, or the reaper runs twice.
CELERY_BEAT_SCHEDULE_FILENAME = env_str("PFS_BEAT_SCHEDULE", str(BASE_DIR / "var" / "celerybeat-schedule"))
# Workers and beat log through LOGGING below (JSON lines), not Celery's own format.
CELERY_WORKER_HIJACK_ROOT_LOGGER = False

# Operations (docs/deployment.md): JSON log lines (time, level, logger, request or task id), the
# probes' time limit, Prometheus metrics, and error reports to Sentry when a DSN is set.
LOGGING = logging_config(
    level=env_choice("LOG_LEVEL", "INFO", ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")),
    style=env_choice("LOG_FORMAT", "json", ("json", "text")),
)
# Each check of /readyz (database, Redis, a worker's ping) waits at most this many seconds.
PFS_READYZ_TIMEOUT = env_float("PFS_READYZ_TIMEOUT", 2.0, minimum=0.1)
# Who reads /metrics and the checks of /readyz (pfs_base.probes): a client whose address (behind
# PFS_NUM_PROXIES proxies, the one they name) is in these networks, or one sending
# "Authorization: Bearer <PFS_PROBE_TOKEN>" when a token is set. Anyone else: /metrics a 403,
# /readyz its status only. /healthz answers everyone.
PFS_PROBE_NETWORKS = env_list("PFS_PROBE_NETWORKS", ["127.0.0.0/8", "::1/128"])
for _network in PFS_PROBE_NETWORKS:
    try:
        ipaddress.ip_network(_network, strict=False)
    except ValueError as _bad:
        raise ImproperlyConfigured(f"PFS_PROBE_NETWORKS: {_bad}") from None
PFS_PROBE_TOKEN = env_str("PFS_PROBE_TOKEN")
# Prometheus multiprocess mode: every process of a host (gunicorn's workers, Celery's pool, beat)
# writes its counts into this folder and /metrics adds them up. prometheus_client reads the
# variable itself; checked here so that a missing folder stops start-up with a clear message.
_metrics_dir = env_str("PROMETHEUS_MULTIPROC_DIR")
if _metrics_dir is not None and not Path(_metrics_dir).is_dir():
    raise ImproperlyConfigured(f"PROMETHEUS_MULTIPROC_DIR={_metrics_dir} is not a folder: create it first")
SENTRY_DSN = env_str("SENTRY_DSN")
if SENTRY_DSN:
    from pfs_base.error_reports import sentry_start

    sentry_start(
        dsn=SENTRY_DSN,
        environment=env_str("SENTRY_ENVIRONMENT", "production"),
        traces_sample_rate=env_float("SENTRY_TRACES_SAMPLE_RATE", 0.0, maximum=1.0),
    )
