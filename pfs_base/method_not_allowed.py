"""A page asked for with a method it does not take says so, in words (the API answers in its own format).

Django answers a GET on a POST-only page with an empty 405; a person who followed a link, or
reloaded after a form, sees a blank page. This middleware gives that 405 a page: which methods the
address takes, and a way back.
"""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse
from django.template.loader import render_to_string

from pfs_base.api_errors import is_api_path


class MethodNotAllowedPageMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if response.status_code != 405 or is_api_path(request) or response.content:
            return response
        allowed = response.get("Allow", "")
        page = HttpResponse(
            render_to_string("405.html", {"method": request.method, "allowed": allowed}, request=request),
            status=405,
        )
        page["Allow"] = allowed
        return page
