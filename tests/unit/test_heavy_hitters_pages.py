"""The pages and exports of a Poplar1 round (a Poplar1Words recipe), whose release is a walk of the
prefix tree (its levels and the words found) instead of a histogram: each shows the walk or says
why it has none, and none breaks with a walk round in the analysis."""

from __future__ import annotations

import copy
import csv
import io
import json

import pytest
from django.core.management import call_command

from aggregation.models import Poplar1Report
from analyses.models import Recipe, Round
from analyses.services import rounds
from analyses.services.rounds import round_create_and_start
from tests.heavy_hitters import RECIPE

pytestmark = pytest.mark.usefixtures("fixed_coins")


def _run(analysis, user, capture) -> Round:
    with capture(execute=True):
        round_ = round_create_and_start(analysis=analysis, content=copy.deepcopy(RECIPE), user=user)
    round_.refresh_from_db()
    return round_


@pytest.fixture
def walk_round(hh_analysis, analyst, django_capture_on_commit_callbacks) -> Round:
    round_ = _run(hh_analysis, analyst, django_capture_on_commit_callbacks)
    assert round_.status == Round.Status.RELEASED, round_.error
    return round_


def test_a_released_walk_on_its_pages_and_in_its_exports(
    client, api, analyst, walk_round, analysis, recipe, django_capture_on_commit_callbacks
) -> None:
    """One walk (a quarter of a minute) for every page: its round page, its downloads and the API's,
    the analysis's pages with it among their rounds, and the drill-down and comparison it refuses."""
    client.force_login(analyst)
    walk = walk_round.release.content["walk"]
    assert walk["words"] and walk["levels"]
    _round_page(client.get(f"/rounds/{walk_round.pk}/").content.decode(), walk)
    _exports(client, api, walk_round, walk)
    identifier = walk_round.recipe.analysis.identifier
    for page in ("/", f"/analyses/{identifier}/", f"/analyses/{identifier}/budget/", f"/compare/?a={walk_round.pk}"):
        assert client.get(page).status_code == 200, page
    # Neither chooser offers the walk for a comparison it would refuse.
    chooser = client.get("/compare/").content.decode()
    assert f'<option value="{walk_round.pk}"' not in chooser
    rounds_table = client.get(f"/analyses/{identifier}/").content.decode().split('id="compare-form"')[1]
    assert f'name="a" value="{walk_round.pk}"' not in rounds_table and "a walk: words, not buckets" in rounds_table
    _refused(client, api, walk_round, analysis, recipe, django_capture_on_commit_callbacks)


def _round_page(page: str, walk: dict) -> None:
    assert "words of <code>ngrams</code> (Poplar1 heavy hitters)" in page and "histogram of" not in page
    words = page[page.index('id="words-found"') : page.index('id="walk-levels"')]
    for word in walk["words"]:
        shown = word["word"] if word["complete"] else f"{word['word']}…"
        low = word["count"] - 1.959964 * word["standard_error"]
        assert f'<tr><td>{shown}</td><td class="num">{word["count"]:,}</td><td class="num">[{low:,.1f},' in words
    assert any(not word["complete"] for word in walk["words"])  # a 32-bit word cut: the note says so
    assert "fills every one of the 4 bytes a word holds here, so it may be the start of a longer word" in page
    levels = page[page.index('id="walk-levels"') :]
    assert levels.count('<tr><td class="num">') == len(walk["levels"])
    for level in walk["levels"]:
        asked = f'<tr><td class="num">{level["length"]}</td><td class="num">{level["asked"]}</td>'
        assert (
            f'{asked}<td class="num">{level["reports"]:,}</td><td class="num">{level["threshold"]:.1f}</td>' in levels
        )
        for kept in level["kept"]:
            ends = " (ends a word)" if kept["end"] else ""
            assert f"<code>{kept['prefix']}</code> {kept['count']:,}{ends}" in levels
    assert (
        "each one's discrete Gaussian noise (σ = 6.31, so a count's standard error is 8.93); "
        "a prefix is kept when its noisy count is at least the threshold" in page
    )
    # No chart, no view of buckets, no drill-down, no comparison: a walk has no buckets.
    assert 'id="chart"' not in page and "plotly" not in page and "Refine" not in page and "Compare with" not in page


def _exports(client, api, round_: Round, walk: dict) -> None:
    response = client.get(f"/rounds/{round_.pk}/release.csv")
    assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
    text = response.content.decode()
    assert text.splitlines()[0] == "word,count,standard_error,complete"
    rows = list(csv.DictReader(io.StringIO(text)))
    assert [(r["word"], int(r["count"]), r["complete"]) for r in rows] == [
        (w["word"], w["count"], str(w["complete"])) for w in walk["words"]
    ]
    assert api.get(f"/api/rounds/{round_.pk}/release.csv").content.decode() == text
    downloaded = client.get(f"/rounds/{round_.pk}/release.json")
    assert downloaded.status_code == 200
    assert downloaded.json() == round_.release.content  # a walk's release as stored
    released = api.get(f"/api/rounds/{round_.pk}/release/")
    assert released.status_code == 200
    assert released.json()["walk"] == walk and released.json()["next_offset"] is None


