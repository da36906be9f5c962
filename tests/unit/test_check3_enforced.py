"""Check 3 enforces the tightest bound proven for the randomizer: a fleet too small for the closed
form of Theorem 3.1, but large enough for that bound, releases; one device fewer does not.

Asymmetric OHE at epsilon0 = 2, epsilon = 0.3, delta = 1e-6 needs 1,670 reports by FMT 2022
(privacy.enforced_cohort) and 19,485 by the closed form."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from analyses.models import Recipe, Round
from analyses.services.policy import analysis_approve, analysis_create
from analyses.services.recipes import recipe_device_task
from analyses.services.rounds import round_create_and_start
from devices.fleet_io import fleet_create
from pfs_base.errors import ValidationFailed
from pfs_device.budget import Decision, ledger_empty
from pfs_device.decision import decide
from privacy.amplification import min_cohort_closed_form
from privacy.parameters import PrivacyParameters
from tests.conftest import RECIPE, SPEC

pytestmark = pytest.mark.django_db
DEMO = {"mechanism": "asymmetric_ohe", "epsilon0": 2.0, "epsilon": 0.3, "delta": 1e-6, "samplingRate": 1.0}


def _analysis(size: int, analyst, officer):
    fleet_create(name="few", size=size, seed=3, shard_size=1_000)
    spec = {**copy.deepcopy(SPEC), "identifier": "t.few", "fleet": "few"}
    return analysis_approve(analysis=analysis_create(spec=spec, owner=analyst), officer=officer)


def _recipe() -> dict:
    return {**copy.deepcopy(RECIPE), "AnalysisIdentifier": "t.few", "privacy": dict(DEMO)}


def test_a_fleet_too_small_for_the_closed_form_releases_under_the_enforced_bound(
    analyst, officer, django_capture_on_commit_callbacks
) -> None:
    assert min_cohort_closed_form(2.0, 0.3, 1e-6) == 19_485  # a fleet of 2,000 could not answer before
    analysis = _analysis(2_000, analyst, officer)
    with django_capture_on_commit_callbacks(execute=True):
        round_ = round_create_and_start(analysis=analysis, content=_recipe(), user=analyst)
    round_.refresh_from_db()
    assert round_.status == Round.Status.RELEASED
    assert round_.release.content["min_cohort"] == 1_670 and round_.release.content["reports"] == 2_000


def test_one_device_below_the_enforced_bound_does_not(analyst, officer) -> None:
    analysis = _analysis(1_669, analyst, officer)
    with pytest.raises(ValidationFailed) as refused:
        round_create_and_start(analysis=analysis, content=_recipe(), user=analyst)
    assert "minimum cohort of 1,670" in refused.value.errors["privacy.epsilon"][0]
    assert not Round.objects.exists()
    # Sent past the server with the smaller cohort claimed, every device refuses it itself.
    recipe = Recipe(
        analysis=analysis,
        identifier="past-the-server",
        content=_recipe(),
        encoded_field="age",
        privacy=PrivacyParameters(
            noise="client",
            mechanism="asymmetric_ohe",
            epsilon0=2.0,
            epsilon=0.3,
            delta=1e-6,
            sampling_rate=1.0,
            min_cohort=1_669,
        ),
    )
    task = recipe_device_task(recipe, task_key="t.few/past-the-server/round-1", seed=1)
    decision, _ = decide(
        task=task,
        policy=analysis.snapshot.content,
        fleet_name="few",
        ledger=ledger_empty(3),
        sampled=np.ones(3, dtype=bool),
    )
    assert (decision == Decision.MIN_COHORT).all()
