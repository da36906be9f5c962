"""A Poplar1 round (a Poplar1Words recipe): devices charge the walk's budget and upload one Poplar1
report each; once collected, the aggregators walk the tree and the round releases the words found."""

from __future__ import annotations

import copy

import pytest

from aggregation.models import Poplar1Level, Poplar1Report
from analyses.models import Round
from analyses.services.rounds import round_create_and_start
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
