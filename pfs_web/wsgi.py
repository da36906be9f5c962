"""WSGI entry point. Device uploads skip Django's middleware and DRF (aggregation.intake).

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

from aggregation.intake import UPLOAD_PATH, upload_application  # noqa: E402 (needs Django set up)
from pfs_base import metrics  # noqa: E402 (after the settings: they may name the metrics folder)

UPLOAD_ROUTE = UPLOAD_PATH.lstrip("/")
# Devices upload to the leader; the helper's own service (pfs_web.settings_helper) takes no upload.
UPLOADS_HERE = settings.PFS_ROLE == "leader"


def application(environ, start_response):
    if UPLOADS_HERE and environ.get("PATH_INFO") == UPLOAD_PATH and environ.get("REQUEST_METHOD") == "POST":
        return _upload_timed(environ, start_response)
    return django_application(environ, start_response)


def _upload_timed(environ, start_response):
    started = time.perf_counter()
    statuses = []

    def start_recorded(status, headers, *exc_info):
        statuses.append(status.split(" ", 1)[0])
        return start_response(status, headers, *exc_info)

    body = upload_application(environ, start_recorded)  # the whole answer, already in memory
    metrics.http_request_observed(
        route=UPLOAD_ROUTE, method="POST", status=int(statuses[0]), seconds=time.perf_counter() - started
    )
    return body
