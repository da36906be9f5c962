"""Recipes with aggregator noise (seed 001, Section 6.1.2), from validation to release."""

from __future__ import annotations

import copy
import itertools

import numpy as np
import pytest

from aggregation import aggregators
from analyses.models import Recipe, Round
from analyses.presenters.releases import release_as_json
from analyses.services.policy import analysis_approve, analysis_create
from analyses.services.recipes import recipe_create, recipe_validate
from analyses.services.rounds import round_create_and_start
from devices.services import ledger_totals
from pfs_base.errors import ValidationFailed
from pfs_device.budget import to_units
from privacy import aggregator_noise
from privacy.aggregator_noise import AggregatorGaussian, AggregatorLaplace, AggregatorNoise
from privacy.encoding import BucketedType
from tests.conftest import RECIPE, SPEC

pytestmark = pytest.mark.django_db

CENTRAL_RECIPE = {
    **RECIPE,
    "recipeIdentifier": "central-ages",
    "AnalysisIdentifier": "test.central",
    "privacy": {"noise": "aggregator", "epsilon": 1.0, "delta": 1e-6, "minCohort": 1000},
}


@pytest.fixture
def central(fleet, analyst, officer):
    spec = copy.deepcopy(SPEC)
    spec["identifier"] = "test.central"
    spec["fields"]["age"]["aggregatorNoise"] = True
    return analysis_approve(analysis=analysis_create(spec=spec, owner=analyst), officer=officer)


@pytest.fixture
def seeded_noise(monkeypatch):
    seeds = itertools.count(100)
    monkeypatch.setattr(aggregators, "noise_rng", lambda: np.random.default_rng(next(seeds)))


def released_within_error(analysis, round_: Round, noise: AggregatorNoise) -> dict:
    """The content of the round's release, checked against the fleet's true histogram of ages: each
    count off by the two aggregators' noise only, and every device charged epsilon = 1."""
    round_.refresh_from_db()
    assert round_.status == Round.Status.RELEASED, round_.error
    content = round_.release.content
    (batch,) = content["batches"]
    encoding = BucketedType((20, 30, 40, 50, 60, 70, 80))
    truth = sum(
        np.bincount(encoding.encode(shard.load_columns()["age"]), minlength=encoding.size)
        for shard in analysis.fleet.shards.all()
    )
    assert batch["standard_errors"] == [noise.standard_error()] * encoding.size
    # Seeded noise: 4 standard errors.
    assert np.abs(np.array(batch["estimates"]) - truth).max() < 4 * noise.standard_error()
    # Not the exact counts: both aggregators did add noise.
    assert not np.array_equal(np.array(batch["estimates"]), truth)
    totals = ledger_totals(fleet=analysis.fleet, analysis_identifier=analysis.identifier)
    assert totals["max:epsilon_used"] == to_units(1.0)
    return content


def test_aggregator_noise_is_refused_where_the_field_policy_does_not_allow_it(analysis, analyst) -> None:
    content = {**CENTRAL_RECIPE, "AnalysisIdentifier": "test.ages"}
    with pytest.raises(ValidationFailed) as refused:
        recipe_create(analysis=analysis, content=content, user=analyst)
    assert "does not allow aggregator noise" in refused.value.errors["privacy.noise"][0]
    assert not Recipe.objects.exists()


def test_an_aggregator_noise_recipe_names_no_local_randomizer(central, analyst) -> None:
    content = copy.deepcopy(CENTRAL_RECIPE)
    content["privacy"].update(mechanism="asymmetric_ohe", epsilon0=3.0)
    with pytest.raises(ValidationFailed) as refused:
        recipe_create(analysis=central, content=content, user=analyst)
    assert set(refused.value.errors) == {"privacy.mechanism", "privacy.epsilon0"}


def test_an_unknown_noise_and_a_weak_calibration_are_refused(central, analyst) -> None:
    content = copy.deepcopy(CENTRAL_RECIPE)
    content["privacy"]["noise"] = "both"
    with pytest.raises(ValidationFailed) as refused:
        recipe_create(analysis=central, content=content, user=analyst)
    assert "privacy.noise" in refused.value.errors
    content["privacy"].update(noise="aggregator", epsilon=15.0, delta=0.1)  # within the limits, yet sigma < 1
    with pytest.raises(ValidationFailed) as refused:
        recipe_validate(analysis=central, content=content)
    assert "below 1" in refused.value.errors["privacy.epsilon"][0]


