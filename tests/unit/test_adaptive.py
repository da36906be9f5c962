"""Adaptive runs: n-gram discovery and bucket refinement, chained round by round on a simulated fleet."""

from __future__ import annotations

import copy
import json
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from analyses.adaptive.chain import (
    adaptive_advance,
    adaptive_next_edit,
    adaptive_pause,
    adaptive_resume,
    adaptive_start,
)
from analyses.adaptive.presenters import adaptive_output
from analyses.models import AdaptiveRun, Recipe, Round
from analyses.reaper import rounds_reap
from analyses.services.policy import analysis_approve, analysis_create
from analyses.services.rounds import round_fail
from devices.models import ShardRun
from pfs_base.errors import NotAllowed, ValidationFailed
from tests.conftest import DISCOVERY_POLICY, DISCOVERY_SPEC

DISCOVERY = DISCOVERY_SPEC
REFINEMENT = {
    "analysis": "t.refinement",
    "kind": "bucket_refinement",
    "field": "perplexity",
    "boundaries": [0, 25, 50, 75, 100],
    "minWidth": 1.0,
    "maxRounds": 2,
    "privacy": {"mechanism": "asymmetric_ohe", "epsilon0": 4.0, "epsilonPerRound": 1.0, "delta": 1e-6},
    "threshold": {"zScore": 4.0, "maxBuckets": 32},
}


def _analysis(identifier: str, stream: str, field: str, analyst, officer):
    spec = {
        **copy.deepcopy(DISCOVERY_POLICY),
        "identifier": identifier,
        "queryClass": {"stream": stream, "fields": [field], "cohortFields": ["locale"]},
        "fields": {field: {"localEpsilon": 4.0, "epsilon": 3.0, "reports": 3}},
    }
    return analysis_approve(analysis=analysis_create(spec=spec, owner=analyst), officer=officer)


@pytest.fixture
def words(discovery, analyst, officer):
    _analysis("t.static", "KeyboardNGrams", "ngrams", analyst, officer)
    _analysis("t.refinement", "ModelMetrics", "perplexity", analyst, officer)
    return discovery.fleet


@pytest.fixture
def run_to_end(django_capture_on_commit_callbacks):
    """Start (or resume) a run with tasks executed as they commit: the whole chain runs inline."""

    def run(action, *args, **kwargs) -> AdaptiveRun:
        with django_capture_on_commit_callbacks(execute=True):
            result = action(*args, **kwargs)
        result.refresh_from_db()
        return result

    return run


def _spec(**changes) -> dict:
    spec = copy.deepcopy(DISCOVERY)
    spec.update(changes)
    return spec


def _kept(level: dict) -> list[str]:
    return [k["ngram"] for k in level["kept"]]


def test_discovery_keeps_frequent_words_then_extends_only_them(words, analyst, run_to_end) -> None:
    run = run_to_end(adaptive_start, spec=_spec(), user=analyst)
    output = adaptive_output(run)
    assert output["status"] == "finished"
    assert output["stop_reason"] == "Reached the planned 2 rounds."
    assert [p["epsilon"] for p in output["plan"]] == [1.0, 1.0]
    first, second = output["levels"]
    assert (first["length"], first["buckets"]) == (1, 41)
    assert {"hello", "i", "world"} <= set(_kept(first))
    # Round 2 asks only for extensions of round 1's kept words: 1 + L (V + 2) buckets.
    assert second["leaves"] == len(first["kept"])
    assert second["buckets"] == 1 + len(first["kept"]) * (40 + 2)
    assert "hello world" in _kept(second)
    assert all(k["tokens"][0] in _kept(first) for k in run.levels[1]["kept"])
    # Every kept estimate cleared z = 3 standard errors.
    assert all(k["estimate"] > 3 * k["standard_error"] for level in output["levels"] for k in level["kept"])
    assert output["epsilon_spent"] == 2.0


