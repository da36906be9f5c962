"""The leader's one door to the helper (aggregation.helper_client): retries, refusals, and what a
user sees while the helper does not answer. (Two real processes: tests/integration/test_two_services.py.)"""

from __future__ import annotations

import pytest

from aggregation import helper_client
from aggregation.models import HelperShare, LeaderShare
from analyses import tasks
from analyses.models import Release, Round
from analyses.services.recipes import recipe_create
from analyses.services.rounds import round_create_and_start, round_dispatch
from devices.models import ShardRun
from devices.services import ledger_totals
from tests.conftest import FLEET_SIZE
from tests.unit.test_device_http import CENTRAL, phones, phones_analysis  # noqa: F401 (fixtures)

pytestmark = pytest.mark.django_db


@pytest.fixture
def helper_down(monkeypatch, settings):
    """Every attempt to reach the helper fails as a refused connection does; the attempts are counted."""
    settings.PFS_HELPER_ATTEMPTS = 3
    attempts = []

    def refused(method, path, body, headers):
        attempts.append(path)
        raise ConnectionRefusedError("connection refused")

    monkeypatch.setattr(helper_client, "_send_in_process", refused)
    monkeypatch.setattr(helper_client.time, "sleep", lambda seconds: None)
    return attempts


def test_a_helper_that_does_not_answer_is_tried_again_then_given_up_on(helper_down) -> None:
    with pytest.raises(helper_client.HelperUnavailable, match="did not answer"):
        helper_client.public_key()
    assert helper_down == ["/hpke_config"] * 3


def test_a_refusal_of_the_helper_is_not_retried(db, monkeypatch) -> None:
    calls = []
    real = helper_client._send_in_process

    def counted(*args):
        calls.append(args[1])
        return real(*args)

    monkeypatch.setattr(helper_client, "_send_in_process", counted)
    from aggregation import dap

    with pytest.raises(helper_client.HelperRefused) as refused:
        helper_client.aggregate_shares(dap.AggregateShareReq(collection="never-provisioned", batches={}))
    assert refused.value.status == 404 and refused.value.code == "unrecognized_task" and len(calls) == 1


def test_a_device_round_does_not_start_while_the_helper_does_not_answer(api, phones_analysis, helper_down) -> None:  # noqa: F811
    created = api.post("/api/analyses/t.phones/recipes/", CENTRAL, format="json")
    started = api.post(f"/api/recipes/{created.json()['id']}/rounds/")
    # The devices would seal to a helper that was never told of the collection: nothing starts.
    assert started.status_code == 503 and started.json()["code"] == "unavailable"
    assert "did not answer" in started.json()["detail"]
    assert not Round.objects.exists()
    assert helper_down  # it was asked


def test_a_simulated_round_whose_helper_does_not_answer_fails_saying_why_and_spends_nothing(
    analysis, recipe, analyst, helper_down, django_capture_on_commit_callbacks
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        round_ = round_create_and_start(analysis=analysis, content=recipe, user=analyst, confirm_small_cohorts=True)
    round_.refresh_from_db()
    assert round_.status == Round.Status.FAILED and "the helper aggregator did not answer" in round_.error
    assert not ShardRun.objects.exists()  # no shard ran: no device spent anything
    assert ledger_totals(fleet=analysis.fleet, analysis_identifier=analysis.identifier).get("max:epsilon", 0) == 0


def test_a_helper_down_at_the_release_leaves_the_round_waiting_and_loses_nothing(
    analysis, recipe, analyst, monkeypatch, settings
) -> None:
    recipe_obj = recipe_create(analysis=analysis, content=recipe, user=analyst)
    round_ = Round.objects.create(recipe=recipe_obj, seed=5, created_by=analyst)
    for shard_id in round_dispatch(round_id=round_.pk):
        tasks.run_shard.apply(args=(round_.pk, shard_id))
    real = helper_client._send_in_process

    def release_refused(method, path, body, headers):
        if path.endswith("/aggregate_shares"):
            raise ConnectionRefusedError("connection refused")
        return real(method, path, body, headers)

    settings.PFS_HELPER_ATTEMPTS = 1
    monkeypatch.setattr(helper_client, "_send_in_process", release_refused)
    tasks.aggregate_round.apply(args=(round_.pk,))
    round_.refresh_from_db()
    assert round_.status == Round.Status.RUNNING and not Release.objects.exists()  # nothing released alone
    assert LeaderShare.objects.count() == HelperShare.objects.count() > 0  # and nothing lost
    monkeypatch.setattr(helper_client, "_send_in_process", real)
    tasks.aggregate_round.apply(args=(round_.pk,))  # as the reaper resends it
    round_.refresh_from_db()
    assert round_.status == Round.Status.RELEASED and round_.release.content["reports"] == FLEET_SIZE
