"""A worker killed in the middle of a round: the round still completes, and no budget is spent twice."""

from __future__ import annotations

import copy
import time

import pytest

from aggregation.models import HelperShare, LeaderShare
from analyses.models import Round
from analyses.services import analysis_approve, analysis_create, round_progress
from devices.fleet_io import fleet_create
from devices.models import ShardRun
from devices.services import ledger_totals
from tests.integration.conftest import FAULTS_QUEUE as QUEUE
from tests.services import Worker, redis_url_or_fail

pytestmark = pytest.mark.integration

DEVICES, SHARD_SIZE, BUCKETS = 300_000, 10_000, 4_096


def test_killing_the_worker_mid_round_neither_loses_the_round_nor_double_spends(
    fault_queue, analyst, officer, api, tmp_path
) -> None:
    redis_url = redis_url_or_fail()
    fleet_create(name="big", size=DEVICES, seed=5, shard_size=SHARD_SIZE)
    spec = {
        "identifier": "faults",
        "fleet": "big",
        "queryClass": {"stream": "ModelMetrics", "fields": ["perplexity"], "cohortFields": []},
        "budget": {"epsilon": 5.0, "reports": 5, "delta": 1e-6},
        "fields": {"perplexity": {"localEpsilon": 4.0, "epsilon": 5.0, "reports": 5}},
    }
    analysis_approve(analysis=analysis_create(spec=copy.deepcopy(spec), owner=analyst), officer=officer)
    boundaries = [10 + 90 * i / (BUCKETS - 2) for i in range(BUCKETS - 1)]
    recipe = {
        "query": "select perplexity from ModelMetrics",
        "dataTypeContent": {"perplexity": {"dataType": "BucketedType", "boundaries": boundaries}},
        "privacy": {"mechanism": "asymmetric_ohe", "epsilon0": 3.0, "epsilon": 1.0, "delta": 1e-6},
    }
    extra = {"PFS_VISIBILITY_TIMEOUT": "3", "PFS_UNACKED_RESTORE_INTERVAL": "1"}
    first = Worker(redis_url, tmp_path / "first.log", queue=QUEUE, extra_env=extra)
    try:
        first.wait_ready()
        created = api.post("/api/analyses/faults/recipes/", recipe, format="json")
        assert created.status_code == 201, created.json()
        round_id = api.post(f"/api/recipes/{created.json()['id']}/rounds/").json()["id"]
        deadline = time.monotonic() + 60
        while round_progress(Round.objects.get(pk=round_id))["shards_done"] < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        first.kill()
    done_at_kill = round_progress(Round.objects.get(pk=round_id))["shards_done"]
    assert 0 < done_at_kill < DEVICES // SHARD_SIZE, "the kill must land in the middle of the round"

    second = Worker(redis_url, tmp_path / "second.log", queue=QUEUE, extra_env=extra)
    try:
        second.wait_ready()
        deadline = time.monotonic() + 180
        while not Round.objects.get(pk=round_id).is_finished and time.monotonic() < deadline:
            time.sleep(0.5)
    finally:
        second.stop()

    round_ = Round.objects.get(pk=round_id)
    assert round_.status == Round.Status.RELEASED, (round_.status, round_.error)
    assert round_.release.content["reports"] == DEVICES
    assert ShardRun.objects.filter(task_key=round_.task_key).count() == DEVICES // SHARD_SIZE
    totals = ledger_totals(fleet=analysis_fleet(), analysis_identifier="faults")
    assert totals["max:reports_used"] == 1 and totals["sum:reports_used"] == DEVICES
    assert not LeaderShare.objects.exists() and not HelperShare.objects.exists()


def analysis_fleet():
    from devices.models import Fleet

    return Fleet.objects.get(name="big")
