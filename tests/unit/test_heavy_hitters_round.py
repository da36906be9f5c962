"""A Poplar1 round (a Poplar1Words recipe): devices charge the walk's budget and upload one Poplar1
report each; once collected, the aggregators walk the tree and the round releases the words found."""

from __future__ import annotations

import copy
from dataclasses import replace

import pytest
from django.db import connection

from aggregation.models import Poplar1Level, Poplar1Report
from analyses.models import Round
from analyses.services.rounds import round_create_and_start
from devices import services
from devices.models import ShardRun
from devices.services import ledger_totals
from tests.heavy_hitters import RECIPE

pytestmark = pytest.mark.usefixtures("fixed_coins")


def test_a_poplar1_round_walks_and_releases_the_words_found(
    hh_analysis, analyst, django_capture_on_commit_callbacks
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        round_ = round_create_and_start(analysis=hh_analysis, content=copy.deepcopy(RECIPE), user=analyst)
    round_.refresh_from_db()
    assert round_.status == Round.Status.RELEASED, round_.error
    walk = round_.release.content["walk"]
    assert walk["words"]
    assert ledger_totals(fleet=hh_analysis.fleet, analysis_identifier="t.hh")
    for store in ("default", "helper"):
        assert not Poplar1Report.objects.using(store).filter(collection_key=round_.task_key).exists()
    assert Poplar1Level.objects.filter(collection_key=round_.task_key).count() == len(walk["levels"])


def _walk(hh_analysis, analyst, capture) -> Round:
    with capture(execute=True):
        round_ = round_create_and_start(analysis=hh_analysis, content=copy.deepcopy(RECIPE), user=analyst)
    round_.refresh_from_db()
    assert round_.status == Round.Status.RELEASED, round_.error
    return round_


def test_a_shards_devices_shard_their_words_before_the_shard_is_locked(
    hh_analysis, analyst, django_capture_on_commit_callbacks, monkeypatch
) -> None:
    """Sharding costs each device milliseconds: a shard of thousands must not hold the database's
    write lock (SQLite's, for every writer) meanwhile. Each shard shards once, outside its transaction,
    and the locked answer sends exactly those reports, one per answering device."""
    outside = len(connection.atomic_blocks)
    depths, sent = [], []
    shard_words, upload = services.simulated_shard, services.sharded_upload

    def spying_shard(rules, measurements, coins):
        depths.append(len(connection.atomic_blocks))
        return shard_words(rules, measurements, coins)

    def spying_upload(rules, reports):
        sent.append(len(reports.mine))
        return upload(rules, reports)

    monkeypatch.setattr(services, "simulated_shard", spying_shard)
    monkeypatch.setattr(services, "sharded_upload", spying_upload)
    round_ = _walk(hh_analysis, analyst, django_capture_on_commit_callbacks)

    runs = ShardRun.objects.filter(task_key=round_.task_key).order_by("shard__index")
    assert depths == [outside] * runs.count()
    assert sent == [run.answered for run in runs] and sum(sent) > 0
    assert round_.release.content["walk"]["words"]


def test_reports_sharded_before_the_lock_are_drawn_again_when_the_shard_answers_differently(
    hh_analysis, analyst, django_capture_on_commit_callbacks, monkeypatch
) -> None:
    """Between the unlocked sharding and the lock, another writer may change the shard (retention)
    or its devices' decisions (a charge, a new enrolment): reports prepared for other devices are
    dropped, never sent, and the locked answer shards its own devices' words."""
    prepare = services._poplar1_prepared
    stale = []

    def stale_prepared(shard_id, task, now):
        ready = prepare(shard_id, task, now)
        stale.append(ready)
        return replace(ready, answered=~ready.answered)  # as if other devices had answered then

    sent = []
    upload = services.sharded_upload
    monkeypatch.setattr(services, "_poplar1_prepared", stale_prepared)
    monkeypatch.setattr(
        services, "sharded_upload", lambda rules, reports: sent.append(reports) or upload(rules, reports)
    )
    round_ = _walk(hh_analysis, analyst, django_capture_on_commit_callbacks)

    runs = ShardRun.objects.filter(task_key=round_.task_key).order_by("shard__index")
    assert [len(reports.mine) for reports in sent] == [run.answered for run in runs]
    # The locked answer drew the same reports the unlocked one had (the shard's keyed coins), not the stale ones' object.
    for reports, ready in zip(sent, stale, strict=True):
        assert reports is not ready.reports and reports.mine == ready.reports.mine
    assert round_.release.content["walk"]["words"]
