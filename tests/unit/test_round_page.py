"""The round page: progress with its time estimates, cancelling, and drill-down to a refined recipe."""

from __future__ import annotations

import copy
import json
from datetime import timedelta

import pytest
from django.utils import timezone

from analyses.models import Recipe, Round
from analyses.reads import drilldown
from analyses.services.policy import analysis_spent
from analyses.services.recipes import recipe_create, recipe_validate
from analyses.services.rounds import (
    round_aggregate,
    round_create_and_start,
    round_dispatch,
    round_progress,
    round_shard_run,
)
from devices.synthetic import TOKENS
from pfs_base.errors import ValidationFailed
from tests.conftest import FLEET_SIZE, SHARD_SIZE

pytestmark = pytest.mark.django_db

SHARDS = FLEET_SIZE // SHARD_SIZE  # 5


def released(analysis, content, user, capture) -> Round:
    with capture(execute=True):
        round_ = round_create_and_start(analysis=analysis, content=content, user=user, confirm_small_cohorts=True)
    round_.refresh_from_db()
    assert round_.status == Round.Status.RELEASED
    return round_


def half_run(analysis, content, user, *, shards: int, started_seconds_ago: float) -> Round:
    """A round dispatched by hand with ``shards`` of its shards answered, started a while ago."""
    recipe = recipe_create(analysis=analysis, content=content, user=user)
    round_ = Round.objects.create(recipe=recipe, seed=3, created_by=user)
    shard_ids = round_dispatch(round_id=round_.pk)
    for shard_id in shard_ids[:shards]:
        round_shard_run(round_id=round_.pk, shard_id=shard_id)
    Round.objects.filter(pk=round_.pk).update(started_at=timezone.now() - timedelta(seconds=started_seconds_ago))
    return Round.objects.get(pk=round_.pk)


# ---------------------------------------------------------------- progress


def test_progress_of_a_half_run_round_scales_the_elapsed_time_by_the_shards_left(analysis, recipe, analyst) -> None:
    round_ = half_run(analysis, recipe, analyst, shards=2, started_seconds_ago=100)
    progress = round_progress(round_)
    assert progress["shards_done"] == 2 and progress["shards_total"] == SHARDS
    assert 100 <= progress["elapsed_seconds"] < 130
    # 2 shards took the elapsed time: the 3 left take one and a half times as long.
    assert progress["eta_seconds"] == pytest.approx(progress["elapsed_seconds"] * 3 / 2)


def test_the_round_page_and_its_status_show_the_progress_and_the_time_left(client, analysis, recipe, analyst) -> None:
    recipe["privacy"]["samplingRate"] = 0.9  # 4,500 expected >= 2,935; some devices are not sampled
    round_ = half_run(analysis, recipe, analyst, shards=2, started_seconds_ago=100)
    client.force_login(analyst)
    page = client.get(f"/rounds/{round_.pk}/").content.decode()
    assert f'max="{SHARDS}" value="2"' in page
    assert '<span id="shards-done">2</span> of <span id="shards-total">5</span> shards done' in page
    assert '<span id="elapsed">1 min 4' in page  # 100 s and the time the test took, under two minutes
    assert '<span id="eta">about 2 min' in page  # 1.5 x elapsed
    # Devices answered: counting those not sampled would give the answering ones (fleet size minus them).
    assert round_progress(round_)["devices_not_answering"]["not_sampled"] is None
    assert '<tr><td>not sampled (left out by the sampling rate)</td><td class="num">not counted</td></tr>' in page
    assert "<td>not_sampled</td>" not in page  # the key is the API's; the page says what it means (issue 31, item 8)
    assert "Cancel round" in page

    status = client.get(f"/rounds/{round_.pk}/status.json").json()
    assert status["shards_done"] == 2 and status["finished"] is False
    assert status["status_display"] == "Running on devices"
    assert status["eta_seconds"] == pytest.approx(status["elapsed_seconds"] * 1.5)
    assert status["eta_text"].startswith("about 2 min")


def test_before_a_shard_is_done_the_time_left_is_being_estimated(client, analysis, recipe, analyst) -> None:
    round_ = half_run(analysis, recipe, analyst, shards=0, started_seconds_ago=5)
    assert round_progress(round_)["eta_seconds"] is None
    client.force_login(analyst)
    assert client.get(f"/rounds/{round_.pk}/status.json").json()["eta_text"] == "estimating…"


