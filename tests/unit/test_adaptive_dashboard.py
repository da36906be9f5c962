"""The dashboard's adaptive runs: the start page, the run page, its status.json, pause and continue."""

from __future__ import annotations

import copy
import json

import pytest

from analyses.models import AdaptiveRun, Recipe, Round
from analyses.services.policy import analysis_approve, analysis_create
from devices.models import ShardRun
from tests.conftest import DISCOVERY_POLICY, DISCOVERY_SPEC

pytestmark = pytest.mark.django_db

POLICY, SPEC = DISCOVERY_POLICY, DISCOVERY_SPEC


@pytest.fixture
def alice(client, analyst):
    client.force_login(analyst)
    return client


def _start(client, spec: dict, capture, *, execute: bool = True):
    with capture(execute=execute):
        return client.post("/analyses/t.discovery/adaptive/", {"document": json.dumps(spec)})


def test_the_analysis_page_links_to_its_interactive_runs(alice, discovery) -> None:
    page = alice.get("/analyses/t.discovery/").content.decode()
    assert 'href="/analyses/t.discovery/adaptive/"' in page


def test_the_start_page_is_prefilled_with_a_discovery_spec_for_the_analysis(alice, discovery) -> None:
    response = alice.get("/analyses/t.discovery/adaptive/")
    assert response.status_code == 200
    form = response.context["form"]
    spec = json.loads(form["document"].value())
    assert (spec["analysis"], spec["kind"], spec["field"]) == ("t.discovery", "ngram_discovery", "ngrams")
    # The policy allows 3 reports and epsilon 3: three rounds of epsilon 1.
    assert spec["maxLength"] == 3 and spec["privacy"]["epsilonPerRound"] == 1.0
    page = response.content.decode()
    assert "No interactive runs yet." in page and 'name="document"' in page and "Start</button>" in page


def test_an_analysis_with_text_and_numbers_offers_discovery_first_and_refinement(client, analysis, analyst) -> None:
    client.force_login(analyst)
    response = client.get("/analyses/test.ages/adaptive/")  # fields age (number) and ngrams (text)
    spec = json.loads(response.context["form"]["document"].value())
    assert spec["kind"] == "ngram_discovery"
    assert [e["kind"] for e in response.context["other_examples"]] == ["Bucket refinement"]
    assert "&quot;kind&quot;: &quot;bucket_refinement&quot;" in response.content.decode()


def test_a_bad_spec_comes_back_with_every_message_and_nothing_is_sent(
    alice, discovery, django_capture_on_commit_callbacks
) -> None:
    spec = {**copy.deepcopy(SPEC), "threshold": {"zScore": 0}, "maxLength": 0}
    response = _start(alice, spec, django_capture_on_commit_callbacks)
    assert response.status_code == 400
    page = response.content.decode()
    assert "threshold.zScore: Must be greater than 0." in page
    assert "maxLength: Must be at least 1." in page
    assert 'aria-invalid="true"' in page and 'id="id_document_error"' in page
    assert not AdaptiveRun.objects.exists()
    assert not Recipe.objects.exists() and not Round.objects.exists() and not ShardRun.objects.exists()


def test_text_that_is_not_json_is_refused_with_its_position(alice, discovery) -> None:
    response = alice.post("/analyses/t.discovery/adaptive/", {"document": '{"kind": '})
    assert response.status_code == 400
    assert "Not valid JSON" in response.content.decode()
    assert not AdaptiveRun.objects.exists()


def test_a_spec_of_another_analysis_or_an_invisible_baseline_is_refused(
    alice, discovery, analysis, other_analyst, officer, django_capture_on_commit_callbacks
) -> None:
    response = _start(alice, {**copy.deepcopy(SPEC), "analysis": "test.ages"}, django_capture_on_commit_callbacks)
    assert response.status_code == 400
    assert "analysis: Must be &#x27;t.discovery&#x27;" in response.content.decode()
    # charlie's analysis on the same fleet: alice may not spend its budget, nor learn it exists.
    theirs = {**copy.deepcopy(POLICY), "identifier": "c.static"}
    analysis_approve(analysis=analysis_create(spec=theirs, owner=other_analyst), officer=officer)
    spec = {**copy.deepcopy(SPEC), "baseline": {"analysis": "c.static", "rows": 2, "columns": 256}}
    response = _start(alice, spec, django_capture_on_commit_callbacks)
    assert response.status_code == 400
    assert "baseline.analysis: No analysis &#x27;c.static&#x27;." in response.content.decode()
    assert not AdaptiveRun.objects.exists() and not Round.objects.exists()


