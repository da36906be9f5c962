"""The reaper resumes rounds whose tasks were lost and fails those too old, spending nothing twice."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from analyses import tasks
from analyses.models import Round
from analyses.reaper import rounds_reap
from analyses.services.recipes import recipe_create
from analyses.services.rounds import round_create_and_start, round_dispatch, round_start
from devices.models import ShardRun
from devices.services import ledger_totals
from pfs_device.budget import to_units
from tests.conftest import FLEET_SIZE

pytestmark = pytest.mark.django_db

STUCK, FAIL = timedelta(minutes=15), timedelta(hours=24)


def lost_round(analysis, recipe, analyst, *, age: timedelta, shards_answered: int = 0) -> Round:
    """A round whose messages were lost after ``shards_answered`` shards answered, ``age`` ago."""
    recipe_obj = recipe_create(analysis=analysis, content=recipe, user=analyst)
    # round_start sends dispatch_round on commit; the test transaction never commits: a lost message.
    round_ = round_start(recipe=recipe_obj, user=analyst)
    if shards_answered:
        for shard_id in round_dispatch(round_id=round_.pk)[:shards_answered]:
            tasks.run_shard.apply(args=(round_.pk, shard_id))
    then = timezone.now() - age
    Round.objects.filter(pk=round_.pk).update(created_at=then, started_at=then if shards_answered else None)
    ShardRun.objects.filter(task_key=round_.task_key).update(created_at=then)
    return round_


def test_a_round_lost_before_dispatch_is_resumed_and_released(
    analysis, recipe, analyst, django_capture_on_commit_callbacks
) -> None:
    round_ = lost_round(analysis, recipe, analyst, age=timedelta(hours=1))
    with django_capture_on_commit_callbacks(execute=True):  # the resumed tasks run on commit
        assert rounds_reap(stuck_after=STUCK, fail_after=FAIL).resumed == [round_.pk]
    round_.refresh_from_db()
    assert round_.status == Round.Status.RELEASED


def test_a_round_lost_midway_resumes_without_spending_any_budget_twice(
    analysis, recipe, analyst, django_capture_on_commit_callbacks
) -> None:
    round_ = lost_round(analysis, recipe, analyst, age=timedelta(hours=1), shards_answered=2)
    with django_capture_on_commit_callbacks(execute=True):
        assert rounds_reap(stuck_after=STUCK, fail_after=FAIL).resumed == [round_.pk]
    round_.refresh_from_db()
    assert round_.status == Round.Status.RELEASED
    assert round_.release.content["reports"] == FLEET_SIZE
    totals = ledger_totals(fleet=analysis.fleet, analysis_identifier="test.ages")
    assert totals["max:epsilon_used"] == to_units(1.0) and totals["sum:reports_used"] == FLEET_SIZE


def test_a_round_too_old_to_resume_is_failed_with_the_reason(analysis, recipe, analyst) -> None:
    round_ = lost_round(analysis, recipe, analyst, age=timedelta(days=2), shards_answered=1)
    assert rounds_reap(stuck_after=STUCK, fail_after=FAIL).failed == [round_.pk]
    round_.refresh_from_db()
    assert round_.status == Round.Status.FAILED and "failed by the reaper" in round_.error


def test_a_round_still_making_progress_is_left_alone(analysis, recipe, analyst) -> None:
    round_ = lost_round(analysis, recipe, analyst, age=timedelta(hours=1), shards_answered=1)
    ShardRun.objects.filter(task_key=round_.task_key).update(created_at=timezone.now())  # a shard just answered
    assert rounds_reap(stuck_after=STUCK, fail_after=FAIL).resumed == []
    round_.refresh_from_db()
    assert round_.status == Round.Status.RUNNING


def test_finished_rounds_are_never_touched(analysis, recipe, analyst, django_capture_on_commit_callbacks) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        round_ = round_create_and_start(analysis=analysis, content=recipe, user=analyst)
    Round.objects.filter(pk=round_.pk).update(created_at=timezone.now() - timedelta(days=3))
    assert rounds_reap(stuck_after=STUCK, fail_after=FAIL).failed == []
    assert Round.objects.get(pk=round_.pk).status == Round.Status.RELEASED


def test_the_command_reports_what_it_did_and_refuses_bad_arguments(analysis, recipe, analyst, capsys) -> None:
    round_ = lost_round(analysis, recipe, analyst, age=timedelta(hours=1))
    call_command("reap_rounds", "--json")
    assert json.loads(capsys.readouterr().out) == {"resumed": [round_.pk], "failed": [], "advanced": []}
    with pytest.raises(CommandError) as refused:
        call_command("reap_rounds", "--stuck-after", "0")
    assert refused.value.returncode == 2
