"""WSGI entry point. Device uploads skip Django's middleware and DRF (aggregation.intake).

An upload is an anonymous append checked for size, form and an open collection: sessions,
authentication, CSRF and messages have nothing to do for it, and at thousands a second their cost
per request is most of the cost. Every other request goes to Django.
"""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "pfs_web.settings")
django_application = get_wsgi_application()

from aggregation.intake import UPLOAD_PATH, upload_application  # noqa: E402 (needs Django set up)


def application(environ, start_response):
    if environ.get("PATH_INFO") == UPLOAD_PATH and environ.get("REQUEST_METHOD") == "POST":
        return upload_application(environ, start_response)
    return django_application(environ, start_response)