def test_a_good_spec_runs_and_the_run_page_shows_the_plan_and_the_kept_ngrams(
    alice, discovery, django_capture_on_commit_callbacks
) -> None:
    response = _start(alice, SPEC, django_capture_on_commit_callbacks)
    run = AdaptiveRun.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/adaptive/{run.pk}/"
    response = alice.get(response["Location"])
    assert response.status_code == 200
    page = response.content.decode()
    assert 'id="run-status">Finished<' in page and "Finished: all 2 planned rounds ran." in page
    # The plan: two rounds of epsilon 1, both spent, and their total.
    plan = response.context["plan"]
    assert [(p["round"], p["epsilon0"], p["epsilon"], p["delta"], p["spent"]) for p in plan] == [
        (1, 4.0, 1.0, 1e-6, True),
        (2, 4.0, 1.0, 1e-6, True),
    ]
    assert plan[0]["min_cohort"] == 2203 and ">2,203<" in page
    assert response.context["plan_total"]["epsilon"] == 2.0
    assert 'id="plan-table"' in page and "2 of 2 (ε 2)" in page
    # Each level's kept n-grams with estimate, standard error and 95% interval.
    assert 'id="level-1-table"' in page and 'id="level-2-table"' in page
    level2 = response.context["levels"][1]["rows"]
    hello_world = next(r for r in level2 if r["ngram"] == "hello world")
    assert hello_world["low"] == pytest.approx(hello_world["estimate"] - 1.96 * hello_world["standard_error"])
    assert f"[{hello_world['low']:,.1f}, {hello_world['high']:,.1f}]" in page
    # The tree: "hello world" under "hello", in the sunburst's data and in its table.
    chart = response.context["chart"]
    tree = chart["tree"][-1]
    assert tree["parents"][tree["ids"].index("hello world")] == "hello"
    # Wedges nest (plotly's branchvalues "total"): a prefix's extensions share its wedge.
    value = dict(zip(tree["ids"], tree["values"], strict=True))
    for parent in set(tree["parents"]) - {""}:
        kids = [value[i] for i, p in zip(tree["ids"], tree["parents"], strict=True) if p == parent]
        assert sum(kids) <= value[parent]
    hello = tree["ids"].index("hello")
    assert tree["values"][hello] == pytest.approx(tree["customdata"][hello][1])  # inner ring: the estimate
    assert len(chart["tree"]) == 2 and "hello world" not in chart["tree"][0]["ids"]
    rows = [n["id"] for n in response.context["tree_rows"]]
    assert rows.index("hello") < rows.index("hello world")
    assert 'id="tree-chart"' in page and 'id="adaptive-chart-data"' in page and "vendor/plotly-full.min.js" in page
    # No more polling, nor steering, once finished.
    assert 'data-follow="false"' in page and 'value="pause"' not in page and 'value="continue"' not in page
    # The list shows the run.
    listing = alice.get("/analyses/t.discovery/adaptive/").content.decode()
    assert f'href="/adaptive/{run.pk}/"' in listing and "2 / 2" in listing and "Finished" in listing


def test_status_json_returns_the_levels(alice, discovery, django_capture_on_commit_callbacks) -> None:
    _start(alice, SPEC, django_capture_on_commit_callbacks)
    run = AdaptiveRun.objects.get()
    response = alice.get(f"/adaptive/{run.pk}/status.json")
    assert response.status_code == 200 and response["Content-Type"] == "application/json"
    body = response.json()
    assert body["status"] == "finished" and body["current_round"] is None
    assert [level["length"] for level in body["levels"]] == [1, 2]
    assert "hello world" in [k["ngram"] for k in body["levels"][1]["kept"]]
    assert set(body["levels"][0]["kept"][0]) == {"ngram", "end", "estimate", "standard_error"}


def test_a_running_run_reports_its_current_round_and_is_followed(
    alice, discovery, django_capture_on_commit_callbacks
) -> None:
    _start(alice, SPEC, django_capture_on_commit_callbacks, execute=False)  # round 1 not dispatched
    run = AdaptiveRun.objects.get()
    page = alice.get(f"/adaptive/{run.pk}/").content.decode()
    assert 'data-follow="true"' in page and 'data-levels="0"' in page and 'id="round-progress"' in page
    assert '<meta http-equiv="refresh"' in page  # without JavaScript the page refreshes itself
    assert 'value="pause"' in page
    body = alice.get(f"/adaptive/{run.pk}/status.json").json()
    assert body["status"] == "running" and body["levels"] == []
    assert body["current_round"]["id"] == run.current_round_id
    assert body["current_round"]["label"] == "Round 1 of 2"
    assert body["current_round"]["progress"]["status"] == "queued"


