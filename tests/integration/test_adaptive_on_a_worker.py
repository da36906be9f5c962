"""An adaptive run on a real worker survives the worker's death: it resumes where it stopped."""

from __future__ import annotations

import time

import pytest

from analyses.models import AdaptiveRun, Round
from analyses.services.policy import analysis_approve, analysis_create
from devices.fleet_io import fleet_create
from devices.models import Fleet, ShardRun
from devices.services import ledger_totals
from devices.synthetic import TOKENS
from tests.integration.conftest import FAULTS_QUEUE
from tests.services import Worker, redis_url_or_fail

pytestmark = pytest.mark.integration

DEVICES, SHARD_SIZE, LEVELS = 200_000, 10_000, 3


def test_killing_the_worker_mid_discovery_resumes_it_without_spending_twice(
    fault_queue, analyst, officer, api, tmp_path
) -> None:
    redis_url = redis_url_or_fail()
    fleet_create(name="typing", size=DEVICES, seed=8, shard_size=SHARD_SIZE)
    policy = {
        "identifier": "typing",
        "fleet": "typing",
        "queryClass": {"stream": "KeyboardNGrams", "fields": ["ngrams"], "cohortFields": []},
        "budget": {"epsilon": 3.0, "reports": 3, "delta": 1e-5},
        "fields": {"ngrams": {"localEpsilon": 4.0, "epsilon": 3.0, "reports": 3}},
    }
    analysis_approve(analysis=analysis_create(spec=policy, owner=analyst), officer=officer)
    spec = {
        "analysis": "typing",
        "kind": "ngram_discovery",
        "field": "ngrams",
        "vocabulary": TOKENS,
        "maxLength": LEVELS,
        "privacy": {"mechanism": "asymmetric_ohe", "epsilon0": 4.0, "epsilonPerRound": 1.0, "delta": 1e-6},
        "threshold": {"zScore": 3.0, "maxPerLevel": 30},
    }
    extra = {"PFS_VISIBILITY_TIMEOUT": "3", "PFS_UNACKED_RESTORE_INTERVAL": "1"}
    first = Worker(redis_url, tmp_path / "first.log", queue=FAULTS_QUEUE, extra_env=extra)
    try:
        first.wait_ready()
        started = api.post("/api/adaptive-runs/", spec, format="json")
        assert started.status_code == 201, started.json()
        run_id = started.json()["id"]
        # Kill it once level 1 is recorded and round 2's shards are being answered.
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            run = AdaptiveRun.objects.get(pk=run_id)
            if (
                run.levels
                and run.current_round_id
                and ShardRun.objects.filter(task_key=run.current_round.task_key).exists()
            ):
                break
            time.sleep(0.02)
    finally:
        first.kill()
    run = AdaptiveRun.objects.get(pk=run_id)
    assert len(run.levels) == 1 and run.current_round is not None, "the kill must land in round 2"
    assert not run.current_round.is_finished

    second = Worker(redis_url, tmp_path / "second.log", queue=FAULTS_QUEUE, extra_env=extra)
    try:
        second.wait_ready()
        deadline = time.monotonic() + 240
        while not AdaptiveRun.objects.get(pk=run_id).is_finished and time.monotonic() < deadline:
            time.sleep(0.5)
    finally:
        second.stop()

    run = AdaptiveRun.objects.get(pk=run_id)
    assert run.status == AdaptiveRun.Status.FINISHED, (run.status, run.stop_reason)
    assert [level["length"] for level in run.levels] == [1, 2, 3]
    assert len({level["round"] for level in run.levels}) == LEVELS == Round.objects.count()
    assert all(r.status == Round.Status.RELEASED for r in Round.objects.all())
    # Every device answered each round once: three reports, never a fourth.
    totals = ledger_totals(fleet=Fleet.objects.get(name="typing"), analysis_identifier="typing")
    assert totals["max:reports_used"] == LEVELS and totals["sum:reports_used"] == LEVELS * DEVICES
    assert "hello world" in [k["ngram"] for k in run.levels[1]["kept"]]
