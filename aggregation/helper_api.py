"""The helper's HTTP endpoints for the leader (aggregation.dap): thin views over aggregation.helper_service.

Each request is checked in this order, and a refusal writes nothing: the media type and version
(415), the body's collection against the path's task id (400), the bearer token of that collection
(401, logged with the task id and the caller's address, never the token), then the message itself
(400, DAP's ``invalidMessage``), the task (404, ``unrecognizedTask``) and the helper's rules (403, 409).
"""

from __future__ import annotations

import hmac
import json
import logging
from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_http_methods

from aggregation import dap, dap_poplar1, heavy_hitters_helper, helper_service
from pfs_base.api_errors import error_body
from pfs_base.errors import Conflict, NotAllowed

logger = logging.getLogger(__name__)

# The largest request body the helper reads: an aggregation job of 500 reports of 1,024 buckets is
# about 0.5 MB; a simulated shard's shares of many batches can be a few MB.
MAX_BODY = 64 * 1024 * 1024


def _refusal(status: int, detail: str, code: str) -> JsonResponse:
    return JsonResponse(error_body(detail, code), status=status)


def _collection_of(body: bytes) -> str | None:
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, ValueError):
        return None
    key = data.get("collection") if isinstance(data, dict) else None
    return key if isinstance(key, str) else None


def _endpoint(message: str | dict[str, str], *methods: str) -> Callable:
    """The checks every endpoint shares, then ``handle(collection_key, body, method, **path) -> HttpResponse``.

    ``message``: the message the body must be, or one per method."""

    def wrap(handle: Callable[..., HttpResponse]) -> Callable:
        @csrf_exempt
        @require_http_methods(list(methods))
        def view(request: HttpRequest, task_id: str, **path: str) -> HttpResponse:
            kind = dap.media_type_parse(request.headers.get("Content-Type", ""))
            wanted = message if isinstance(message, str) else message[request.method]
            if kind != (wanted, dap.VERSION):
                return _refusal(415, f"Send {dap.media_type(wanted)}.", "unsupported_media_type")
            # Read from the stream, not request.body: Django's smaller limit for form data
            # (DATA_UPLOAD_MAX_MEMORY_SIZE) is not this protocol's.
            body = request.read(MAX_BODY + 1)
            if len(body) > MAX_BODY:
                return _refusal(413, f"The body is larger than {MAX_BODY:,} bytes.", "too_large")
            collection = _collection_of(body)
            if collection is None or dap.task_id(collection) != task_id:
                return _refusal(400, "The body must name the collection of the path's task id.", "invalid_message")
            expected = dap.auth_token(settings.PFS_AGGREGATOR_AUTH_SECRET, collection)
            given = request.headers.get("Authorization", "").removeprefix("Bearer ")
            if not hmac.compare_digest(given.encode(), expected.encode()):
                logger.warning(
                    "helper: refused a request with a wrong aggregator auth token",
                    extra={"dap_task": task_id, "path": request.path, "remote": request.META.get("REMOTE_ADDR")},
                )
                return _refusal(401, "Wrong or missing aggregator auth token.", "unauthorized")
            try:
                return handle(collection, body, request.method, **path)
            except dap.MessageError as error:
                return _refusal(400, str(error), "invalid_message")
            except helper_service.UnknownTask as error:
                return _refusal(404, str(error), "unrecognized_task")
            except heavy_hitters_helper.UnknownJob as error:
                return _refusal(404, str(error), "unrecognized_aggregation_job")
            except Conflict as error:
                _refusal_logged(task_id, request, error)
                return _refusal(409, str(error), "conflict")
            except helper_service.StatementRefused as error:
                _refusal_logged(task_id, request, error)
                return _refusal(403, str(error), "issuer_statement_invalid")
            except NotAllowed as error:
                _refusal_logged(task_id, request, error)
                return _refusal(403, str(error), "not_allowed")

        return view

    return wrap


def _refusal_logged(task_id: str, request: HttpRequest, error: Exception) -> None:
    """A rule of the helper's refused the leader's request: its operator sees which, and why."""
    logger.warning(
        "helper: refused the leader's request: %s",
        error,
        extra={"dap_task": task_id, "path": request.path, "method": request.method},
    )


def _answer(body: bytes, message: str, status: int = 200) -> HttpResponse:
    return HttpResponse(body, status=status, content_type=dap.media_type(message))


@_endpoint(dap.TASK_CONFIG, "PUT", "DELETE")
def task(collection: str, body: bytes, method: str) -> HttpResponse:
    # PUT provisions (201 when new); DELETE discards (its body names the collection only).
    if method == "DELETE":
        helper_service.task_discard(collection)
        return HttpResponse(status=204)
    created = helper_service.task_provision(dap.TaskConfig.parse(body))
    return HttpResponse(status=201 if created else 200)


@_endpoint(dap.JOB_INIT, "PUT")
def aggregation_job(collection: str, body: bytes, method: str, job_id: str) -> HttpResponse:
    return _answer(helper_service.job_run(collection, job_id, body), dap.JOB_RESP)


@_endpoint(dap.SIMULATED, "POST")
def simulated_shares(collection: str, body: bytes, method: str) -> HttpResponse:
    helper_service.simulated_store(collection, dap.SimulatedSharesReq.parse(body))
    return HttpResponse(status=204)


@_endpoint(dap.SHARE_REQ, "POST")
def aggregate_shares(collection: str, body: bytes, method: str) -> HttpResponse:
    return _answer(helper_service.aggregate_share(collection, body), dap.SHARE_RESP)


# ------------------------------------------------------------------ Poplar1 (heavy hitters)


@_endpoint(dap_poplar1.REPORTS, "POST")
def poplar1_reports(collection: str, body: bytes, method: str) -> HttpResponse:
    heavy_hitters_helper.reports_store(collection, dap_poplar1.Poplar1ReportsReq.parse(body))
    return HttpResponse(status=204)


@_endpoint(dap_poplar1.UPLOADS, "PUT")
def poplar1_uploads(collection: str, body: bytes, method: str, job_id: str) -> HttpResponse:
    return _answer(heavy_hitters_helper.uploads_store(collection, job_id, body), dap_poplar1.JOB_RESP)


@_endpoint({"PUT": dap_poplar1.JOB_INIT, "POST": dap_poplar1.JOB_CONTINUE}, "PUT", "POST")
def poplar1_job(collection: str, body: bytes, method: str, job_id: str) -> HttpResponse:
    # PUT starts the job (DAP's AggregationJobInitReq), POST continues it (AggregationJobContinueReq).
    step = heavy_hitters_helper.job_init if method == "PUT" else heavy_hitters_helper.job_continue
    return _answer(step(collection, job_id, body), dap_poplar1.JOB_RESP)


@_endpoint(dap_poplar1.SHARE_REQ, "POST")
def poplar1_aggregate_shares(collection: str, body: bytes, method: str) -> HttpResponse:
    return _answer(heavy_hitters_helper.aggregate_share(collection, body), dap_poplar1.SHARE_RESP)
