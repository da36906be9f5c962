"""A missing page reads the same with DEBUG on (`make run`) as in production: templates/404.html.

With DEBUG on, Django answers a 404 with its technical page (the URL patterns, settings hints),
which is for developers of Django apps, not for the analysts who open `make run`'s dashboard. That
page alone is replaced (under /api/ by the API's JSON error, as with DEBUG off): a view's own 404
(a release not out yet, in plain text) stays as it is.
"""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template.loader import render_to_string

from pfs_base.api_errors import error_body, is_api_path

# The technical 404 page says why it is shown; nothing else the app answers does.
TECHNICAL_MARKER = b"DEBUG = True"


class NotFoundPageMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if (
            response.status_code != 404
            or not settings.DEBUG
            or getattr(response, "streaming", False)
            or TECHNICAL_MARKER not in response.content
        ):
            return response
        if is_api_path(request):  # as handler404 answers with DEBUG off
            return JsonResponse(error_body("No such API endpoint.", "not_found"), status=404)
        page = render_to_string("404.html", {"request_path": request.path}, request=request)
        return HttpResponse(page, status=404)
