"""Issue: the smaller breaks of the analyst-side walk.

- a device-fleet release said ``epsilon_spent: 0.0`` when its reports were verified at the close;
- ``seed_demo --reset-budgets`` deleted device audit records by prefix, other analyses' too;
- a 100,000-deep JSON body on ``/api/device/reports/`` was a 500;
- simulated rounds' seeds were shown in the admin, and a seed (with one aggregator's share) fixed
  the other aggregator's mask: a seed is never shown, and is useless without a server secret."""

from __future__ import annotations

import copy

import pytest
from django.core.management import call_command
from django.test import override_settings

from analyses.models import Round
from devices.models import FleetShard, ShardRun
from devices.services import _coins
from tests.unit.test_device_http import upload, with_close

pytestmark = pytest.mark.django_db


def test_a_device_fleet_release_says_its_devices_spent_budget(
    api, phones, central_round, django_capture_on_commit_callbacks
):
    _, devices = phones
    for device in devices[:4]:  # verified only when the collection closes
        assert upload(device.report(central_round.task_key, 1)).status_code == 202
    with django_capture_on_commit_callbacks(execute=True):
        with_close(api, central_round)
    release = api.get(f"/api/rounds/{central_round.pk}/release/").json()
    assert release["reports"] == 4 and release["epsilon_spent"] == 1.0


def test_reset_budgets_forgets_exactly_the_demo_analyses_audit_records(analyst) -> None:
    call_command("seed_demo", "--devices", "1000", "--shard-size", "1000")
    # Another analysis's record whose collection id starts with a demo identifier and a slash.
    ShardRun.objects.create(
        task_key="demo.keyboard/evil/round-1", shard=FleetShard.objects.first(), answered=0, epsilon_spent=0.0
    )
    call_command("seed_demo", "--devices", "1000", "--shard-size", "1000", "--reset-budgets")
    assert ShardRun.objects.filter(task_key="demo.keyboard/evil/round-1").exists()


def test_a_report_body_nested_deeper_than_any_report_is_a_400(client) -> None:
    body = "[" * 100_000 + "]" * 100_000
    response = client.post("/api/device/reports/", body, content_type="application/json")
    assert response.status_code == 400 and "nested too deep" in response.json()["fields"]["non_field_errors"][0]


def test_the_admin_never_shows_a_rounds_seed(client, officer, api, analysis, recipe) -> None:
    recipe_id = api.post("/api/analyses/test.ages/recipes/", recipe, format="json").json()["id"]
    round_ = Round.objects.get(pk=api.post(f"/api/recipes/{recipe_id}/rounds/").json()["id"])
    client.force_login(officer)
    page = client.get(f"/admin/analyses/round/{round_.pk}/change/").content.decode()
    assert str(round_.seed) not in page and "Seed" not in page


def test_a_seed_alone_does_not_fix_the_coins(analysis) -> None:
    from analyses.services.recipes import recipe_device_task, recipe_unsaved, recipe_validate
    from tests.conftest import RECIPE

    content = copy.deepcopy(RECIPE)
    task = recipe_device_task(
        recipe_unsaved(analysis, content, recipe_validate(analysis=analysis, content=content), None),
        task_key="k",
        seed=12345,
    )
    shard = FleetShard.objects.first()
    ours = _coins(task, shard, 2).integers(0, 2**62, size=4).tolist()
    with override_settings(PFS_COIN_SECRET="another-server"):
        theirs = _coins(task, shard, 2).integers(0, 2**62, size=4).tolist()
    assert ours != theirs  # the same seed on another server: other masks
    assert ours == _coins(task, shard, 2).integers(0, 2**62, size=4).tolist()  # replayable with the secret