def test_a_queued_round_waits_for_a_worker(client, analysis, recipe, analyst) -> None:
    round_ = Round.objects.create(
        recipe=recipe_create(analysis=analysis, content=recipe, user=analyst), seed=1, created_by=analyst
    )
    progress = round_progress(round_)
    assert progress["elapsed_seconds"] is None and progress["eta_seconds"] is None
    client.force_login(analyst)
    assert client.get(f"/rounds/{round_.pk}/status.json").json()["eta_text"] == "waiting for a worker to start"


def test_a_finished_round_keeps_its_elapsed_time_and_offers_no_cancel(
    client, analysis, recipe, analyst, django_capture_on_commit_callbacks
) -> None:
    round_ = released(analysis, recipe, analyst, django_capture_on_commit_callbacks)
    progress = round_progress(round_)
    assert progress["elapsed_seconds"] == (round_.finished_at - round_.started_at).total_seconds()
    assert progress["eta_seconds"] is None
    client.force_login(analyst)
    page = client.get(f"/rounds/{round_.pk}/").content.decode()
    assert f'max="{SHARDS}" value="{SHARDS}"' in page and 'took <span id="elapsed">' in page
    # A finished round has no time left to tell ("time left done"), and its refusals are not "so far".
    assert 'id="eta"' not in page and "time left" not in page and "None so far." not in page
    assert "Cancel round" not in page


def test_another_analyst_cannot_follow_the_round(client, analysis, recipe, analyst, other_analyst) -> None:
    round_ = half_run(analysis, recipe, analyst, shards=1, started_seconds_ago=1)
    client.force_login(other_analyst)
    assert client.get(f"/rounds/{round_.pk}/status.json").status_code == 404


# ---------------------------------------------------------------- cancel


def test_posting_cancel_cancels_the_round_and_the_page_says_what_that_means(client, analysis, recipe, analyst) -> None:
    round_ = half_run(analysis, recipe, analyst, shards=2, started_seconds_ago=10)
    assert round_progress(round_)["devices_charged"]
    client.force_login(analyst)
    response = client.post(f"/rounds/{round_.pk}/cancel/")
    assert response.status_code == 302 and response["Location"] == f"/rounds/{round_.pk}/"
    round_.refresh_from_db()
    assert round_.status == Round.Status.CANCELLED
    page = client.get(response["Location"]).content.decode()
    assert "Cancelled by alice" in page and "Nothing was released" in page
    # Nothing released: how many answered is not said (a batch below the minimum cohort may be among them).
    assert "The devices that answered before the cancel keep their budget spent" in page
    assert f"Round {round_.pk} cancelled" in page  # the message
    assert "Cancel round" not in page and 'id="release"' not in page


def test_cancel_is_post_only(client, analysis, recipe, analyst) -> None:
    round_ = half_run(analysis, recipe, analyst, shards=1, started_seconds_ago=1)
    client.force_login(analyst)
    assert client.get(f"/rounds/{round_.pk}/cancel/").status_code == 405
    round_.refresh_from_db()
    assert round_.status == Round.Status.RUNNING


def test_cancelling_a_finished_round_says_why_and_changes_nothing(
    client, analysis, recipe, analyst, django_capture_on_commit_callbacks
) -> None:
    round_ = released(analysis, recipe, analyst, django_capture_on_commit_callbacks)
    client.force_login(analyst)
    page = client.post(f"/rounds/{round_.pk}/cancel/", follow=True).content.decode()
    assert f"Round {round_.pk} is already released." in page
    round_.refresh_from_db()
    assert round_.status == Round.Status.RELEASED


def test_another_analyst_cannot_cancel_the_round(client, analysis, recipe, analyst, other_analyst) -> None:
    round_ = half_run(analysis, recipe, analyst, shards=1, started_seconds_ago=1)
    client.force_login(other_analyst)
    assert client.post(f"/rounds/{round_.pk}/cancel/").status_code == 404
    round_.refresh_from_db()
    assert round_.status == Round.Status.RUNNING


def test_a_privacy_officer_may_stop_an_analysts_round(client, analysis, recipe, analyst, officer) -> None:
    """docs/roles.md: an officer can stop a round (it spends nothing), never start one."""
    round_ = half_run(analysis, recipe, analyst, shards=1, started_seconds_ago=1)
    client.force_login(officer)
    assert "Cancel round" in client.get(f"/rounds/{round_.pk}/").content.decode()
    assert client.post(f"/rounds/{round_.pk}/cancel/").status_code == 302
    round_.refresh_from_db()
    assert round_.status == Round.Status.CANCELLED and round_.error == "cancelled by olivia"