def test_a_recipe_can_raise_the_minimum_cohort_but_never_lower_it(analysis, recipe) -> None:
    recipe["privacy"]["minCohort"] = 735  # devices need 736 for these parameters (FMT 2022)
    with pytest.raises(ValidationFailed) as refused:
        recipe_validate(analysis=analysis, content=recipe)
    assert "never lower" in refused.value.errors["privacy.minCohort"][0]
    recipe["privacy"]["minCohort"] = 4000
    assert recipe_validate(analysis=analysis, content=recipe).privacy.min_cohort == 4000


def test_a_round_with_aggregator_noise_releases_counts_within_their_error(
    central, analyst, seeded_noise, django_capture_on_commit_callbacks
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        round_ = round_create_and_start(analysis=central, content=CENTRAL_RECIPE, user=analyst)
    noise = AggregatorGaussian(1.0, 1e-6)
    content = released_within_error(central, round_, noise)
    assert content["noise"] == "aggregator" and content["aggregator_sigma"] == noise.sigma
    released = release_as_json(round_.release)
    assert released["noise"] == "aggregator" and "one aggregator is honest" in released["notes"][0]


LAPLACE_RECIPE = {
    **CENTRAL_RECIPE,
    "recipeIdentifier": "central-ages-laplace",
    "privacy": {"noise": "aggregator", "noiseDistribution": "laplace", "epsilon": 1.0, "minCohort": 1000},
}


def test_a_discrete_laplace_recipe_is_pure_epsilon_dp(central, analyst) -> None:
    recipe = recipe_create(analysis=central, content=LAPLACE_RECIPE, user=analyst)
    recipe.refresh_from_db()
    assert recipe.privacy.delta == 0 and recipe.privacy.noise_distribution == "laplace"
    assert recipe.noise_label == "aggregator noise (discrete Laplace)"
    explicit = copy.deepcopy(CENTRAL_RECIPE)
    explicit["privacy"]["noiseDistribution"] = "gaussian"
    assert recipe_validate(analysis=central, content=explicit).privacy.noise_distribution == "gaussian"


@pytest.mark.parametrize(
    ("privacy", "field"),
    [
        ({"noiseDistribution": "cauchy"}, "privacy.noiseDistribution"),
        ({"noiseDistribution": ["laplace"]}, "privacy.noiseDistribution"),
        ({"noiseDistribution": "laplace", "delta": 1e-6}, "privacy.delta"),
        ({"noiseDistribution": "laplace", "epsilon": 3.0}, "privacy.epsilon"),  # noise below one count
        (
            {"noise": "client", "noiseDistribution": "laplace", "mechanism": "asymmetric_ohe", "epsilon0": 2.0},
            "privacy.noiseDistribution",
        ),
    ],
)
def test_a_bad_noise_distribution_is_refused_with_its_field_and_nothing_written(central, api, privacy, field) -> None:
    content = copy.deepcopy(LAPLACE_RECIPE)
    content["privacy"].update(privacy)
    response = api.post("/api/analyses/test.central/recipes/", content, format="json")
    assert response.status_code == 400
    assert field in response.json()["fields"]
    assert not Recipe.objects.exists()


def test_a_round_with_discrete_laplace_noise_releases_counts_within_their_error(
    central, analyst, seeded_noise, monkeypatch, django_capture_on_commit_callbacks
) -> None:
    scales = []
    sample = aggregator_noise.sample_discrete_laplace
    monkeypatch.setattr(
        aggregator_noise, "sample_discrete_laplace", lambda scale, *rest: scales.append(scale) or sample(scale, *rest)
    )
    with django_capture_on_commit_callbacks(execute=True):
        round_ = round_create_and_start(analysis=central, content=LAPLACE_RECIPE, user=analyst)
    content = released_within_error(central, round_, AggregatorLaplace(1.0))
    # The leader and the helper each drew their own discrete Laplace noise, of scale 2 / epsilon.
    assert scales == [2, 2]
    assert content["delta"] == 0 and content["aggregator_laplace_scale"] == 2.0 and content["aggregator_sigma"] is None
    released = release_as_json(round_.release)
    assert "discrete Laplace noise of scale 2.0000" in released["notes"][0]
    # Its intervals reach the exact 95% quantile of both noises, not 1.96 standard errors.
    half_width = AggregatorLaplace(1.0).interval_half_width(0.05)
    assert "exact" in released["interval"]
    for bucket in released["buckets"]:
        low, high = bucket["ci95"]
        assert (bucket["estimate"] - low, high - bucket["estimate"]) == pytest.approx((half_width, half_width))