def test_another_analyst_gets_404_for_the_run_page_and_its_status(
    client, discovery, analyst, other_analyst, django_capture_on_commit_callbacks
) -> None:
    client.force_login(analyst)
    _start(client, SPEC, django_capture_on_commit_callbacks)
    run = AdaptiveRun.objects.get()
    client.force_login(other_analyst)
    assert client.get(f"/adaptive/{run.pk}/").status_code == 404
    assert client.get(f"/adaptive/{run.pk}/status.json").status_code == 404
    assert client.post(f"/adaptive/{run.pk}/", {"action": "pause"}).status_code == 404
    assert client.get("/analyses/t.discovery/adaptive/").status_code == 404


def test_the_pages_need_sign_in(client, discovery) -> None:
    for url in ("/analyses/t.discovery/adaptive/", "/adaptive/1/", "/adaptive/1/status.json"):
        response = client.get(url)
        assert response.status_code == 302 and response["Location"].startswith("/login/")


def test_pause_edit_then_continue(alice, discovery, django_capture_on_commit_callbacks) -> None:
    with django_capture_on_commit_callbacks(execute=False) as start_callbacks:
        alice.post("/analyses/t.discovery/adaptive/", {"document": json.dumps(SPEC)})
    run = AdaptiveRun.objects.get()
    response = alice.post(f"/adaptive/{run.pk}/", {"action": "pause"})
    assert response.status_code == 302
    run.refresh_from_db()
    assert run.status == AdaptiveRun.Status.PAUSED
    page = alice.get(f"/adaptive/{run.pk}/").content.decode()
    assert 'value="continue"' in page and "The current round is still running" in page

    # Round 1 runs now; the run records it and waits with round 2's recipe.
    with django_capture_on_commit_callbacks(execute=True):
        for callback in start_callbacks:
            callback()
    run.refresh_from_db()
    assert run.status == AdaptiveRun.Status.PAUSED and len(run.levels) == 1 and run.next_recipe is not None
    response = alice.get(f"/adaptive/{run.pk}/")
    page = response.content.decode()
    assert 'id="next-recipe"' in page and 'value="edit"' in page
    waiting = json.loads(response.context["next_form"]["document"].value())
    assert waiting == run.next_recipe["recipe"]
    body = alice.get(f"/adaptive/{run.pk}/status.json").json()
    assert body["next_recipe"]["recipe"] == waiting and len(body["levels"]) == 1

    # An edit that changes the planned privacy is refused, shown next to the textarea.
    edited = copy.deepcopy(waiting)
    edited["privacy"]["epsilon"] = 2.0
    response = alice.post(f"/adaptive/{run.pk}/", {"action": "edit", "document": json.dumps(edited)})
    assert response.status_code == 400
    assert "privacy: Must stay as planned" in response.content.decode()
    # Where the eye goes: the textarea is focused on load (and so scrolled to) and names its errors.
    page = response.content.decode()
    textarea = page[page.index('<textarea name="document"') :].split(">", 1)[0]
    assert "autofocus" in textarea and 'aria-describedby="id_document_error' in textarea
    # The analyst narrows round 2 to one prefix, saves, and continues.
    edited = copy.deepcopy(waiting)
    edited["dataTypeContent"]["ngrams"]["tree"] = {"root": ["hello"]}
    with django_capture_on_commit_callbacks(execute=True):
        response = alice.post(f"/adaptive/{run.pk}/", {"action": "edit-continue", "document": json.dumps(edited)})
    assert response.status_code == 302
    run.refresh_from_db()
    assert run.status == AdaptiveRun.Status.FINISHED and run.levels[1]["leaves"] == 1
    assert all(k["tokens"][0] == "hello" for k in run.levels[1]["kept"])
    # Continuing a finished run is refused with the reason.
    response = alice.post(f"/adaptive/{run.pk}/", {"action": "continue"})
    assert response.status_code == 409
    assert "Only a paused analysis can continue." in response.content.decode()