@pytest.mark.parametrize(
    ("changes", "key"),
    [
        ({"threshold": {"zScore": 0}}, "threshold.zScore"),
        ({"threshold": {"zScore": -1.0, "maxPerLevel": 5}}, "threshold.zScore"),
        ({"threshold": {"maxPerLevel": 0}}, "threshold.maxPerLevel"),
        ({"threshold": {}}, "threshold"),
        ({"maxLength": 0}, "maxLength"),
        ({"maxLength": 4}, "privacy.epsilonPerRound"),  # 4 rounds of epsilon 1 on a budget of 3
        ({"privacy": {**DISCOVERY["privacy"], "epsilonPerRound": [1.0, 2.5]}}, "privacy.epsilonPerRound"),
        ({"privacy": {**DISCOVERY["privacy"], "epsilon0": 6.0}}, "round 1: privacy.epsilon0"),  # above the cap
        ({"vocabulary": ["a", "a"]}, "vocabulary"),
        ({"field": "age"}, "field"),
        ({"analysis": "t.nothing"}, "analysis"),
        ({"baseline": {"analysis": "t.discovery"}}, "baseline.analysis"),  # its own budget is another's
    ],
)
def test_bad_specs_are_refused_and_nothing_is_sent(
    words, discovery, analyst, officer, run_to_end, changes, key
) -> None:
    # Basic composition, so that a plan of epsilons summing past the allowance is over it (the tightest
    # accountant's PLD account composes 1 + 2.5 at delta' = 1e-5 within 3: test_budget_pld.py).
    discovery.accountant = "basic"
    discovery.save(update_fields=["accountant"])
    analysis_approve(analysis=discovery, officer=officer)
    with pytest.raises(ValidationFailed) as refused:
        run_to_end(adaptive_start, spec=_spec(**changes), user=analyst)
    assert key in refused.value.errors, refused.value.errors
    assert all(refused.value.errors.values())
    assert not AdaptiveRun.objects.exists()
    assert not Recipe.objects.exists() and not Round.objects.exists() and not ShardRun.objects.exists()


def test_a_paused_run_waits_with_its_next_round_editable(words, analyst, run_to_end) -> None:
    run = AdaptiveRun.objects.get(pk=adaptive_start(spec=_spec(), user=analyst).pk)  # round 1 not run yet
    adaptive_pause(run=run, user=analyst)
    first_round = run.current_round
    with pytest.MonkeyPatch.context():
        run = run_to_end(adaptive_advance, run_id=run.pk)  # nothing to do: round 1 has not run
    from analyses.tasks import dispatch_round

    with_callbacks = run_to_end(lambda: (dispatch_round(first_round.pk), run)[1])
    run = AdaptiveRun.objects.get(pk=with_callbacks.pk)
    assert run.status == AdaptiveRun.Status.PAUSED
    assert len(run.levels) == 1 and run.current_round is None
    waiting = run.next_recipe["recipe"]
    assert Round.objects.count() == 1  # round 2 was not sent

    edited = copy.deepcopy(waiting)
    edited["privacy"]["epsilon"] = 2.0
    with pytest.raises(ValidationFailed) as refused:
        adaptive_next_edit(run=run, recipe=edited, user=analyst)
    assert "privacy" in refused.value.errors
    # The analyst narrows round 2 to one prefix.
    edited = copy.deepcopy(waiting)
    edited["dataTypeContent"]["ngrams"]["tree"] = {"root": ["hello"]}
    adaptive_next_edit(run=run, recipe=edited, user=analyst)

    run = run_to_end(adaptive_resume, run=run, user=analyst)
    assert run.status == AdaptiveRun.Status.FINISHED
    assert run.levels[1]["leaves"] == 1
    assert all(k["tokens"][0] == "hello" for k in run.levels[1]["kept"])


