"""Faults in the middle of a round on real workers: the round completes or fails cleanly, no shard
is counted twice, no device budget is spent twice, no finished release is lost."""

from __future__ import annotations

import copy
import time
from datetime import timedelta

import pytest
from django.db import connection

from aggregation.models import HelperShare, LeaderShare
from analyses.models import Round
from analyses.reaper import rounds_reap
from analyses.services.policy import analysis_approve, analysis_create
from analyses.services.rounds import round_progress
from devices.fleet_io import fleet_create
from devices.models import Fleet, ShardRun
from devices.services import ledger_totals
from tests.integration.conftest import FAULTS_QUEUE as QUEUE
from tests.services import PrivateRedis, Worker, celery_broker, redis_url_or_fail

pytestmark = pytest.mark.integration

DEVICES, SHARD_SIZE, BUCKETS = 300_000, 10_000, 4_096
SHARDS = DEVICES // SHARD_SIZE
# Lost deliveries come back after 3 s instead of an hour, so the tests finish in seconds.
FAST_REDELIVERY = {"PFS_VISIBILITY_TIMEOUT": "3", "PFS_UNACKED_RESTORE_INTERVAL": "1"}


def big_analysis(analyst, officer) -> dict:
    """A 300,000-device fleet in 30 shards and a 4,096-bucket recipe: long enough to interrupt."""
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
    return {
        "query": "select perplexity from ModelMetrics",
        "dataTypeContent": {"perplexity": {"dataType": "BucketedType", "boundaries": boundaries}},
        "privacy": {"mechanism": "asymmetric_ohe", "epsilon0": 3.0, "epsilon": 1.0, "delta": 1e-6},
    }


def start_round(api, recipe: dict) -> int:
    created = api.post("/api/analyses/faults/recipes/", recipe, format="json")
    assert created.status_code == 201, created.json()
    # 4,096 buckets over 300,000 devices is too noisy to start unconfirmed (docs/accuracy.md); long is the point here.
    started = api.post(f"/api/recipes/{created.json()['id']}/rounds/", {"confirmSmallCohorts": True}, format="json")
    return started.json()["id"]


def shards_done(round_id: int) -> int:
    return round_progress(Round.objects.get(pk=round_id))["shards_done"]


