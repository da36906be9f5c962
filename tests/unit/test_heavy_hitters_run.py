"""A heavy-hitters run (kind "heavy_hitters", docs/adaptive.md): its spec and budget checks, its one
round of Poplar1 reports, the walk's levels and words on the run, the API and the run page."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from analyses.adaptive.chain import adaptive_start
from analyses.adaptive.presenters import adaptive_output
from analyses.models import AdaptiveRun, Round
from analyses.services import rounds
from analyses.services.policy import analysis_approve, analysis_create
from devices.fleet_io import fleet_create
from devices.models import ShardLedger
from pfs_base.errors import ValidationFailed
from pfs_device.budget import query_pld_key, to_units
from privacy.heavy_hitters import level_sigma
from tests.heavy_hitters import POLICY

SPEC = {
    "analysis": "t.hh",
    "kind": "heavy_hitters",
    "field": "ngrams",
    "maxLength": 4,
    "privacy": {"epsilon": 2.0, "delta": 1e-6},
    "threshold": {"zScore": 4.0, "maxPerLevel": 8},
}


pytestmark = pytest.mark.usefixtures("fixed_coins")


@pytest.fixture
def run_to_end(django_capture_on_commit_callbacks):
    def run(spec: dict, user) -> AdaptiveRun:
        with django_capture_on_commit_callbacks(execute=True):
            result = adaptive_start(spec=spec, user=user)
        result.refresh_from_db()
        return result

    return run


def _spec(**changes) -> dict:
    spec = copy.deepcopy(SPEC)
    spec.update(changes)
    return spec


def test_a_walk_runs_as_one_round_and_records_its_levels_and_words(hh_analysis, analyst, run_to_end) -> None:
    run = run_to_end(_spec(), analyst)

    assert run.status == AdaptiveRun.Status.FINISHED, run.stop_reason
    # One round, charged once; the plan says what every device was charged: the walk's 4 levels.
    assert len(run.plan) == 1 and run.plan[0]["levels"] == 4 and run.plan[0]["noise"] == "aggregator"
    round_ = Round.objects.get(recipe__analysis=hh_analysis)
    assert round_.recipe.content["dataTypeContent"]["ngrams"]["dataType"] == "Poplar1Words"
    assert [level["length"] for level in run.levels] == list(range(1, len(run.levels) + 1))
    assert all(level["round"] == round_.pk for level in run.levels)
    first = {k["ngram"] for k in run.levels[0]["kept"]}
    assert {"a", "h", "w"} <= first  # "a", "hello", "world": the demo vocabulary's most typed
    words = {w["word"] for w in round_.release.content["walk"]["words"]}
    assert {"hell", "worl", "and"} <= words
    assert run.stop_reason.startswith("The walk")

    output = adaptive_output(run)
    assert output["kind"] == "heavy_hitters" and output["epsilon_spent"] == 2.0
    assert set(output["levels"][0]["kept"][0]) == {"ngram", "end", "estimate", "standard_error"}


def test_every_answering_device_is_charged_the_walk_composed_over_its_levels(hh_analysis, analyst, run_to_end) -> None:
    run_to_end(_spec(), analyst)

    sigma = level_sigma(2.0, 1e-6, 4)
    key = f"walk:{sigma!r}:4"
    rows = ShardLedger.objects.filter(analysis_identifier="t.hh")
    charged = 0
    for row in rows:
        state = row.load_state()
        charged += int(state[f"pld:{key}"].sum())
        assert set(np.unique(state["epsilon_used"]).tolist()) <= {0, to_units(2.0)}  # the walk once, or nothing
    round_ = Round.objects.get(recipe__analysis=hh_analysis)
    assert charged == round_.release.content["reports"] > 0
    # The device's own mapping names the same pair.
    request = rounds.recipe_budget_request(round_.recipe)
    assert request.walk_levels == 4 and query_pld_key(request) == key


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"epsilonPerRound": 1.0}, "privacy.epsilonPerRound"),
        ({"mechanism": "asymmetric_ohe"}, "privacy.mechanism"),
        ({"epsilon": -1.0}, "privacy.epsilon"),
        ({"delta": 0}, "privacy.delta"),
    ],
)
def test_bad_privacy_is_refused_by_field_and_nothing_is_sent(hh_analysis, analyst, run_to_end, changes, field) -> None:
    spec = _spec()
    spec["privacy"].update(changes)
    with pytest.raises(ValidationFailed) as refused:
        adaptive_start(spec=spec, user=analyst)
    assert field in refused.value.errors
    assert not AdaptiveRun.objects.exists() and not Round.objects.exists()


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"maxLength": 17}, "maxLength"),
        ({"maxLength": 0}, "maxLength"),
        ({"vocabulary": ["a"]}, "vocabulary"),
        ({"threshold": {"zScore": 0}}, "threshold.zScore"),
        ({"threshold": {"maxPerLevel": 500}}, "threshold.maxPerLevel"),  # 500 x 27 > 4,096 prefixes a level
        ({"alphabet": ""}, "alphabet"),
        ({"field": "locale"}, "field"),
    ],
)
def test_bad_specs_are_refused_by_field(hh_analysis, analyst, changes, field) -> None:
    with pytest.raises(ValidationFailed) as refused:
        adaptive_start(spec=_spec(**changes), user=analyst)
    assert field in refused.value.errors, refused.value.errors
    assert not AdaptiveRun.objects.exists()


def test_a_walk_beyond_the_budget_is_refused_before_anything_is_sent(hh_analysis, analyst, run_to_end) -> None:
    spec = _spec()
    spec["privacy"]["epsilon"] = 3.5  # the policy allows 3
    with pytest.raises(ValidationFailed) as refused:
        adaptive_start(spec=spec, user=analyst)
    assert any("privacy.epsilon" in key for key in refused.value.errors), refused.value.errors
    assert not Round.objects.exists()


def test_the_run_page_shows_the_words_the_tree_and_the_walks_noise(hh_analysis, analyst, run_to_end, client) -> None:
    run = run_to_end(_spec(), analyst)
    client.force_login(analyst)

    page = client.get(f"/adaptive/{run.pk}/").content.decode()

    assert 'id="words-table"' in page and "hell…" in page
    assert "4-byte prefixes" in page and 'id="tree-table"' in page
    assert f"σ = {run.levels and round(level_sigma(2.0, 1e-6, 4), 1)}" in page
    assert "Finished: The walk" in page


# ---------------------------------------------------------------- beside the local-DP discovery


LOCAL_POLICY = {
    **POLICY,
    "identifier": "t.hh-local",
    "budget": {"epsilon": 3.0, "reports": 3, "delta": 1e-5},
    "fields": {"ngrams": {"localEpsilon": 4.0, "epsilon": 3.0, "reports": 3}},
}
LOCAL = {
    "analysis": "t.hh-local",
    "kind": "ngram_discovery",
    "field": "ngrams",
    "unit": "character",
    "vocabulary": list("abcdefghijklmnopqrstuvwxyz"),
    "maxLength": 2,
    "privacy": {"mechanism": "asymmetric_ohe", "epsilon0": 4.0, "epsilonPerRound": 1.0, "delta": 1e-6},
    "threshold": {"zScore": 4.0, "maxPerLevel": 8},
    # The static baseline on a twin analysis: every 2-character prefix hashed into a sketch.
    "baseline": {"analysis": "t.hh-static", "rows": 2, "columns": 1024, "topK": 5},
}


@pytest.fixture
def big_fleet(db, analyst, officer):
    """5,000 devices: a local-DP round at epsilon0 4, epsilon 1 needs a minimum cohort of 2,203."""
    fleet_create(name="hh", size=5_000, seed=5, shard_size=2_500)
    static = {**LOCAL_POLICY, "identifier": "t.hh-static"}
    for policy in (POLICY, LOCAL_POLICY, static):
        analysis_approve(analysis=analysis_create(spec=copy.deepcopy(policy), owner=analyst), officer=officer)


def test_the_walk_is_compared_with_a_local_dp_discovery_at_the_same_total_epsilon(
    big_fleet, analyst, run_to_end, client
) -> None:
    local = run_to_end(copy.deepcopy(LOCAL), analyst)
    assert local.status == AdaptiveRun.Status.FINISHED, local.stop_reason
    run = run_to_end(_spec(maxLength=2, comparison={"run": local.pk, "topK": 5}), analyst)

    comparison = run.comparison
    assert comparison["available"] and comparison["local_run"] == local.pk and comparison["epsilon"] == 2.0
    assert set(comparison["methods"]) == {"poplar1", "local", "static"}
    assert all(comparison["methods"][name]["found"] >= 1 for name in ("poplar1", "local", "static"))
    words = [row["word"] for row in comparison["rows"]]
    assert len(words) == 5 and "a" in words  # the fleet's most typed word
    poplar1 = comparison["methods"]["poplar1"]
    assert poplar1["hits"] >= 3 and 0 <= poplar1["precision"] <= 1
    # Each found word's interval is about the reports naming it (both noises and the devices' own
    # choice of word): within 4 of its standard errors of its estimand.
    for row in comparison["rows"]:
        found = row["poplar1"]
        if found is not None:
            assert abs(found["estimate"] - found["estimand"]) <= 4 * found["standard_error"], row
    client.force_login(analyst)
    page = client.get(f"/adaptive/{run.pk}/").content.decode()
    assert "Without local noise against local DP" in page and "Poplar1 walk (no local noise)" in page
    assert "Static baseline (sketch)" in page


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"kind": "bucket_refinement"}, "unit character"),
        ({"status": "running"}, "Must have finished"),
        ({"plan": [{"epsilon": 1.0, "delta": 1e-6}]}, "same total epsilon"),
        ({"spec_length": 3}, "same length"),
    ],
)
def test_a_comparison_the_walk_cannot_make_is_refused_before_anything_is_sent(
    hh_analysis, analyst, change, message
) -> None:
    spec = {**copy.deepcopy(LOCAL), "analysis": "t.hh", "maxLength": change.pop("spec_length", 4)}
    other = AdaptiveRun.objects.create(
        analysis=hh_analysis,
        kind=change.pop("kind", "ngram_discovery"),
        spec=spec,
        plan=change.pop("plan", [{"epsilon": 1.0, "delta": 1e-6}, {"epsilon": 1.0, "delta": 1e-6}]),
        status=change.pop("status", "finished"),
        created_by=analyst,
    )
    with pytest.raises(ValidationFailed) as refused:
        adaptive_start(spec=_spec(comparison={"run": other.pk}), user=analyst)
    assert message in " ".join(refused.value.errors["comparison.run"])
    assert not Round.objects.exists()


def test_while_the_aggregators_walk_the_round_says_how_far_they_are(
    hh_analysis, analyst, run_to_end, client, monkeypatch
) -> None:
    from analyses.services import heavy_hitters  # noqa: PLC0415 - the walk's own module, wrapped

    client.force_login(analyst)
    seen: list[str] = []
    real = heavy_hitters.level_run

    def level_then_look(*args):  # noqa: ANN002, ANN202
        release = real(*args)
        round_ = Round.objects.get(recipe__analysis=hh_analysis)
        seen.append(client.get(f"/rounds/{round_.pk}/status.json").json()["status_display"])
        return release

    monkeypatch.setattr(heavy_hitters, "level_run", level_then_look)
    run = run_to_end(_spec(), analyst)
    assert seen[:2] == [
        "Walking the prefix tree: 1 of at most 4 levels released",
        "Walking the prefix tree: 2 of at most 4 levels released",
    ]
    round_ = Round.objects.get(recipe__analysis=hh_analysis)
    assert client.get(f"/rounds/{round_.pk}/status.json").json()["status_display"] == "Released"
    assert run.status == AdaptiveRun.Status.FINISHED
