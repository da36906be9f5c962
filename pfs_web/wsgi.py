"""WSGI entry point. Device uploads, direct or through the Oblivious Gateway, skip Django's
middleware and DRF (aggregation.intake, aggregation.gateway_api).

An upload is an anonymous append checked for size, form and an open collection: sessions,
authentication, CSRF and messages have nothing to do for it, and at thousands a second their cost
per request is most of the cost. Every other request goes to Django. Uploads are timed here, as the
request middleware times the rest (pfs_base.request_context).
"""

import os
import time

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "pfs_web.settings")
django_application = get_wsgi_application()

from django.conf import settings  # noqa: E402

from aggregation.gateway_api import GATEWAY_PATH, gateway_application  # noqa: E402 (needs Django set up)
from aggregation.intake import UPLOAD_PATH, upload_application  # noqa: E402 (needs Django set up)
from pfs_base import metrics  # noqa: E402 (after the settings: they may name the metrics folder)

# Devices upload to the leader; the helper's own service (pfs_web.settings_helper) takes no upload.
UPLOADS_HERE = settings.PFS_ROLE == "leader"


# The anonymous appends, by path: the direct upload and the Oblivious Gateway that carries it.
FAST_PATHS = {UPLOAD_PATH: upload_application, GATEWAY_PATH: gateway_application}


def application(environ, start_response):
    fast = FAST_PATHS.get(environ.get("PATH_INFO")) if UPLOADS_HERE else None
    if fast is not None and environ.get("REQUEST_METHOD") == "POST":
        return _timed(fast, environ, start_response)
    return django_application(environ, start_response)


def _timed(fast, environ, start_response):
    started = time.perf_counter()
    statuses = []

    def start_recorded(status, headers, *exc_info):
        statuses.append(status.split(" ", 1)[0])
        return start_response(status, headers, *exc_info)

    body = fast(environ, start_recorded)  # the whole answer, already in memory
    route = environ["PATH_INFO"].lstrip("/")
    metrics.http_request_observed(
        route=route, method="POST", status=int(statuses[0]), seconds=time.perf_counter() - started
    )
    return body
