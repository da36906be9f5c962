"""What the heavy-hitters tests share: the analysis whose words' field allows aggregator noise, a
Poplar1Words recipe on it, and the coins fixed so that a walk is the same every run.

The fixtures are registered by tests/conftest.py; a module whose walks must repeat says
``pytestmark = pytest.mark.usefixtures("fixed_coins")``.
"""

from __future__ import annotations

import copy
import types

import numpy as np
import pytest

from aggregation import heavy_hitters as hh
from analyses.services import rounds
from analyses.services.policy import analysis_approve, analysis_create
from devices.fleet_io import fleet_create

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


@pytest.fixture
def fixed_coins(monkeypatch):
    """The aggregators' noise and the round's seed (which device reports which word) fixed."""
    rng = np.random.default_rng(32)
    monkeypatch.setattr(hh, "noise_rng", lambda: rng)
    monkeypatch.setattr(rounds, "secrets", types.SimpleNamespace(randbits=lambda bits: 20261127))


@pytest.fixture
def hh_analysis(db, analyst, officer):
    """t.hh, approved, on a simulated fleet of 2,000 devices."""
    fleet_create(name="hh", size=2_000, seed=5, shard_size=1_000)
    return analysis_approve(analysis=analysis_create(spec=copy.deepcopy(POLICY), owner=analyst), officer=officer)