# ---------------------------------------------------------------- drill-down: the rules


@pytest.mark.parametrize(
    ("lo", "hi", "boundaries"),
    [
        (30, 40, [30, 32, 34, 36, 38, 40]),  # 5 buckets of 2: the most (<= 8) that divide 10
        (0, 16, [0, 2, 4, 6, 8, 10, 12, 14, 16]),  # 8 of 2
        (20, 31, [20, 22, 24, 26, 28, 30, 31]),  # 11 is prime: width ceil(11 / 8) = 2, the last narrower
        (5, 8, [5, 6, 7, 8]),
        (0.5, 1.5, [0.5, 0.625, 0.75, 0.875, 1.0, 1.125, 1.25, 1.375, 1.5]),  # not integers: 8 of 1/8
        (30, 31, [30, 30.125, 30.25, 30.375, 30.5, 30.625, 30.75, 30.875, 31]),
    ],
)
def test_a_numeric_bucket_splits_into_at_most_eight_equal_buckets(lo, hi, boundaries) -> None:
    assert drilldown.split_bucket(lo, hi) == boundaries


def test_refining_a_numeric_bucket_splits_it_and_keeps_the_privacy_parameters(
    analysis, recipe, analyst, django_capture_on_commit_callbacks
) -> None:
    round_ = released(analysis, recipe, analyst, django_capture_on_commit_callbacks)
    refined = drilldown.refined_recipe(round_=round_, cohort="", bucket=2)  # [30, 40)
    assert refined["label"] == "[30, 40)"
    content = refined["recipe"]
    assert content["dataTypeContent"] == {"age": {"dataType": "BucketedType", "boundaries": [30, 32, 34, 36, 38, 40]}}
    assert content["recipeIdentifier"] == "ages-refine-2"
    assert content["privacy"] == recipe["privacy"] and content["query"] == recipe["query"]
    assert content["cohorts"] == []
    assert (
        "values below 30 (and missing ones) fall into its first bucket, below 30 or missing" in refined["explanation"]
    )
    assert recipe_validate(analysis=analysis, content=content).field == "age"
    # The identifier stays unique once the refinement has run.
    recipe_create(analysis=analysis, content=content, user=analyst)
    assert drilldown.refined_recipe(round_=round_, cohort="", bucket=2)["recipe"]["recipeIdentifier"] == (
        "ages-refine-2-2"
    )


def test_a_bucket_without_finer_structure_is_broken_down_by_an_unused_cohort_field(
    analysis, recipe, analyst, django_capture_on_commit_callbacks
) -> None:
    round_ = released(analysis, recipe, analyst, django_capture_on_commit_callbacks)
    for bucket in (0, 7):  # OOV and [80, ∞)
        refined = drilldown.refined_recipe(round_=round_, cohort="", bucket=bucket)
        assert refined["recipe"]["cohorts"] == ["locale"]
        assert refined["recipe"]["dataTypeContent"] == recipe["dataTypeContent"]
        assert "breaks the whole histogram down by locale" in refined["explanation"]


def test_without_an_unused_cohort_field_such_a_bucket_cannot_be_refined_and_gets_no_link(
    client, analysis, recipe, analyst, django_capture_on_commit_callbacks
) -> None:
    recipe["cohorts"] = ["locale"]
    recipe["privacy"]["epsilon0"] = 2.0  # a minimum cohort of 974: en_US (about half the fleet) is released
    round_ = Round.objects.create(
        recipe=recipe_create(analysis=analysis, content=recipe, user=analyst), seed=1, created_by=analyst
    )
    _release_by_hand(round_)
    refined = drilldown.refined_recipe(round_=round_, cohort="locale=en_US", bucket=0)
    assert refined["recipe"] is None
    assert "allows no other cohort field" in refined["explanation"]
    assert drilldown.refinable_buckets(round_) == [False, True, True, True, True, True, True, False]
    client.force_login(analyst)
    page = client.get(f"/rounds/{round_.pk}/").content.decode()
    rows = page.split("<tbody>")[-1].split("</tr>")
    oov = next(r for r in rows if "<td>below 20 or missing</td>" in r and "locale=en_US" in r)
    thirties = next(r for r in rows if "<td>[30, 40)</td>" in r and "locale=en_US" in r)
    assert "Refine" not in oov and "no finer structure" in oov
    assert f"?refine={round_.pk}&amp;cohort=locale%3Den_US&amp;bucket=2" in thirties