def test_a_second_run_cannot_take_the_budget_the_first_one_planned(words, analyst, run_to_end) -> None:
    adaptive_start(spec=_spec(), user=analyst)  # plans 2 of the 3 epsilon; round 1 queued, not run
    with pytest.raises(ValidationFailed) as refused:
        adaptive_start(spec=_spec(), user=analyst)
    assert "privacy.epsilonPerRound" in refused.value.errors
    assert AdaptiveRun.objects.count() == 1 and Round.objects.count() == 1


def test_the_baseline_must_spend_the_same_analysts_budget(words, analyst, other_analyst, officer) -> None:
    _analysis("t.theirs", "KeyboardNGrams", "ngrams", other_analyst, officer)
    with pytest.raises(ValidationFailed) as refused:
        adaptive_start(spec=_spec(baseline={"analysis": "t.theirs"}), user=analyst)
    assert "baseline.analysis" in refused.value.errors


def test_an_edit_cannot_change_the_question_of_the_next_round(words, analyst, run_to_end) -> None:
    from analyses.tasks import dispatch_round

    run = adaptive_start(spec=_spec(), user=analyst)
    adaptive_pause(run=run, user=analyst)
    run = run_to_end(lambda: (dispatch_round(run.current_round_id), run)[1])
    waiting = run.next_recipe["recipe"]
    hashed = copy.deepcopy(waiting)
    hashed["dataTypeContent"]["ngrams"] = {"dataType": "HashedNgrams", "length": 2, "tokens": ["a"], "columns": 8}
    other_words = copy.deepcopy(waiting)
    other_words["dataTypeContent"]["ngrams"]["tokens"] = ["hello", "world"]
    longer = copy.deepcopy(waiting)
    longer["dataTypeContent"]["ngrams"]["tree"] = {"root": ["hello"], "hello": ["world"]}
    for edited, key in (
        (hashed, "dataTypeContent.ngrams.dataType"),
        (other_words, "dataTypeContent.ngrams.tokens"),
        (longer, "dataTypeContent.ngrams.tree"),
    ):
        with pytest.raises(ValidationFailed) as refused:
            adaptive_next_edit(run=run, recipe=edited, user=analyst)
        assert key in refused.value.errors
    run.refresh_from_db()
    assert run.next_recipe["recipe"] == waiting


def test_only_the_owner_steers_a_run(words, analyst, other_analyst) -> None:
    run = adaptive_start(spec=_spec(), user=analyst)
    with pytest.raises(NotAllowed):
        adaptive_pause(run=run, user=other_analyst)
    with pytest.raises(NotAllowed):
        adaptive_start(spec=_spec(), user=other_analyst)


def test_advancing_twice_records_each_level_once(words, analyst, run_to_end) -> None:
    run = run_to_end(adaptive_start, spec=_spec(), user=analyst)
    levels = copy.deepcopy(run.levels)
    adaptive_advance(run_id=run.pk)
    run.refresh_from_db()
    assert run.levels == levels and Round.objects.count() == 2


def test_a_failed_round_fails_the_run_with_its_reason(words, analyst, run_to_end) -> None:
    run = adaptive_start(spec=_spec(), user=analyst)
    run = run_to_end(lambda: (round_fail(round_id=run.current_round_id, error="shard exploded"), run)[1])
    run.refresh_from_db()
    assert run.status == AdaptiveRun.Status.FAILED
    assert "shard exploded" in run.stop_reason
    # The failed round was sent: its budget counts as spent.
    assert adaptive_output(run)["epsilon_spent"] == 1.0


def test_the_reaper_wakes_a_run_whose_wake_up_was_lost(words, analyst, run_to_end) -> None:
    from analyses.tasks import dispatch_round

    run = adaptive_start(spec=_spec(), user=analyst)
    dispatch_round(run.current_round_id)  # outside on_commit capture: the wake-up task is lost
    Round.objects.filter(pk=run.current_round_id).update(finished_at=timezone.now() - timedelta(hours=1))
    run.refresh_from_db()
    assert run.levels == [] and run.current_round.status == Round.Status.RELEASED
    reaped = run_to_end(lambda: (rounds_reap(stuck_after=timedelta(minutes=15), fail_after=timedelta(days=1)), run)[1])
    reaped.refresh_from_db()
    assert reaped.status == AdaptiveRun.Status.FINISHED and len(reaped.levels) == 2


