"""What an operator reads: the probes, request ids, JSON log lines and the metrics, counted where events happen.

The production profile's test (tests/integration/test_production_profile.py) reads the same probes
from gunicorn with a worker, beat, PostgreSQL and Redis; here each behaviour is checked on its own, in process.
A worker or beat without a broker and serve_metrics run as processes in tests/integration/test_operations_processes.py.
"""

from __future__ import annotations

import json
import logging
import sys
from dataclasses import replace

import pytest
from django.test import Client
from prometheus_client import REGISTRY

from analyses.models import Round
from analyses.services.rounds import round_create_and_start, round_dispatch, round_shard_run
from pfs_base.logs import JsonFormatter
from tests.conftest import FLEET_SIZE


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def json_lines(caplog, logger: str) -> list[dict]:
    """The lines a logger wrote, as the production handler formats them."""
    return [json.loads(JsonFormatter().format(r)) for r in caplog.records if r.name == logger]


# ---------------------------------------------------------------- probes


def test_healthz_answers_without_the_database_any_host_or_https(settings) -> None:
    """No database fixture: a query here would fail the test. A balancer probes by address, over HTTP."""
    settings.SECURE_SSL_REDIRECT = True
    settings.ALLOWED_HOSTS = ["pfs.example.org"]
    response = Client().get("/healthz", HTTP_HOST="10.0.0.7:8000")
    assert response.status_code == 200 and response.json() == {"status": "ok"}
    assert response["Cache-Control"] == "no-store"


def test_a_page_still_redirects_to_https_and_checks_its_host(settings) -> None:
    """The probes' exemption is theirs alone (the same settings as above)."""
    settings.SECURE_SSL_REDIRECT = True
    settings.ALLOWED_HOSTS = ["pfs.example.org"]
    assert Client().get("/login/", HTTP_HOST="pfs.example.org").status_code == 301
    assert Client().get("/login/", HTTP_HOST="10.0.0.7:8000", secure=True).status_code == 400


@pytest.mark.django_db
def test_readyz_is_ready_with_the_database_and_tasks_in_process() -> None:
    response = Client().get("/readyz")
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "ready" and body["checks"]["database"]["ok"]
    assert body["checks"]["tasks"] == {"ok": True, "mode": "sync"}


@pytest.mark.django_db
def test_readyz_is_a_503_naming_what_failed_when_redis_does_not_answer(settings) -> None:
    settings.PFS_TASK_MODE = "celery"
    settings.REDIS_URL = settings.CELERY_BROKER_URL = "redis://127.0.0.1:1/0"  # nothing listens on port 1
    settings.PFS_READYZ_TIMEOUT = 0.5
    response = Client().get("/readyz")
    assert response.status_code == 503
    checks = response.json()["checks"]
    assert checks["database"]["ok"] and not checks["redis"]["ok"]
    assert "ConnectionError" in checks["redis"]["error"]
    assert checks["workers"] == {"ok": False, "error": "not asked: the broker (Redis) does not answer"}


def test_only_get_and_head_reach_a_probe() -> None:
    assert Client().post("/healthz").status_code == 404


# ---------------------------------------------------------------- request ids and log lines


def test_a_request_returns_the_id_it_was_given_and_logs_one_json_line_with_it(caplog) -> None:
    caplog.set_level(logging.INFO, logger="pfs.http")
    response = Client().get("/login/", HTTP_X_REQUEST_ID="req-7f3a.1")
    assert response.status_code == 200 and response["X-Request-ID"] == "req-7f3a.1"
    [line] = json_lines(caplog, "pfs.http")
    assert line["request_id"] == "req-7f3a.1" and line["level"] == "INFO" and line["logger"] == "pfs.http"
    assert (line["method"], line["path"], line["status"], line["route"]) == ("GET", "/login/", 200, "login/")
    assert line["time"].endswith("+00:00") and line["duration_ms"] >= 0


@pytest.mark.parametrize("offered", [None, "", "has spaces", "x" * 129, 'quote"d'])
def test_a_missing_or_unruly_request_id_is_replaced_by_a_new_one(offered) -> None:
    headers = {} if offered is None else {"HTTP_X_REQUEST_ID": offered}
    given = Client().get("/healthz", **headers)["X-Request-ID"]
    assert given != offered and len(given) == 32 and int(given, 16) >= 0


@pytest.mark.django_db
def test_an_audit_line_is_pure_json_and_carries_the_request_id(api, analysis, recipe, caplog) -> None:
    caplog.set_level(logging.WARNING, logger="pfs.audit")
    recipe["privacy"]["epsilon0"] = 6.0  # above the field's local cap: refused and audited
    response = api.post("/api/analyses/test.ages/recipes/", recipe, format="json", HTTP_X_REQUEST_ID="audit-1")
    assert response.status_code == 400
    [line] = json_lines(caplog, "pfs.audit")
    assert line["request_id"] == "audit-1" and line["level"] == "WARNING"
    assert (line["event"], line["action"], line["user"], line["target"]) == (
        "refused",
        "recipe.create",
        "alice",
        "test.ages",
    )
    assert "privacy.epsilon0" in line["reasons"]


def test_an_exception_is_one_line_with_its_traceback() -> None:
    try:
        raise ValueError("broken\nacross lines")
    except ValueError:
        record = logging.getLogger("pfs.test").makeRecord(
            "pfs.test", logging.ERROR, __file__, 1, "failed", (), exc_info=sys.exc_info()
        )
    text = JsonFormatter().format(record)
    assert "\n" not in text
    line = json.loads(text)
    assert line["message"] == "failed" and "ValueError: broken\nacross lines" in line["exception"]