def test_an_ngram_bucket_of_a_prefix_tree_extends_its_prefix_one_level(
    discovery, analyst, django_capture_on_commit_callbacks
) -> None:
    tokens = list(TOKENS[:40])
    content = {
        "recipeIdentifier": "words-2",
        "query": "select ngrams from KeyboardNGrams",
        "cohorts": ["locale"],  # en_US (about half of 30,000) clears the minimum cohort of 8,762
        "dataTypeContent": {"ngrams": {"dataType": "PrefixTree", "tree": {"root": tokens[:2]}, "tokens": tokens}},
        "privacy": {"mechanism": "asymmetric_ohe", "epsilon0": 4.0, "epsilon": 1.0, "delta": 1e-6},
    }
    round_ = released(discovery, content, analyst, django_capture_on_commit_callbacks)
    # Bucket 1 + leaf 1 × (V + 2) + 2 + token 5: the second leaf followed by the sixth token.
    bucket = 1 + 1 * (len(tokens) + 2) + 2 + 5
    refined = drilldown.refined_recipe(round_=round_, cohort="locale=en_US", bucket=bucket)
    leaf = f"{tokens[1]} {tokens[5]}"
    assert refined["label"] == leaf
    schema = refined["recipe"]["dataTypeContent"]["ngrams"]
    assert schema == {"dataType": "PrefixTree", "tree": {"root": [tokens[1]], tokens[1]: [tokens[5]]}, "tokens": tokens}
    assert f"Extends the n-gram “{leaf}” one level" in refined["explanation"]
    assert "the batch of locale=en_US shows the refinement" in refined["explanation"]
    assert recipe_validate(analysis=discovery, content=refined["recipe"]).encoding.size == 1 + 42
    # A phrase's end has nothing after it, nor has a word outside the tokens; every cohort field is used.
    for end_or_oov in (1, 2):
        assert drilldown.refined_recipe(round_=round_, cohort="locale=en_US", bucket=end_or_oov)["recipe"] is None
    assert (
        "is a whole phrase" in drilldown.refined_recipe(round_=round_, cohort="locale=en_US", bucket=1)["explanation"]
    )
    # The page's links (refinable_buckets) offer exactly the buckets refined_recipe refines.
    offered = [
        drilldown.refined_recipe(round_=round_, cohort="locale=en_US", bucket=i)["recipe"] is not None
        for i in range(1 + 2 * (len(tokens) + 2))
    ]
    assert drilldown.refinable_buckets(round_) == offered
    assert offered.count(True) == 2 * len(tokens)


def test_a_bucket_out_of_range_or_an_unreleased_cohort_is_refused(
    analysis, recipe, analyst, django_capture_on_commit_callbacks
) -> None:
    round_ = released(analysis, recipe, analyst, django_capture_on_commit_callbacks)
    with pytest.raises(ValidationFailed) as out_of_range:
        drilldown.refined_recipe(round_=round_, cohort="", bucket=8)
    assert out_of_range.value.errors == {"bucket": ["Must be a bucket index from 0 to 7."]}
    with pytest.raises(ValidationFailed) as cohort:
        drilldown.refined_recipe(round_=round_, cohort="locale=fr_FR", bucket=1)
    assert "cohort" in cohort.value.errors


# ---------------------------------------------------------------- drill-down: the pages


def test_the_round_table_links_each_refinable_bucket_to_the_prefilled_analysis_page(
    client, analysis, recipe, analyst, django_capture_on_commit_callbacks
) -> None:
    round_ = released(analysis, recipe, analyst, django_capture_on_commit_callbacks)
    client.force_login(analyst)
    page = client.get(f"/rounds/{round_.pk}/").content.decode()
    for bucket in range(8):  # every bucket: OOV and [80, ∞) by locale
        assert f'href="/analyses/test.ages/?refine={round_.pk}&amp;cohort=&amp;bucket={bucket}"' in page
    drill = json.loads(page.split('id="drilldown-data" type="application/json">')[1].split("</script>")[0])
    assert drill == {"url": "/analyses/test.ages/", "round": round_.pk, "refinable": [True] * 8}


