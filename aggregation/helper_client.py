"""The leader's side of the wire to the helper (aggregation.dap): the one door the leader has to it.

The leader never opens the helper's store: it provisions the helper's task, runs aggregation jobs,
hands over a simulated shard's shares and asks the aggregate shares, all as HTTP requests to
``HELPER_URL`` with the collection's bearer token. A request the helper did not answer (down,
timed out, a 5xx) is retried with backoff, the same bytes each time (every request is idempotent:
a job by its id, the aggregate share request by the helper's kept answer); after the last attempt
``HelperUnavailable`` is raised, and the caller leaves its work to be resumed (aggregation.ingest
keeps the job's rows, a release is retried by its task). A 4xx is the helper's refusal:
``HelperRefused``, at once.

``PFS_HELPER_TRANSPORT = "in-process"`` (the unit tests only: pfs_web.settings_test) hands the same
request bytes to the helper's views in this process (pfs_web.urls_helper) instead of a socket;
the integration tests run the helper as its own process over HTTP.
"""

from __future__ import annotations

import json
import logging
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass

from django.conf import settings

from aggregation import dap
from aggregation.models import CollectionRules
from pfs_base.errors import Unavailable
from pfs_device.hpke_config import config_list_decode, supported_config

logger = logging.getLogger(__name__)

IN_PROCESS = "in-process"
# Waits between attempts, in seconds: about half a minute in all before the leader gives up for now.
BACKOFF = (0.2, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0)
# How long the leader keeps the helper's HPKE configuration (its /hpke_config says an hour may be kept).
CONFIG_SECONDS = 300.0


class HelperUnavailable(Unavailable):
    """The helper did not answer after every attempt: nothing was decided; try again later."""


class HelperRefused(RuntimeError):
    """The helper answered with a refusal (4xx): ``status``, ``code`` and its reason."""

    def __init__(self, status: int, code: str, detail: str) -> None:
        super().__init__(f"the helper refused ({status} {code}): {detail}")
        self.status, self.code, self.detail = status, code, detail


@dataclass(frozen=True)
class _Answer:
    status: int
    body: bytes


def _send_http(method: str, path: str, body: bytes | None, headers: dict[str, str]) -> _Answer:
    request = urllib.request.Request(settings.HELPER_URL + path, data=body, method=method, headers=headers)  # noqa: S310
    try:
        with urllib.request.urlopen(request, timeout=settings.PFS_HELPER_TIMEOUT) as response:  # noqa: S310
            return _Answer(response.status, response.read())
    except urllib.error.HTTPError as error:
        return _Answer(error.code, error.read())


def _send_in_process(method: str, path: str, body: bytes | None, headers: dict[str, str]) -> _Answer:
    from django.test import RequestFactory
    from django.urls import resolve

    extra = {
        f"HTTP_{name.upper().replace('-', '_')}": value for name, value in headers.items() if name != "Content-Type"
    }
    request = RequestFactory().generic(
        method, path, data=body or b"", content_type=headers.get("Content-Type", ""), **extra
    )
    match = resolve(path, urlconf="pfs_web.urls_helper")
    response = match.func(request, *match.args, **match.kwargs)
    return _Answer(response.status_code, response.content)


def _send(method: str, path: str, body: bytes | None, headers: dict[str, str]) -> _Answer:
    """One request, retried while the helper does not answer; its answer (any status under 500)."""
    send = _send_in_process if settings.PFS_HELPER_TRANSPORT == IN_PROCESS else _send_http
    waits = BACKOFF[: settings.PFS_HELPER_ATTEMPTS - 1]
    for attempt in range(len(waits) + 1):
        try:
            answer = send(method, path, body, headers)
            if answer.status < 500:
                return answer
            problem = f"HTTP {answer.status}"
        except (OSError, urllib.error.URLError) as error:  # refused, reset, timed out
            problem = str(error)
        if attempt < len(waits):
            logger.warning("helper: %s %s failed (%s); retrying in %.1f s", method, path, problem, waits[attempt])
            time.sleep(waits[attempt])
    raise HelperUnavailable(f"the helper at {settings.HELPER_URL} did not answer {method} {path}: {problem}")