def wait_until(condition, timeout: float, every: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(every)


def assert_released_once(round_id: int, logs: list | None = None) -> None:
    round_ = Round.objects.get(pk=round_id)
    if round_.status != Round.Status.RELEASED:  # what the workers did, to tell a lost task from a slow one
        tails = "\n".join(f"--- {path.name}\n{path.read_text(errors='replace')[-4000:]}" for path in logs or [])
        progress = round_progress(round_)
        raise AssertionError(f"round {round_.status} {round_.error!r}, progress {progress}\n{tails}")
    assert round_.release.content["reports"] == DEVICES
    assert ShardRun.objects.filter(task_key=round_.task_key).count() == SHARDS
    totals = ledger_totals(fleet=Fleet.objects.get(name="big"), analysis_identifier="faults")
    assert totals["max:reports_used"] == 1 and totals["sum:reports_used"] == DEVICES
    assert not LeaderShare.objects.exists() and not HelperShare.objects.exists()


def test_killing_the_worker_mid_round_neither_loses_the_round_nor_double_spends(
    fault_queue, analyst, officer, api, tmp_path
) -> None:
    redis_url = redis_url_or_fail()
    recipe = big_analysis(analyst, officer)
    first = Worker(redis_url, tmp_path / "first.log", queue=QUEUE, extra_env=FAST_REDELIVERY)
    try:
        first.wait_ready()
        round_id = start_round(api, recipe)
        wait_until(lambda: shards_done(round_id) >= 2, timeout=60, every=0.02)
    finally:
        first.kill()
    assert 0 < shards_done(round_id) < SHARDS, "the kill must land in the middle of the round"

    second = Worker(redis_url, tmp_path / "second.log", queue=QUEUE, extra_env=FAST_REDELIVERY)
    try:
        second.wait_ready()
        wait_until(lambda: Round.objects.get(pk=round_id).is_finished, timeout=180, every=0.5)
    finally:
        second.stop()
    assert_released_once(round_id, logs=[tmp_path / "first.log", tmp_path / "second.log"])


def test_restarting_redis_mid_round_loses_the_queue_and_the_reaper_resumes_the_round(
    fault_queue, analyst, officer, api, tmp_path
) -> None:
    # Redis here keeps nothing on disk (as deployed by `make worker`'s docs and CI): a restart
    # drops every queued shard task and the chord's counter. The worker reconnects on its own;
    # the reaper notices the round has stopped moving and sends it again.
    broker = PrivateRedis(tmp_path)
    broker.start()
    recipe = big_analysis(analyst, officer)
    worker = Worker(broker.url, tmp_path / "worker.log", queue=QUEUE, extra_env=FAST_REDELIVERY)
    try:
        with celery_broker(broker.url):
            worker.wait_ready()
            round_id = start_round(api, recipe)
            wait_until(lambda: shards_done(round_id) >= 2, timeout=60, every=0.02)
            broker.kill()
            at_restart = shards_done(round_id)
            assert at_restart < SHARDS, "the restart must land in the middle of the round"
            broker.start()
            # Whatever the worker was running when Redis went away may finish; then nothing moves.
            wait_until(lambda: False, timeout=4)
            assert not Round.objects.get(pk=round_id).is_finished, "the lost tasks must have stalled the round"
            if worker.process.poll() is not None:
                # The worker may also die of the lost connection (kombu can fail while restoring
                # its unacknowledged messages: "Unrecoverable error"). A deployment runs workers
                # under a supervisor that starts them again; so does this test.
                worker = Worker(broker.url, tmp_path / "restarted.log", queue=QUEUE, extra_env=FAST_REDELIVERY)
                worker.wait_ready()

            reaped = rounds_reap(stuck_after=timedelta(seconds=2), fail_after=timedelta(hours=1))
            assert reaped.resumed == [round_id]
            wait_until(lambda: Round.objects.get(pk=round_id).is_finished, timeout=180, every=0.5)
    finally:
        worker.stop()
        broker.kill()
    assert_released_once(round_id)


@pytest.mark.skipif(connection.vendor != "postgresql", reason="injects the failure with a PostgreSQL trigger")
def test_a_failing_database_write_in_a_shard_is_retried_by_the_worker_without_double_counting(
    fault_queue, analyst, officer, api, tmp_path
) -> None:
    # The first three shard transactions to reach their ShardRun insert fail with a serialization
    # failure (SQLSTATE 40001: an OperationalError, what a lock conflict looks like). The sequence
    # is outside the transaction, so it counts failures that were rolled back.
    with connection.cursor() as cursor:
        cursor.execute("CREATE SEQUENCE shard_faults")
        cursor.execute(
            """CREATE FUNCTION fail_three_shards() RETURNS trigger AS $$
               BEGIN
                 IF nextval('shard_faults') <= 3 THEN
                   RAISE EXCEPTION 'injected fault' USING ERRCODE = '40001';
                 END IF;
                 RETURN NEW;
               END $$ LANGUAGE plpgsql"""
        )
        cursor.execute(
            "CREATE TRIGGER shard_fault BEFORE INSERT ON devices_shardrun "
            "FOR EACH ROW EXECUTE FUNCTION fail_three_shards()"
        )
    recipe = big_analysis(analyst, officer)
    worker = Worker(redis_url_or_fail(), tmp_path / "worker.log", queue=QUEUE, extra_env=FAST_REDELIVERY)
    try:
        worker.wait_ready()
        round_id = start_round(api, recipe)
        wait_until(lambda: Round.objects.get(pk=round_id).is_finished, timeout=180, every=0.5)
    finally:
        worker.stop()
        with connection.cursor() as cursor:
            cursor.execute("DROP TRIGGER IF EXISTS shard_fault ON devices_shardrun")
            cursor.execute("DROP FUNCTION IF EXISTS fail_three_shards()")
            cursor.execute("SELECT last_value FROM shard_faults")
            fired = cursor.fetchone()[0]
            cursor.execute("DROP SEQUENCE IF EXISTS shard_faults")
    # Every attempt to record a shard drew one number: three failed, then each shard once.
    assert fired == 3 + SHARDS
    assert_released_once(round_id)