def test_the_analysis_page_is_prefilled_with_the_refinement_and_says_what_it_costs(
    client, analysis, recipe, analyst, django_capture_on_commit_callbacks
) -> None:
    round_ = released(analysis, recipe, analyst, django_capture_on_commit_callbacks)
    client.force_login(analyst)
    response = client.get(f"/analyses/test.ages/?refine={round_.pk}&cohort=&bucket=2")
    assert response.status_code == 200
    page = response.content.decode()
    assert 'value="30, 32, 34, 36, 38, 40"' in page  # the form's bucket boundaries
    assert "&quot;recipeIdentifier&quot;: &quot;ages-refine-2&quot;" in page  # the recipe's JSON
    spent = analysis_spent(analysis)
    analysis_left = analysis.epsilon_allowed - spent["epsilon"]  # 2 - 1
    age_left = 2.0 - spent["fields"]["age"]["epsilon"]
    reports_left = analysis.reports_allowed - spent["reports"]
    assert (analysis_left, age_left, reports_left) == (1.0, 1.0, 1)
    assert (
        f"Refining bucket [30, 40) of round #{round_.pk}: this round will spend ε = {recipe['privacy']['epsilon']:g} "
        f"on every device that answers (analysis: ε {analysis_left:g} of 2 left now, 0 after; {reports_left} of 2 "
        f"reports left now, 0 after; field age: ε {age_left:g} of 2 left now, 0 after; 1 of 2 reports left now, "
        "0 after)."
    ) in page
    assert "will be refused" not in page


def test_the_cost_equals_the_recipe_epsilon_and_the_figures_left_are_analysis_spent(
    analysis, recipe, analyst, django_capture_on_commit_callbacks
) -> None:
    recipe["privacy"].update(epsilon0=2.0, epsilon=1.9)
    round_ = released(analysis, recipe, analyst, django_capture_on_commit_callbacks)
    content = drilldown.refined_recipe(round_=round_, cohort="", bucket=3)["recipe"]
    cost = drilldown.refinement_cost(round_=round_, recipe=content)
    spent = analysis_spent(analysis)
    assert cost["epsilon"] == content["privacy"]["epsilon"] == 1.9
    assert cost["analysis"]["epsilon_left"] == analysis.epsilon_allowed - spent["epsilon"]
    assert cost["analysis"]["reports_left"] == analysis.reports_allowed - spent["reports"]
    (age,) = cost["fields"]
    assert age["epsilon_left"] == 2.0 - spent["fields"]["age"]["epsilon"]
    assert age["reports_left"] == 2 - spent["fields"]["age"]["reports"]
    # 0.1 of epsilon is left by the sum and this round needs 1.9, which no account composes within 2:
    # refused, with the devices' reason.
    assert cost["refused"] is True
    assert cost["reasons"] == [
        "Aggregate epsilon (ε): Exceeds the analysis budget: 0.1 of its epsilon 2 left "
        "(tightest of basic, advanced, Rényi DP and PLD composition)."
    ]


def test_a_refinement_the_budget_refuses_is_still_prefilled_and_says_why(
    client, analysis, recipe, analyst, django_capture_on_commit_callbacks
) -> None:
    round_ = released(analysis, recipe, analyst, django_capture_on_commit_callbacks)
    second = copy.deepcopy(recipe)
    second["recipeIdentifier"] = "ages-again"
    released(analysis, second, analyst, django_capture_on_commit_callbacks)  # both reports are spent
    client.force_login(analyst)
    page = client.get(f"/analyses/test.ages/?refine={round_.pk}&cohort=&bucket=2").content.decode()
    assert 'value="30, 32, 34, 36, 38, 40"' in page
    assert (
        "this round will spend ε = 1 on every device that answers (analysis: ε 0 of 2 left now, 0 after; 0 of 2" in page
    )
    assert "This refinement will be refused" in page
    assert "The analysis has used all 2 of its reports:" in page


def _question_digest(page: str) -> str:
    """The spend_digest of the drill-down's spend question on an analysis page."""
    question = page.split('id="refine-question"')[1]
    return question.split('name="spend_digest" value="')[1].split('"')[0]


