"""A dry run says how many devices would answer a recipe and why the others would not; it spends nothing."""

from __future__ import annotations

import copy

import pytest

from analyses.services.rounds import round_dry_run
from devices.models import ShardLedger, ShardRun
from pfs_device.budget import ledger_empty
from pfs_device.columns import pack
from tests.conftest import FLEET_SIZE
from tests.unit.test_dashboard import FORM


def test_a_dry_run_counts_the_devices_that_would_answer_and_spends_nothing(analysis, recipe) -> None:
    result = round_dry_run(analysis=analysis, content=recipe)
    assert result == {
        "devices": FLEET_SIZE,
        "would_answer": FLEET_SIZE,
        "not_sampled": 0,
        "would_refuse": {},
        "min_cohort": 736,
        "meets_min_cohort": True,
        "release": "all",  # no batch: the answering total decides
        "cohorts": [],  # no cohort split: one batch
        "batches_released": [],
        "batches_below": [],
        "epsilon": 1.0,
        "delta": 1e-6,
        "expected_error": result["expected_error"],  # tests/unit/test_accuracy.py
        "too_noisy": False,
        "too_noisy_reason": None,
    }
    assert not ShardRun.objects.exists() and not ShardLedger.objects.exists()
    assert not analysis.recipes.exists()


def test_a_dry_run_shows_which_devices_would_refuse_and_why(analysis, recipe, monkeypatch) -> None:
    monkeypatch.setattr("analyses.services.rounds.secrets.randbits", lambda bits: 20221123)  # fixed coins
    # The devices' own ledgers decide, not the server's view: here the first 300 devices of every
    # shard have used both reports of the analysis (as after rounds the server no longer lists).
    shards = list(analysis.fleet.shards.order_by("index"))
    for shard in shards:
        ledger = ledger_empty(shard.size)
        ledger["reports_used"][:300] = 2
        ShardLedger.objects.create(shard=shard, analysis_identifier=analysis.identifier, state=pack(ledger))
    sampled = copy.deepcopy(recipe)
    sampled["privacy"]["samplingRate"] = 0.8
    before = {row.pk: bytes(row.state) for row in ShardLedger.objects.all()}

    result = round_dry_run(analysis=analysis, content=sampled)

    refusing, not_sampled = result["would_refuse"].get("analysis_budget", 0), result["not_sampled"]
    assert set(result["would_refuse"]) == {"analysis_budget"}
    # Sampling comes first: of the 300 x shards spent devices, a fraction 0.8 is asked and refuses.
    spent = 300 * len(shards)
    assert abs(refusing - 0.8 * spent) < 4 * (spent * 0.8 * 0.2) ** 0.5
    assert abs(not_sampled - 0.2 * FLEET_SIZE) < 4 * (FLEET_SIZE * 0.2 * 0.8) ** 0.5
    assert result["would_answer"] + refusing + not_sampled == FLEET_SIZE
    assert {row.pk: bytes(row.state) for row in ShardLedger.objects.all()} == before  # nothing charged
    assert not ShardRun.objects.exists()


def test_a_bad_recipe_is_refused_by_field_before_any_device_is_asked(analysis, recipe) -> None:
    from pfs_base.errors import ValidationFailed

    recipe["privacy"]["epsilon0"] = 40.0
    with pytest.raises(ValidationFailed) as refused:
        round_dry_run(analysis=analysis, content=recipe)
    assert "privacy.epsilon0" in refused.value.errors


def test_the_api_and_the_page_run_a_dry_run(api, analysis, recipe, analyst, client) -> None:
    response = api.post("/api/analyses/test.ages/dry-run/", recipe, format="json")
    assert response.status_code == 200 and response.json()["would_answer"] == FLEET_SIZE
    assert api.post("/api/analyses/test.ages/dry-run/", {**recipe, "query": "drop"}, format="json").status_code == 400

    client.force_login(analyst)
    page = client.post("/analyses/test.ages/", {**FORM, "action": "dry-run"})
    assert page.status_code == 200
    assert f"{FLEET_SIZE:,} of {FLEET_SIZE:,} devices would answer" in page.content.decode()
    assert not analysis.recipes.exists() and not ShardRun.objects.exists()
