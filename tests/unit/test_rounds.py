"""The life of a round through the services and tasks (inline): idempotency, budgets, cohorts."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from aggregation.models import Collection, HelperShare, LeaderShare
from aggregation.upload import CollectionClosed
from analyses import tasks
from analyses.models import Release, Round
from analyses.services.policy import analysis_approve
from analyses.services.recipes import device_task, recipe_create
from analyses.services.rounds import (
    _collection_rules_open,
    round_aggregate,
    round_cancel,
    round_create_and_start,
    round_dispatch,
    round_fail,
    round_progress,
    round_shard_run,
)
from devices.models import ShardRun
from devices.services import ledger_totals, shard_answer
from pfs_base.errors import NotAllowed
from pfs_device.budget import to_units
from tests.conftest import FLEET_SIZE

pytestmark = pytest.mark.django_db


def run(analysis, recipe, user, capture) -> Round:
    with capture(execute=True):
        round_ = round_create_and_start(analysis=analysis, content=recipe, user=user, confirm_small_cohorts=True)
    round_.refresh_from_db()
    return round_


def test_a_round_releases_and_spends_each_device_budget_once(
    analysis, recipe, analyst, django_capture_on_commit_callbacks
) -> None:
    round_ = run(analysis, recipe, analyst, django_capture_on_commit_callbacks)
    assert round_.status == Round.Status.RELEASED
    totals = ledger_totals(fleet=analysis.fleet, analysis_identifier="test.ages")
    assert totals["max:epsilon_used"] == to_units(1.0)
    assert totals["sum:reports_used"] == FLEET_SIZE
    # Devices without an age answered too (into OOV): sending nothing would itself be disclosive.
    missing_age = sum(int(np.isnan(s.load_columns()["age"]).sum()) for s in analysis.fleet.shards.all())
    assert missing_age > 0 and round_.release.content["reports"] == FLEET_SIZE
    assert totals["max:field:age:reports_used"] == 1


def test_a_retried_shard_task_spends_nothing_twice_and_adds_no_report(analysis, recipe, analyst) -> None:
    recipe_obj = recipe_create(analysis=analysis, content=recipe, user=analyst)
    round_ = Round.objects.create(recipe=recipe_obj, seed=5, created_by=analyst)
    shard_ids = round_dispatch(round_id=round_.pk)
    for shard_id in shard_ids:
        tasks.run_shard.apply(args=(round_.pk, shard_id))
    before = ledger_totals(fleet=analysis.fleet, analysis_identifier="test.ages")
    tasks.run_shard.apply(args=(round_.pk, shard_ids[0]))  # a redelivered message
    assert ledger_totals(fleet=analysis.fleet, analysis_identifier="test.ages") == before
    assert LeaderShare.objects.count() == HelperShare.objects.count() == len(shard_ids)
    tasks.aggregate_round.apply(args=(round_.pk,))
    tasks.aggregate_round.apply(args=(round_.pk,))  # a retried callback
    round_.refresh_from_db()
    assert round_.status == Round.Status.RELEASED
    assert round_.release.content["reports"] == FLEET_SIZE


def test_shares_are_deleted_once_their_batch_is_aggregated(
    analysis, recipe, analyst, django_capture_on_commit_callbacks
) -> None:
    run(analysis, recipe, analyst, django_capture_on_commit_callbacks)
    assert LeaderShare.objects.count() == HelperShare.objects.count() == 0
    assert Collection.objects.count() == 1


def test_devices_refuse_once_their_budget_is_spent(
    analysis, recipe, analyst, django_capture_on_commit_callbacks
) -> None:
    first = run(analysis, recipe, analyst, django_capture_on_commit_callbacks)
    recipe["recipeIdentifier"] = "ages-2"
    second = run(analysis, recipe, analyst, django_capture_on_commit_callbacks)
    assert first.release.content["reports"] == second.release.content["reports"] == FLEET_SIZE
    # The server now refuses a third recipe; a round sent anyway (bypassing the server's check)
    # meets the devices' own ledgers, which are spent: every device refuses, nothing is charged.
    before = ledger_totals(fleet=analysis.fleet, analysis_identifier="test.ages")
    round_ = Round.objects.create(recipe=second.recipe, seed=9, created_by=analyst)
    for shard_id in round_dispatch(round_id=round_.pk):
        round_shard_run(round_id=round_.pk, shard_id=shard_id)
    progress = round_progress(round_)
    assert progress["devices_answered"] == 0
    assert progress["devices_not_answering"] == {"analysis_budget": FLEET_SIZE}
    assert ledger_totals(fleet=analysis.fleet, analysis_identifier="test.ages") == before


def test_a_cohort_below_the_minimum_is_suppressed_not_dropped(
    analysis, recipe, analyst, django_capture_on_commit_callbacks
) -> None:
    recipe["cohorts"] = ["locale"]
    recipe["privacy"]["minCohort"] = 2935  # raised by the recipe: more than any locale of 5,000 devices holds
    round_ = run(analysis, recipe, analyst, django_capture_on_commit_callbacks)
    batches = round_.release.content["batches"]
    by_cohort = {b["cohort"]: b for b in batches}
    # 5,000 devices: en_US (about half) falls short of 2,935 like every other locale.
    assert set(by_cohort) == {f"locale={loc}" for loc in ["en_US", "en_GB", "fr_FR", "de_DE", "es_ES"]}
    assert all(b["suppressed"] for b in batches)
    assert all("fewer than 2,935 reports" in b["reason"] and b["reports"] is None for b in batches)
    assert round_.release.content["reports"] == 0
    # The devices answered and were charged even though nothing was released.
    assert round_.release.content["epsilon_spent"] == 1.0


def test_sampling_rate_samples_devices_with_their_own_coins(
    analysis, recipe, analyst, django_capture_on_commit_callbacks
) -> None:
    recipe["privacy"]["samplingRate"] = 0.7  # expects 3,500 >= 2,935
    round_ = run(analysis, recipe, analyst, django_capture_on_commit_callbacks)
    progress = round_progress(round_)
    n, q = FLEET_SIZE, 0.7
    assert abs(progress["devices_answered"] - n * q) < 4 * (n * q * (1 - q)) ** 0.5
    assert progress["devices_answered"] + progress["devices_not_answering"]["not_sampled"] == n
    assert round_.release.content["reports"] == progress["devices_answered"]


def test_a_recipe_naming_an_unknown_policy_snapshot_is_refused_by_every_device(analysis, recipe, analyst) -> None:
    recipe_obj = recipe_create(analysis=analysis, content=recipe, user=analyst)
    round_ = Round.objects.create(recipe=recipe_obj, seed=1, created_by=analyst)
    round_dispatch(round_id=round_.pk)
    task = device_task(round_)
    shard = analysis.fleet.shards.first()
    outcome = shard_answer(shard_id=shard.pk, task=replace(task, snapshot_digest="0" * 64))
    assert outcome.answered == 0
    assert outcome.outcomes == {"policy_snapshot": shard.size}
    assert ShardRun.objects.get().answered == 0


def test_after_re_approval_devices_refuse_tasks_under_the_old_snapshot(analysis, recipe, analyst, officer) -> None:
    from analyses.models import FieldPolicy

    recipe_obj = recipe_create(analysis=analysis, content=recipe, user=analyst)
    round_ = Round.objects.create(recipe=recipe_obj, seed=1, created_by=analyst)
    round_dispatch(round_id=round_.pk)
    old_task = device_task(round_)
    FieldPolicy.objects.filter(analysis=analysis, field="age").update(epsilon=1.5)
    analysis_approve(analysis=analysis, officer=officer)  # devices now hold a new snapshot
    assert analysis.snapshot.digest != old_task.snapshot_digest
    shard = analysis.fleet.shards.first()
    assert shard_answer(shard_id=shard.pk, task=old_task).outcomes == {"policy_snapshot": shard.size}


def test_a_shard_answers_the_task_of_the_snapshot_the_analysis_holds_when_it_runs(
    analysis, recipe, analyst, officer
) -> None:
    # Shards keep their round's task (built once per process), never past a re-approval or the round's end.
    from analyses.models import FieldPolicy

    recipe_obj = recipe_create(analysis=analysis, content=recipe, user=analyst)
    round_ = Round.objects.create(recipe=recipe_obj, seed=1, created_by=analyst)
    first, second, third = round_dispatch(round_id=round_.pk)[:3]
    round_shard_run(round_id=round_.pk, shard_id=first)
    FieldPolicy.objects.filter(analysis=analysis, field="age").update(epsilon=1.5)
    analysis_approve(analysis=analysis, officer=officer)  # the fleet's devices are enrolled anew
    round_shard_run(round_id=round_.pk, shard_id=second)
    runs = {run.shard_id: run for run in ShardRun.objects.filter(task_key=round_.task_key)}
    assert runs[first].task["snapshot_digest"] != runs[second].task["snapshot_digest"]
    assert runs[second].task["snapshot_digest"] == analysis.snapshot.digest
    Round.objects.filter(pk=round_.pk).update(status=Round.Status.CANCELLED)
    round_shard_run(round_id=round_.pk, shard_id=third)
    assert set(ShardRun.objects.filter(task_key=round_.task_key).values_list("shard_id", flat=True)) == {first, second}


def test_a_recipe_naming_another_snapshot_is_refused_by_the_server(api, analysis, recipe) -> None:
    recipe["policySnapshot"] = "f" * 64
    response = api.post("/api/analyses/test.ages/recipes/", recipe, format="json")
    assert response.status_code == 400 and "policySnapshot" in response.json()["fields"]
    recipe["policySnapshot"] = analysis.snapshot.digest
    assert api.post("/api/analyses/test.ages/recipes/", recipe, format="json").status_code == 201


def test_tasks_of_a_deleted_round_do_nothing(analysis, recipe, analyst) -> None:
    recipe_obj = recipe_create(analysis=analysis, content=recipe, user=analyst)
    round_ = Round.objects.create(recipe=recipe_obj, seed=1, created_by=analyst)
    round_id, shard_id = round_.pk, analysis.fleet.shards.first().pk
    round_.delete()
    tasks.dispatch_round.apply(args=(round_id,), throw=True)
    tasks.run_shard.apply(args=(round_id, shard_id), throw=True)
    tasks.aggregate_round.apply(args=(round_id,), throw=True)
    assert not ShardRun.objects.exists()


def test_phrases_past_retention_are_deleted_from_the_shard_before_the_query_runs(
    analysis, recipe, analyst, django_capture_on_commit_callbacks, monkeypatch
) -> None:
    import time as clock
    from types import SimpleNamespace

    from devices import services as device_services
    from pfs_device.columns import unpack
    from pfs_device.streams import RETENTION_DAYS, SECONDS_PER_DAY, apply_retention

    shard = analysis.fleet.shards.order_by("index").first()
    now = clock.time()
    monkeypatch.setattr(device_services, "time", SimpleNamespace(time=lambda: now))  # the round's clock
    cutoff = now - RETENTION_DAYS["KeyboardNGrams"] * SECONDS_PER_DAY
    before = unpack(shard.columns)
    assert (before["phrase_time"] < cutoff).any()  # the fleet has 60 days of history
    run(analysis, recipe, analyst, django_capture_on_commit_callbacks)
    shard.refresh_from_db()
    columns = unpack(shard.columns)
    assert (columns["phrase_time"] >= cutoff).all()
    assert columns["phrase_start"][-1] == columns["phrase_time"].size
    # Exactly what retention keeps, and every other column as it was (copied, not re-encoded).
    expected, _ = apply_retention(before, now=now)
    assert list(columns) == list(before)
    for name in columns:
        np.testing.assert_array_equal(columns[name], expected[name])


def test_a_database_write_failing_inside_a_shard_rolls_the_shard_back_and_fails_the_round_cleanly(
    analysis, recipe, analyst, django_capture_on_commit_callbacks, monkeypatch
) -> None:
    # In-process tasks do not retry (a worker retries OperationalError with backoff): the round
    # fails, with the reason, and the failing shard leaves nothing behind.
    from celery.exceptions import Retry
    from django.db import OperationalError

    from devices import services as device_services

    real_create = ShardRun.objects.create

    def create_failing_on_shard_2(**fields):
        # The last write of the shard's transaction fails, as a lost connection would: the
        # shares and the ledger written before it in the same transaction must go too.
        if fields["shard"].index == 2:
            raise OperationalError("server closed the connection unexpectedly")
        return real_create(**fields)

    monkeypatch.setattr(device_services.ShardRun.objects, "create", create_failing_on_shard_2)
    with pytest.raises((OperationalError, Retry)):  # the in-process call reports the failure to its caller
        run(analysis, recipe, analyst, django_capture_on_commit_callbacks)

    round_ = Round.objects.get()
    assert round_.status == Round.Status.FAILED and "server closed the connection" in round_.error
    failed_shard = analysis.fleet.shards.get(index=2)
    assert not ShardRun.objects.filter(shard=failed_shard).exists()
    assert not LeaderShare.objects.filter(source=f"shard:{failed_shard.pk}").exists()
    assert not failed_shard.ledgers.exists()  # its devices were not charged
    totals = ledger_totals(fleet=analysis.fleet, analysis_identifier="test.ages")
    answered = ShardRun.objects.filter(task_key=round_.task_key).count()
    assert totals["max:reports_used"] == 1  # nobody charged twice
    assert totals["sum:reports_used"] == answered * (FLEET_SIZE // analysis.fleet.shards.count())


def test_a_cancelled_round_releases_nothing_drops_its_shares_and_runs_no_more_shards(analysis, recipe, analyst) -> None:
    recipe_obj = recipe_create(analysis=analysis, content=recipe, user=analyst)
    round_ = Round.objects.create(recipe=recipe_obj, seed=5, created_by=analyst)
    _collection_rules_open(round_)
    first, *rest = round_dispatch(round_id=round_.pk)
    round_shard_run(round_id=round_.pk, shard_id=first)
    answered = ledger_totals(fleet=analysis.fleet, analysis_identifier="test.ages")
    assert LeaderShare.objects.count() == 1

    round_cancel(round_=round_, user=analyst)
    round_.refresh_from_db()
    assert (round_.status, round_.error) == (Round.Status.CANCELLED, f"cancelled by {analyst.username}")
    assert not LeaderShare.objects.exists() and not HelperShare.objects.exists()
    for shard_id in rest:  # shard tasks still in the queue do nothing
        round_shard_run(round_id=round_.pk, shard_id=shard_id)
    assert round_aggregate(round_id=round_.pk).status == Round.Status.CANCELLED
    assert not Release.objects.filter(round=round_).exists()
    # The devices of the first shard did send reports: their budget stays spent, no one else's is.
    assert ledger_totals(fleet=analysis.fleet, analysis_identifier="test.ages") == answered
    assert ShardRun.objects.filter(task_key=round_.task_key).count() == 1


def test_a_shard_that_answers_after_the_cancel_stores_nothing_and_charges_no_one(analysis, recipe, analyst) -> None:
    recipe_obj = recipe_create(analysis=analysis, content=recipe, user=analyst)
    round_ = Round.objects.create(recipe=recipe_obj, seed=5, created_by=analyst)
    _collection_rules_open(round_)
    shard_id, *_ = round_dispatch(round_id=round_.pk)
    round_cancel(round_=round_, user=analyst)
    # A shard that read the round as running just before the cancel committed:
    with pytest.raises(CollectionClosed):
        shard_answer(shard_id=shard_id, task=device_task(round_))
    assert not LeaderShare.objects.exists()
    assert ledger_totals(fleet=analysis.fleet, analysis_identifier="test.ages").get("sum:reports_used", 0) == 0


def test_a_finished_round_cannot_be_cancelled(analysis, recipe, analyst, django_capture_on_commit_callbacks) -> None:
    round_ = run(analysis, recipe, analyst, django_capture_on_commit_callbacks)
    with pytest.raises(NotAllowed, match="already released"):
        round_cancel(round_=round_, user=analyst)
    round_.refresh_from_db()
    assert round_.status == Round.Status.RELEASED and round_.release.content["reports"] == FLEET_SIZE


def test_a_queued_round_cancelled_before_its_dispatch_never_runs(
    analysis, recipe, analyst, django_capture_on_commit_callbacks
) -> None:
    with django_capture_on_commit_callbacks() as callbacks:
        round_ = round_create_and_start(analysis=analysis, content=recipe, user=analyst, confirm_small_cohorts=True)
    round_cancel(round_=round_, user=analyst)
    for callback in callbacks:  # the dispatch message arrives after the cancel
        callback()
    round_.refresh_from_db()
    assert round_.status == Round.Status.CANCELLED and round_.started_at is None
    assert not ShardRun.objects.filter(task_key=round_.task_key).exists()


def test_a_failed_round_drops_what_its_collection_held(analysis, recipe, analyst) -> None:
    recipe_obj = recipe_create(analysis=analysis, content=recipe, user=analyst)
    round_ = Round.objects.create(recipe=recipe_obj, seed=5, created_by=analyst)
    _collection_rules_open(round_)
    shard_id, *_ = round_dispatch(round_id=round_.pk)
    round_shard_run(round_id=round_.pk, shard_id=shard_id)
    assert LeaderShare.objects.exists()
    round_fail(round_id=round_.pk, error="the worker gave up")
    assert not LeaderShare.objects.exists() and not HelperShare.objects.exists()
    assert Round.objects.get(pk=round_.pk).status == Round.Status.FAILED
