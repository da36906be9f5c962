"""A Poplar1 round (a Poplar1Words recipe): devices charge the walk's budget and upload one Poplar1
report each; once collected, the aggregators walk the tree and the round releases the words found."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from aggregation import heavy_hitters as hh
from aggregation.models import Poplar1Level, Poplar1Report
from analyses.models import Round
from analyses.services.policy import analysis_approve, analysis_create
from analyses.services.rounds import round_create_and_start
from devices.fleet_io import fleet_create
from devices.services import ledger_totals

POLICY = {
    "identifier": "t.hh",
    "fleet": "hh",
    "queryClass": {"stream": "KeyboardNGrams", "fields": ["ngrams"], "cohortFields": ["locale"]},
    "budget": {"epsilon": 3.0, "reports": 3, "delta": 1e-5, "minCohort": 50},
    "fields": {"ngrams": {"localEpsilon": 4.0, "epsilon": 3.0, "reports": 3, "aggregatorNoise": True}},
}
RECIPE = {
    "recipeIdentifier": "words",
    "AnalysisIdentifier": "t.hh",
    "query": "select ngrams from KeyboardNGrams",
    "cohorts": [],
    "dataTypeContent": {"ngrams": {"dataType": "Poplar1Words", "bits": 32, "zScore": 4, "maxPerLevel": 8}},
    "privacy": {"noise": "aggregator", "epsilon": 2.0, "delta": 1e-6},
}


@pytest.fixture(autouse=True)
def seeded_noise(monkeypatch):
    rng = np.random.default_rng(32)
    monkeypatch.setattr(hh, "noise_rng", lambda: rng)


@pytest.fixture
def hh_analysis(db, analyst, officer):
    fleet_create(name="hh", size=2_000, seed=5, shard_size=1_000)
    return analysis_approve(analysis=analysis_create(spec=copy.deepcopy(POLICY), owner=analyst), officer=officer)


def test_a_poplar1_round_walks_and_releases_the_words_found(
    hh_analysis, analyst, django_capture_on_commit_callbacks
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        round_ = round_create_and_start(analysis=hh_analysis, content=copy.deepcopy(RECIPE), user=analyst)
    round_.refresh_from_db()
    assert round_.status == Round.Status.RELEASED, round_.error
    walk = round_.release.content["walk"]
    print(walk)
    assert walk["words"]
    assert ledger_totals(fleet=hh_analysis.fleet, analysis_identifier="t.hh")
    for store in ("default", "helper"):
        assert not Poplar1Report.objects.using(store).filter(collection_key=round_.task_key).exists()
    assert Poplar1Level.objects.filter(collection_key=round_.task_key).count() == len(walk["levels"])