# ---------------------------------------------------------------- metrics


@pytest.mark.django_db
def test_rounds_are_counted_as_they_start_and_release_and_devices_refusals_by_reason(
    analysis, recipe, analyst, django_capture_on_commit_callbacks
) -> None:
    started, released = sample("pfs_rounds_total", event="started"), sample("pfs_rounds_total", event="released")
    refused = sample("pfs_budget_refusals_total", reason="analysis_budget")
    rounds = []
    for identifier in ("ages-1", "ages-2"):  # the analysis allows each device two reports
        with django_capture_on_commit_callbacks(execute=True):
            rounds.append(
                round_create_and_start(
                    analysis=analysis, content={**recipe, "recipeIdentifier": identifier}, user=analyst
                )
            )
    assert sample("pfs_rounds_total", event="started") == started + 2
    assert sample("pfs_rounds_total", event="released") == released + 2
    assert sample("pfs_budget_refusals_total", reason="analysis_budget") == refused  # nobody refused yet

    # A third round, past the server's own check: every device refuses on its spent ledger (check 1).
    third = Round.objects.create(recipe=rounds[1].recipe, seed=9, created_by=analyst)
    with django_capture_on_commit_callbacks(execute=True):
        for shard_id in round_dispatch(round_id=third.pk):
            round_shard_run(round_id=third.pk, shard_id=shard_id)
    assert sample("pfs_budget_refusals_total", reason="analysis_budget") == refused + FLEET_SIZE


@pytest.mark.django_db
def test_a_round_start_that_rolls_back_is_not_counted(
    analysis, recipe, analyst, django_capture_on_commit_callbacks
) -> None:
    started = sample("pfs_rounds_total", event="started")
    recipe["privacy"]["epsilon0"] = 6.0
    with django_capture_on_commit_callbacks(execute=True), pytest.raises(Exception):  # noqa: B017 - refused
        round_create_and_start(analysis=analysis, content=recipe, user=analyst)
    assert sample("pfs_rounds_total", event="started") == started


@pytest.mark.django_db
def test_http_latency_is_observed_per_route_not_per_path(api, analysis, recipe) -> None:
    route = {"route": "api/analyses/<str:identifier>/", "method": "GET", "status": "200"}
    before = sample("pfs_http_request_duration_seconds_count", **route)
    assert api.get("/api/analyses/test.ages/").status_code == 200
    assert api.get("/api/analyses/test.ages/").status_code == 200
    assert sample("pfs_http_request_duration_seconds_count", **route) == before + 2


@pytest.mark.django_db
def test_the_metrics_page_shows_the_counts_in_prometheus_text(
    analysis, recipe, analyst, django_capture_on_commit_callbacks
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        round_create_and_start(analysis=analysis, content=recipe, user=analyst)
    response = Client().get("/metrics")
    assert response.status_code == 200 and response["Content-Type"].startswith("text/plain; version=")
    text = response.content.decode()
    assert 'pfs_rounds_total{event="released"}' in text
    assert 'pfs_task_duration_seconds_count{task="analyses.tasks.run_shard"}' in text  # the shard-task latency
    assert 'pfs_tasks_total{state="SUCCESS",task="analyses.tasks.aggregate_round"}' in text
    assert "pfs_task_queue_depth" in text  # no sample with tasks in-process: nothing queues


@pytest.mark.django_db
def test_uploaded_reports_are_counted_accepted_or_rejected_by_aggregator_and_reason(
    django_capture_on_commit_callbacks,
) -> None:
    from aggregation.ingest import reports_ingest
    from aggregation.issuer import issuer_public_key
    from aggregation.services import collection_rules_open
    from privacy.mechanisms import report_weight_bound
    from tests.unit.test_report_ingest import receive
    from tests.unit.test_report_protocol import DOMAIN, KEY, ORACLE, one_hot, report

    collection_rules_open(
        key=KEY,
        length=DOMAIN,
        min_cohort=3,
        weight_bound=report_weight_bound(ORACLE, DOMAIN, 1e-9),
        token_key=issuer_public_key(KEY),
    )
    accepted = sample("pfs_reports_accepted_total")
    helper_accepted = sample("pfs_helper_job_reports_total", outcome="accepted")
    reused = {
        a: sample("pfs_reports_rejected_total", aggregator=a, reason="token_reused") for a in ("leader", "helper")
    }
    good = report("d1", one_hot(2))
    receive(good)
    receive(report("d2", one_hot(1)))
    receive(replace(report("d3", one_hot(1)), token=good.token))  # a replayed token
    with django_capture_on_commit_callbacks(execute=True):
        assert reports_ingest(collection_key=KEY).verified == 3
    assert sample("pfs_reports_accepted_total") == accepted + 2
    # The leader refuses the replayed token itself: it never reaches the helper's job (DAP).
    assert sample("pfs_reports_rejected_total", aggregator="leader", reason="token_reused") == reused["leader"] + 1
    assert sample("pfs_reports_rejected_total", aggregator="helper", reason="token_reused") == reused["helper"]
    # The helper's service counts the reports of its jobs on its own /metrics.
    assert sample("pfs_helper_job_reports_total", outcome="accepted") == helper_accepted + 2