def test_pause_then_continue_runs_to_the_end(alice, discovery, django_capture_on_commit_callbacks) -> None:
    with django_capture_on_commit_callbacks(execute=False) as start_callbacks:
        alice.post("/analyses/t.discovery/adaptive/", {"document": json.dumps(SPEC)})
    run = AdaptiveRun.objects.get()
    assert alice.post(f"/adaptive/{run.pk}/", {"action": "pause"}).status_code == 302
    with django_capture_on_commit_callbacks(execute=True):
        for callback in start_callbacks:
            callback()
    with django_capture_on_commit_callbacks(execute=True):
        response = alice.post(f"/adaptive/{run.pk}/", {"action": "continue"})
    assert response.status_code == 302
    run.refresh_from_db()
    assert run.status == AdaptiveRun.Status.FINISHED and len(run.levels) == 2
    assert alice.get(f"/adaptive/{run.pk}/status.json").json()["status"] == "finished"


def test_bucket_refinement_shows_a_histogram_per_round(
    alice, words_fleet, analyst, officer, django_capture_on_commit_callbacks
):
    policy = {
        **copy.deepcopy(POLICY),
        "identifier": "t.refinement",
        "queryClass": {"stream": "ModelMetrics", "fields": ["perplexity"], "cohortFields": ["locale"]},
        "fields": {"perplexity": {"localEpsilon": 4.0, "epsilon": 3.0, "reports": 3}},
    }
    analysis_approve(analysis=analysis_create(spec=policy, owner=analyst), officer=officer)
    spec = json.loads(alice.get("/analyses/t.refinement/adaptive/").context["form"]["document"].value())
    assert spec["kind"] == "bucket_refinement" and spec["field"] == "perplexity" and spec["maxRounds"] == 3
    spec["maxRounds"], spec["privacy"]["epsilonPerRound"] = 2, 1.0
    with django_capture_on_commit_callbacks(execute=True):
        response = alice.post("/analyses/t.refinement/adaptive/", {"document": json.dumps(spec)})
    assert response.status_code == 302
    response = alice.get(response["Location"])
    page = response.content.decode()
    assert 'id="level-1-chart"' in page and 'id="level-2-table"' in page and 'id="tree-chart"' not in page
    first = response.context["levels"][0]["rows"]
    assert any(r["bucket"] == "[25, 50)" and r["split"] for r in first)
    # A chart per round, and one of every round pooled (the last, after the rounds').
    assert len(response.context["chart"]["levels"]) == 3
    assert response.context["chart"]["levels"][2]["title"] == "bucket (every round pooled)"


def test_with_a_static_twin_the_spec_has_a_baseline_and_the_page_compares(
    alice, discovery, analyst, officer, django_capture_on_commit_callbacks
) -> None:
    twin = {**copy.deepcopy(POLICY), "identifier": "t.discovery-static"}
    analysis_approve(analysis=analysis_create(spec=twin, owner=analyst), officer=officer)
    spec = json.loads(alice.get("/analyses/t.discovery/adaptive/").context["form"]["document"].value())
    assert spec["baseline"]["analysis"] == "t.discovery-static"
    baseline = {"analysis": "t.discovery-static", "rows": 2, "columns": 256, "topK": 5}
    _start(alice, {**copy.deepcopy(SPEC), "baseline": baseline}, django_capture_on_commit_callbacks)
    run = AdaptiveRun.objects.get()
    assert run.status == AdaptiveRun.Status.FINISHED and len(run.baseline) == 2 and run.comparison["available"]
    response = alice.get(f"/adaptive/{run.pk}/")
    page = response.content.decode()
    assert 'id="comparison-table"' in page and 'id="comparison-rows"' in page
    assert "Static baseline spent" in page
    rows = response.context["comparison_rows"]
    assert len(rows) == 5 and "hello world" in [r["ngram"] for r in rows]
    assert 'data-follow="false"' in page
    # Both counts beside each other, and which one the intervals cover: the estimand (each device
    # reports one of its n-grams), never above the devices that typed the n-gram.
    assert "Devices that typed it (ground truth)" in page and 'id="comparison-estimand"' in page
    assert "the 95% intervals are about the estimand" in page
    found = [(row, cell) for row in rows for cell in row["methods"] if cell]
    assert found
    for row, cell in found:
        assert cell["estimand"] <= row["devices"]
        assert cell["covers"] == (cell["low"] <= cell["estimand"] <= cell["high"])
        assert f"estimand {cell['estimand']:,.1f}" in page

    # While the comparison task has not stored its result, the page says so and keeps following.
    AdaptiveRun.objects.filter(pk=run.pk).update(comparison=None)
    page = alice.get(f"/adaptive/{run.pk}/").content.decode()
    assert "Comparing both methods on the fleet" in page and 'data-follow="true"' in page
    assert alice.get(f"/adaptive/{run.pk}/status.json").json()["comparison_pending"] is True