def call(method: str, collection: str, path: str, message: str, body: bytes, *, expect: tuple[int, ...]) -> bytes:
    headers = {
        "Content-Type": dap.media_type(message),
        "Authorization": f"Bearer {dap.auth_token(settings.PFS_AGGREGATOR_AUTH_SECRET, collection)}",
    }
    answer = _send(method, f"/tasks/{dap.task_id(collection)}{path}", body, headers)
    if answer.status not in expect:
        code, detail = "error", answer.body[:500].decode("utf-8", "replace")
        try:
            refusal = json.loads(answer.body)
            code, detail = refusal.get("code", code), refusal.get("detail", detail)
        except (ValueError, AttributeError):
            pass
        raise HelperRefused(answer.status, code, detail)
    return answer.body


# ------------------------------------------------------------------ the requests


def task_provision(rules: CollectionRules) -> None:
    """Provision the helper's task for a collection with the leader's rules (the same twice is fine;
    the helper refuses another configuration of a task it has)."""
    config = dap.TaskConfig(
        collection=rules.key,
        length=rules.length,
        min_cohort=rules.min_cohort,
        weight_bound=rules.weight_bound,
        vdaf=rules.vdaf,
        verify_key=dap.b64(bytes(rules.verify_key)),
        noise_epsilon=rules.noise_epsilon,
        noise_delta=rules.noise_delta,
        token_key=rules.token_key,
        levels=rules.levels,
    )
    call("PUT", config.collection, "", dap.TASK_CONFIG, dap.encode(config), expect=(200, 201))


def task_delete(collection: str) -> None:
    body = dap.encode(_CollectionOnly(collection))
    call("DELETE", collection, "", dap.TASK_CONFIG, body, expect=(204, 404))


@dataclass(frozen=True)
class _CollectionOnly:
    collection: str


def job_run(job: str, request: dap.AggregationJobInitReq) -> dap.AggregationJobResp:
    """Run one aggregation job at the helper: its answer to each report, in the request's order."""
    body = call("PUT", request.collection, f"/aggregation_jobs/{job}", dap.JOB_INIT, dap.encode(request), expect=(200,))
    resp = dap.AggregationJobResp.parse(body)
    if [r.report_id for r in resp.verify_resps] != [i.report_id for i in request.verify_inits]:
        # DAP: the leader abandons a job whose answer does not list the same reports in order.
        raise HelperRefused(200, "invalid_message", "the helper answered for other reports than the job's")
    return resp


def simulated_put(request: dap.SimulatedSharesReq) -> None:
    call("POST", request.collection, "/simulated_shares", dap.SIMULATED, dap.encode(request), expect=(204,))


@contextmanager
def simulated_put_beside(request: dap.SimulatedSharesReq) -> Iterator[None]:
    """simulated_put, sent while the ``with`` block runs (the leader's own uncommitted writes), and
    awaited when it ends, raising what the request raised: the helper's time, mostly its synced
    commit, overlaps the leader's instead of adding to it. The block's caller commits only after
    this returns, so nothing of the leader's is durable before the helper has stored its part.

    In-process (the unit tests): sent first, in this thread, whose database connections the
    helper's views use."""
    if settings.PFS_HELPER_TRANSPORT == IN_PROCESS:
        simulated_put(request)
        yield
        return
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="pfs-helper-put") as pool:
        sent = pool.submit(simulated_put, request)
        yield  # an error of the block leaves the pool waiting for the request, then propagates
        sent.result()


def aggregate_shares(request: dap.AggregateShareReq) -> dap.AggregateShareResp:
    body = call("POST", request.collection, "/aggregate_shares", dap.SHARE_REQ, dap.encode(request), expect=(200,))
    return dap.AggregateShareResp.parse(body)


_config_cache: tuple[float, bytes] | None = None


def public_key() -> bytes:
    """The helper's current HPKE public key, as the helper serves it at /hpke_config (what the leader
    puts in a task beside its own; the device checks it against the helper itself)."""
    global _config_cache
    now = time.monotonic()
    cached = _config_cache is not None and now - _config_cache[0] < CONFIG_SECONDS
    if cached and settings.PFS_HELPER_TRANSPORT != IN_PROCESS:
        return _config_cache[1]  # type: ignore[index]
    answer = _send("GET", "/hpke_config", None, {})
    if answer.status != 200:
        raise HelperUnavailable(f"the helper's /hpke_config answered HTTP {answer.status}")
    key = supported_config(config_list_decode(answer.body)).public_key
    _config_cache = (now, key)
    return key


def public_key_forget() -> None:
    """Forget the kept configuration (after the helper rotated its key; tests)."""
    global _config_cache
    _config_cache = None
