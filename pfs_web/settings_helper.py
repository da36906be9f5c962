"""Settings of the helper aggregator's own service (docs/deployment.md, "Two operators").

The same codebase started in the helper's role: ``DJANGO_SETTINGS_MODULE=pfs_web.settings_helper``
(`make helper` alone, for a host of its own; `make run` starts it beside the dashboard). It runs
the helper's part only, with what is the helper's only:

- one database, the helper's store (``HELPER_DATABASE_URL``, or ``helper.sqlite3`` beside the
  default file): nothing here can open the leader's or the issuer's;
- its own private keys (``PFS_HELPER_KEY`` / ``PFS_HELPER_KEY_FILE``, else its store);
- its own HTTP endpoints (``pfs_web.urls_helper``): its HPKE configuration, the probes, metrics;
- no analyst pages, no admin, no sign-in, no sessions, no leader tables: those apps are not
  installed, their middleware is not run, and the router migrates only the helper's tables.
"""

from pfs_web.settings import *  # noqa: F403
from pfs_web.settings import HELPER_DATABASE

PFS_ROLE = "helper"
# The aggregators' code names the helper's store "helper". Django needs a "default" too: an empty
# database in memory, where the router puts no table (a second connection to the store's file would
# only contend for its lock).
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}, "helper": HELPER_DATABASE}
DATABASE_ROUTERS = ["pfs_base.db_router.HelperServiceRouter"]

INSTALLED_APPS = ["aggregation", "pfs_web"]
MIDDLEWARE = [
    "pfs_base.request_context.RequestContextMiddleware",
    "pfs_base.probes.ProbeMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "pfs_base.security_headers.ContentSecurityPolicyMiddleware",  # its JSON answers load nothing
    "django.middleware.common.CommonMiddleware",
    # No cookie is ever set here (the leader's requests carry a bearer token and are csrf_exempt):
    # these only keep `check --deploy` clean, and a browser that wanders in gets no frame and no form.
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]
ROOT_URLCONF = "pfs_web.urls_helper"
TEMPLATES = []