def _refused(client, api, round_: Round, analysis, recipe, capture) -> None:
    """Drilling down into a walk, or comparing it bucket by bucket, is refused in words; nothing runs."""
    identifier = round_.recipe.analysis.identifier
    why = "walked a Poplar1 prefix tree: its release is the words found, not buckets"
    page = client.get(f"/analyses/{identifier}/?refine={round_.pk}&cohort=&bucket=0")
    assert page.status_code == 400 and why in page.content.decode()
    before = (Round.objects.count(), Recipe.objects.count(), Poplar1Report.objects.count())
    posted = client.post(f"/rounds/{round_.pk}/refine/", {"cohort": "", "bucket": "0"}, follow=True)
    assert why in posted.content.decode() and "so it cannot be refined" in posted.content.decode()
    assert (Round.objects.count(), Recipe.objects.count(), Poplar1Report.objects.count()) == before
    with capture(execute=True):
        histogram = round_create_and_start(analysis=analysis, content=recipe, user=analysis.owner)
    histogram.refresh_from_db()
    assert histogram.status == Round.Status.RELEASED, histogram.error
    compared = client.get(f"/compare/?a={histogram.pk}&b={round_.pk}")
    assert compared.status_code == 400 and "so it cannot be compared bucket by bucket" in compared.content.decode()
    answer = api.get(f"/api/compare/?a={histogram.pk}&b={round_.pk}")
    assert answer.status_code == 400 and "cannot be compared" in json.dumps(answer.json())


def test_a_withheld_walk_says_why_and_not_how_many_reports(
    client, api, analyst, hh_analysis, monkeypatch, django_capture_on_commit_callbacks
) -> None:
    """A level below the minimum cohort: here the leader holds only 10 of the reports devices uploaded
    when the walk starts (as if the others had failed verification), so its first level refuses."""
    walk = rounds.heavy_hitters_walk

    def ten_reports(collection_key, plan):
        kept = (
            Poplar1Report.objects.filter(collection_key=collection_key).order_by("pk").values_list("pk", flat=True)[:10]
        )
        Poplar1Report.objects.filter(collection_key=collection_key).exclude(pk__in=list(kept)).delete()
        return walk(collection_key, plan)

    monkeypatch.setattr(rounds, "heavy_hitters_walk", ten_reports)
    round_ = _run(hh_analysis, analyst, django_capture_on_commit_callbacks)
    assert round_.status == Round.Status.WITHHELD
    assert round_.error == (
        "a level of the walk held fewer verified reports than the minimum cohort of 50: nothing released"
    )
    assert round_.release.content["walk"] == {
        "bits": 32,
        "standard_error": None,
        "threshold": None,
        "levels": [],
        "words": [],
    }
    client.force_login(analyst)
    page = client.get(f"/rounds/{round_.pk}/").content.decode()
    assert "words of <code>ngrams</code> (Poplar1 heavy hitters)" in page
    assert (
        "A level of the walk held fewer verified reports than the minimum cohort of 50: nothing released.</strong> "
        "No word was found" in page
    )
    assert "10 verified" not in page and 'id="release"' not in page
    for url in (f"/rounds/{round_.pk}/release.csv", f"/rounds/{round_.pk}/release.json"):
        assert client.get(url).status_code == 404
    assert api.get(f"/api/rounds/{round_.pk}/release/").status_code == 404
    assert "10 verified" not in json.dumps(api.get(f"/api/rounds/{round_.pk}/").json())
    identifier = hh_analysis.identifier
    assert client.get(f"/analyses/{identifier}/").status_code == 200
    assert client.get(f"/analyses/{identifier}/budget/").status_code == 200


@pytest.mark.django_db(transaction=True)  # the round's tasks run on commit, as the command's would
def test_run_recipe_prints_the_words_a_walk_found(hh_analysis, analyst, tmp_path, capsys) -> None:
    """The CLI's release of a walk: the words found with their 95% intervals, not an empty histogram."""
    path = tmp_path / "recipe.json"
    path.write_text(json.dumps(RECIPE))
    call_command("run_recipe", str(path), "--analysis", hh_analysis.identifier, "--user", analyst.username)
    out = capsys.readouterr().out
    walk = Round.objects.get(recipe__analysis=hh_analysis).release.content["walk"]
    assert f"{len(walk['words']):,} words found over {len(walk['levels'])} levels" in out and "cohort all" not in out
    for word in walk["words"]:
        shown = word["word"] if word["complete"] else f"{word['word']}…"
        assert f"{shown:>20}  {word['count']:>10,} ± {1.96 * word['standard_error']:.1f}" in out