def test_run_this_refinement_asks_first_and_spends_nothing_until_answered(
    client, analysis, recipe, analyst, django_capture_on_commit_callbacks
) -> None:
    round_ = released(analysis, recipe, analyst, django_capture_on_commit_callbacks)
    client.force_login(analyst)
    # The button posts without an answer (a page without its script, or a hurried click): it asks.
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(f"/rounds/{round_.pk}/refine/", {"cohort": "", "bucket": "2"})
    assert response.status_code == 302
    assert response["Location"] == f"/analyses/test.ages/?refine={round_.pk}&cohort=&bucket=2&ask=1#refine-question"
    assert Round.objects.count() == 1 and Recipe.objects.count() == 1
    page = client.get(response["Location"]).content.decode()
    question = page.split('id="refine-question"')[1].split("</dialog>")[0]
    assert " open>" in question.split("\n")[0]  # the question is open where the page comes back
    assert "This round spends ε = 1 (δ = 0.000001) and one report on each of the about 5,000 devices asked." in question
    # What remains after, for the analysis and the field, before anything is spent.
    assert '<th scope="col">ε after</th>' in question and "Field age" in question
    # An answer about another recipe (forged, or a recipe changed since) asks again, spending nothing.
    with django_capture_on_commit_callbacks(execute=True):
        again = client.post(f"/rounds/{round_.pk}/refine/", {"cohort": "", "bucket": "2", "spend_digest": "0" * 64})
    assert again["Location"].endswith("&ask=1#refine-question") and Round.objects.count() == 1


def test_running_the_refinement_starts_a_round_of_the_refined_recipe(
    client, analysis, recipe, analyst, django_capture_on_commit_callbacks
) -> None:
    round_ = released(analysis, recipe, analyst, django_capture_on_commit_callbacks)
    client.force_login(analyst)
    digest = _question_digest(client.get(f"/analyses/test.ages/?refine={round_.pk}&cohort=&bucket=2").content.decode())
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(f"/rounds/{round_.pk}/refine/", {"cohort": "", "bucket": "2", "spend_digest": digest})
    refined = Round.objects.exclude(pk=round_.pk).get()
    assert response.status_code == 302 and response["Location"] == f"/rounds/{refined.pk}/"
    assert refined.recipe.identifier == "ages-refine-2"
    assert refined.status == Round.Status.RELEASED
    assert refined.release.content["buckets"] == [
        "OOV",
        "[30, 32)",
        "[32, 34)",
        "[34, 36)",
        "[36, 38)",
        "[38, 40)",
        "[40, ∞)",
    ]


def test_a_refused_refinement_run_creates_nothing_and_says_why(
    client, analysis, recipe, analyst, django_capture_on_commit_callbacks
) -> None:
    round_ = released(analysis, recipe, analyst, django_capture_on_commit_callbacks)
    second = copy.deepcopy(recipe)
    second["recipeIdentifier"] = "ages-again"
    released(analysis, second, analyst, django_capture_on_commit_callbacks)
    client.force_login(analyst)
    response = client.post(f"/rounds/{round_.pk}/refine/", {"cohort": "", "bucket": "2"}, follow=True)
    assert "The analysis has used all 2 of its reports:" in response.content.decode()
    assert Recipe.objects.count() == 2 and Round.objects.count() == 2


def test_bad_refine_parameters_are_a_400_and_another_analysts_round_a_404(
    client, analysis, recipe, analyst, other_analyst, django_capture_on_commit_callbacks
) -> None:
    round_ = released(analysis, recipe, analyst, django_capture_on_commit_callbacks)
    client.force_login(analyst)
    response = client.get(f"/analyses/test.ages/?refine={round_.pk}&cohort=&bucket=99")
    assert response.status_code == 400 and "Must be a bucket index from 0 to 7." in response.content.decode()
    assert client.get("/analyses/test.ages/?refine=x&bucket=1").status_code == 400
    client.force_login(other_analyst)
    assert client.post(f"/rounds/{round_.pk}/refine/", {"cohort": "", "bucket": "2"}).status_code == 404


def test_the_release_downloads_as_json(client, analysis, recipe, analyst, django_capture_on_commit_callbacks) -> None:
    round_ = released(analysis, recipe, analyst, django_capture_on_commit_callbacks)
    client.force_login(analyst)
    response = client.get(f"/rounds/{round_.pk}/release.json?intervals=simultaneous")
    assert (
        response["Content-Disposition"] == f'attachment; filename="test.ages-round-{round_.pk}-raw-simultaneous.json"'
    )
    body = json.loads(response.content)
    assert body["round"] == round_.pk and body["intervals"] == "simultaneous" and len(body["buckets"]) == 8
    assert f'href="/rounds/{round_.pk}/release.json?intervals=per-bucket&amp;view=raw">Download JSON' in (
        client.get(f"/rounds/{round_.pk}/").content.decode()
    )


def _release_by_hand(round_: Round) -> None:
    """Run every shard and aggregate, as the tasks would."""
    for shard_id in round_dispatch(round_id=round_.pk):
        round_shard_run(round_id=round_.pk, shard_id=shard_id)
    round_aggregate(round_id=round_.pk)
    round_.refresh_from_db()
