"""The device audit log: recipe, decision (answered / refused and why), epsilon spent — CLI and admin."""

from __future__ import annotations

import json

import pytest
from django.core.management import CommandError, call_command

from analyses.models import Round
from analyses.services.rounds import round_create_and_start
from devices.models import ShardRun
from pfs_device.decision import DeviceTask

pytestmark = pytest.mark.django_db


def run(analysis, recipe, analyst, capture, **privacy):
    recipe["privacy"].update(privacy)
    with capture(execute=True):
        return round_create_and_start(analysis=analysis, content=recipe, user=analyst)


def test_the_log_shows_each_task_with_the_device_decision_and_spend(
    analysis, recipe, analyst, django_capture_on_commit_callbacks, capsys
) -> None:
    run(analysis, recipe, analyst, django_capture_on_commit_callbacks, samplingRate=0.7)
    call_command("device_audit", "d4321", "--fleet", "small", "--json")
    (entry,) = json.loads(capsys.readouterr().out)
    assert entry["query"] == "select age from KeyboardNGrams" and entry["mechanism"] == "asymmetric_ohe"
    assert entry["decision"] in {"answered", "not_sampled"}
    assert entry["epsilon_spent"] == (1.0 if entry["decision"] == "answered" else 0.0)
    assert entry["task_key"] == Round.objects.get().task_key


def test_decisions_in_the_log_add_up_to_the_round_counts(
    analysis, recipe, analyst, django_capture_on_commit_callbacks
) -> None:
    from devices.audit import device_audit

    round_ = run(analysis, recipe, analyst, django_capture_on_commit_callbacks, samplingRate=0.7)
    shard = analysis.fleet.shards.order_by("index").first()
    decisions = [device_audit(fleet=analysis.fleet, device_id=f"d{i}")[0].decision for i in range(shard.size)]
    run_record = shard.runs.get(task_key=round_.task_key)
    assert decisions.count("answered") == run_record.answered
    assert decisions.count("not_sampled") == run_record.outcomes.get("not_sampled", 0)


def test_an_unknown_device_exits_2(analysis) -> None:
    with pytest.raises(CommandError) as raised:
        call_command("device_audit", "nobody", "--fleet", "small")
    assert raised.value.returncode == 2


def test_the_officer_reads_a_device_log_in_the_admin(
    client, analysis, recipe, analyst, officer, django_capture_on_commit_callbacks
) -> None:
    run(analysis, recipe, analyst, django_capture_on_commit_callbacks)
    client.force_login(officer)
    page = client.get(f"/admin/devices/fleet/{analysis.fleet.pk}/audit/", {"device": "d7"}).content.decode()
    assert "Device d7 of fleet small" in page and "answered" in page and "select age from KeyboardNGrams" in page


def test_an_analyst_cannot_read_device_logs(client, analysis, analyst) -> None:
    client.force_login(analyst)
    assert client.get(f"/admin/devices/fleet/{analysis.fleet.pk}/audit/", {"device": "d7"}).status_code == 302


def test_a_record_kept_in_the_flat_shape_of_older_tasks_is_read(
    analysis, recipe, analyst, django_capture_on_commit_callbacks, capsys
) -> None:
    """The task as ShardRun kept it before tasks carried a noise or a token key: the parameters as flat
    keys, as every task's JSON still holds them (DeviceTask.as_json)."""
    round_ = run(analysis, recipe, analyst, django_capture_on_commit_callbacks)
    old = {
        "task_key": round_.task_key, "analysis": "test.ages", "snapshot_digest": analysis.snapshot.digest,
        "query": "select age from KeyboardNGrams", "cohorts": [], "encoded_field": "age",
        "data_types": recipe["dataTypeContent"], "mechanism": "kary_rr", "epsilon0": 2.5, "epsilon": 0.5,
        "delta": 1e-7, "sampling_rate": 1.0, "min_cohort": 300,
    }  # fmt: skip
    ShardRun.objects.filter(task_key=round_.task_key).update(task=old)
    call_command("device_audit", "d7", "--fleet", "small", "--json")
    (entry,) = json.loads(capsys.readouterr().out)
    assert (entry["mechanism"], entry["epsilon0"], entry["epsilon"], entry["delta"]) == ("kary_rr", 2.5, 0.5, 1e-7)
    call_command("device_audit", "d7", "--fleet", "small")
    assert "kary_rr eps0=2.5 eps=0.5" in capsys.readouterr().out
    # And the same keys are what a task's JSON holds today: the audit reads one shape.
    stored_again = json.loads(json.dumps(DeviceTask.from_wire(old).audit_json()))
    assert stored_again == {**old, "noise": "client", "token_key": ""}