def test_the_static_baseline_runs_on_its_own_budget_and_is_compared(words, analyst, run_to_end) -> None:
    spec = _spec(baseline={"analysis": "t.static", "rows": 2, "columns": 256, "topK": 5})
    run = run_to_end(adaptive_start, spec=spec, user=analyst)
    assert run.status == AdaptiveRun.Status.FINISHED
    assert len(run.baseline) == 2  # as many static rounds as planned interactive ones
    static_rounds = Round.objects.filter(pk__in=[b["round"] for b in run.baseline])
    assert {r.recipe.analysis.identifier for r in static_rounds} == {"t.static"}
    assert {r.recipe.content["dataTypeContent"]["ngrams"]["dataType"] for r in static_rounds} == {"HashedNgrams"}
    comparison = run.comparison
    assert comparison["available"] and comparison["top_k"] == 5 and len(comparison["rows"]) == 5
    for method in ("interactive", "static"):
        assert set(comparison[method]) >= {"rounds", "hits", "precision", "recall", "mean_relative_error"}
        assert comparison[method]["rounds"] == 2
    # Ground truth: the planted "hello world" ends more phrases than any other 2-gram is typed.
    assert comparison["rows"][0]["ngram"] == "world </s>"
    assert "hello world" in [row["ngram"] for row in comparison["rows"]]


def test_refinement_splits_the_buckets_holding_mass(words, analyst, run_to_end) -> None:
    run = run_to_end(adaptive_start, spec=copy.deepcopy(REFINEMENT), user=analyst)
    first, second = run.levels
    # Perplexity is lognormal around e^3.6 = 37: [25, 50) holds most devices and is split.
    assert "[25, 50)" in first["split"]
    assert 37.5 in second["boundaries"]
    assert second["buckets"] == first["buckets"] + len(first["split"])
    assert run.stop_reason == "Reached the planned 2 rounds."


def test_character_discovery_spells_words_from_their_first_letters(words, analyst, run_to_end) -> None:
    spec = _spec(unit="character", vocabulary=list("abcdefghijklmnopqrstuvwxyz"), maxLength=3)
    spec["threshold"] = {"zScore": 3.0, "maxPerLevel": 8}
    run = run_to_end(adaptive_start, spec=spec, user=analyst)
    kept = [_kept(level) for level in run.levels]
    assert "h" in kept[0] and "he" in kept[1] and "hel" in kept[2]
    assert "a</s>" in kept[1]  # the word "a": its first letter, then its end


# Commands commit as they go: these tests run in real transactions, so tasks run on commit.
@pytest.mark.django_db(transaction=True)
def test_run_analysis_prints_every_level_as_json(words, analyst, tmp_path, capsys) -> None:
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(_spec()))
    call_command("run_analysis", str(path), "--json", "--user", analyst.username, "--timeout", "60")
    output = json.loads(capsys.readouterr().out)
    assert [level["length"] for level in output["levels"]] == [1, 2]
    kept = output["levels"][0]["kept"][0]
    assert set(kept) == {"ngram", "end", "estimate", "standard_error"}


@pytest.mark.django_db(transaction=True)
def test_run_analysis_refuses_a_bad_spec_with_exit_code_2(words, analyst, tmp_path) -> None:
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(_spec(maxLength=0)))
    with pytest.raises(CommandError) as refused:
        call_command("run_analysis", str(path), "--user", analyst.username)
    assert refused.value.returncode == 2 and "maxLength" in str(refused.value)
    assert not Round.objects.exists()
