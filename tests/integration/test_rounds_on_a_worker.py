"""API -> a real Celery worker over a real Redis -> the release stored in the database."""

from __future__ import annotations

import time

import pytest

from analyses import tasks
from analyses.models import Round
from devices.models import ShardRun
from devices.services import ledger_totals
from pfs_device.budget import to_units
from pfs_web.celery import app as celery_app
from tests.conftest import FLEET_SIZE

pytestmark = pytest.mark.integration


def wait_finished(round_id: int, timeout: float = 90.0) -> Round:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        round_ = Round.objects.get(pk=round_id)
        if round_.is_finished:
            return round_
        time.sleep(0.2)
    raise AssertionError(f"round {round_id} still {Round.objects.get(pk=round_id).status} after {timeout} s")


def start(api, recipe) -> int:
    created = api.post("/api/analyses/test.ages/recipes/", recipe, format="json")
    assert created.status_code == 201, created.json()
    started = api.post(f"/api/recipes/{created.json()['id']}/rounds/")
    assert started.status_code == 202
    return started.json()["id"]


def test_a_round_started_over_the_api_runs_on_the_worker_and_is_released(worker, api, analysis, recipe) -> None:
    assert celery_app.conf.task_always_eager is False
    round_id = start(api, recipe)
    round_ = wait_finished(round_id)
    assert round_.status == Round.Status.RELEASED, round_.error
    assert ShardRun.objects.filter(task_key=round_.task_key).count() == 5
    release = api.get(f"/api/rounds/{round_id}/release/").json()
    assert release["reports"] == FLEET_SIZE and len(release["buckets"]) == 8


def test_a_redelivered_shard_task_on_the_worker_changes_nothing(worker, api, analysis, recipe) -> None:
    round_ = wait_finished(start(api, recipe))
    before = ledger_totals(fleet=analysis.fleet, analysis_identifier="test.ages")
    shard = analysis.fleet.shards.first()
    tasks.run_shard.delay(round_.pk, shard.pk).get(timeout=30)
    assert ledger_totals(fleet=analysis.fleet, analysis_identifier="test.ages") == before
    assert ShardRun.objects.filter(task_key=round_.task_key).count() == 5


def test_concurrent_rounds_never_spend_a_device_budget_beyond_its_allowance(worker, api, analysis, recipe) -> None:
    # The analysis allows 2 reports and epsilon 2: two rounds at once may both be answered, but
    # a third, sent past the server's own check, must be refused by every device.
    first = start(api, recipe)
    second = start(api, {**recipe, "recipeIdentifier": "ages-2"})
    assert wait_finished(first).status == wait_finished(second).status == Round.Status.RELEASED
    third = Round.objects.create(recipe=Round.objects.get(pk=second).recipe, seed=3, created_by=analysis.owner)
    tasks.dispatch_round.delay(third.pk)
    third = wait_finished(third.pk)
    totals = ledger_totals(fleet=analysis.fleet, analysis_identifier="test.ages")
    assert totals["max:reports_used"] == 2 and totals["max:epsilon_used"] == to_units(2.0)
    assert totals["sum:reports_used"] == 2 * FLEET_SIZE
    # Every device refused: nothing reached the minimum cohort, so nothing is released (withheld).
    assert third.status == Round.Status.WITHHELD and third.release.content["reports"] == 0
    assert third.release.content["refusals"] == {"analysis_budget": FLEET_SIZE}
