"""Run asks before an irreversible spend, without JavaScript too: the page's form posts
ask_before_spending, gets the round's cost and what remains, and runs only on "Run and spend"."""

from __future__ import annotations

import json

import pytest

from analyses.models import Recipe, Round
from analyses.templatetags.figures import figure
from tests.unit.test_dashboard import FORM
from tests.unit.test_text_only_editor import text_recipe

pytestmark = pytest.mark.django_db


def test_run_from_the_page_asks_first_showing_the_cost_and_what_remains(client, analysis, analyst) -> None:
    client.force_login(analyst)
    response = client.post("/analyses/test.ages/", {**FORM, "action": "run", "ask_before_spending": "1"})
    assert response.status_code == 200
    page = response.content.decode()
    question = page[page.index('id="spend-question"') : page.index("</table>", page.index('id="spend-question"'))]
    assert "This round spends ε = 1 (δ = 0.000001) and one report on each of the about 5,000 devices asked." in question
    assert (
        '<th scope="row">Analysis test.ages</th><td class="num">2</td><td class="num">1</td><td class="num">2</td><td class="num">1</td>'
        in question
    )
    assert '<th scope="row">Field age</th>' in question
    assert 'value="run-confirmed"' in page
    assert 'value="1"' in page and 'name="epsilon"' in page  # the fields kept as posted
    assert not Recipe.objects.exists() and not Round.objects.exists()


def test_run_and_spend_runs_it(client, analysis, analyst, django_capture_on_commit_callbacks) -> None:
    client.force_login(analyst)
    with django_capture_on_commit_callbacks(execute=False):
        response = client.post("/analyses/test.ages/", {**FORM, "action": "run-confirmed", "ask_before_spending": "1"})
    assert response.status_code == 302
    assert Round.objects.count() == 1


def test_a_refused_recipe_is_not_asked_about_but_refused_by_its_field(client, analysis, analyst) -> None:
    client.force_login(analyst)
    response = client.post(
        "/analyses/test.ages/", {**FORM, "epsilon": "5", "action": "run", "ask_before_spending": "1"}
    )
    assert response.status_code == 400
    assert 'id="spend-question"' not in response.content.decode()
    assert response.context["form"].errors["epsilon"][0].startswith("Exceeds the analysis budget")
    assert not Round.objects.exists()


def test_a_text_only_analysis_asks_too(client, discovery, analyst) -> None:
    client.force_login(analyst)
    post = {"source": "json", "action": "run", "ask_before_spending": "1", "recipe_json": json.dumps(text_recipe())}
    page = client.post("/analyses/t.discovery/", post).content.decode()
    assert "Run this round and spend its budget?" in page and "Field ngrams" in page
    assert not Round.objects.exists()


@pytest.mark.parametrize(
    ("value", "shown"),
    [(0.5, "0.5"), (1e-6, "0.000001"), (3.0, "3"), (0.30000000000000004, "0.3"), (1e-9, "1e-09"), (None, "—")],
)
def test_figures_print_as_the_editors_script_prints_them(value, shown) -> None:
    assert figure(value) == shown


# Split by locale, epsilon0 2 and q = 0.3: a minimum cohort of 206; of the fleet of 5,000, en_US
# (~745 expected) and en_GB (~224) are released, de_DE, es_ES and fr_FR (~160-190) are expected below.
SPLIT = {**FORM, "epsilon0": "2", "sampling_rate": "0.3", "cohorts": "locale"}


def _asked(client, post: dict) -> str:
    page = client.post("/analyses/test.ages/", {**post, "action": "run", "ask_before_spending": "1"}).content.decode()
    return page[page.index('id="spend-question"') : page.index("</div>\n</div>", page.index('id="spend-question"'))]


def test_the_question_says_which_cohorts_will_be_suppressed_before_the_spend(client, analysis, analyst) -> None:
    client.force_login(analyst)
    question = _asked(client, SPLIT)
    suppressed = question[question.index('id="spend-question-suppressed"') :]
    assert "3 of 5 batches are expected below the minimum cohort and would be suppressed" in suppressed
    assert "en_US" not in suppressed.split("</p>")[0] and "fr_FR" in suppressed.split("</p>")[0]
    assert "Running it confirms what is said above: you will not be asked again." in question
    assert not Round.objects.exists()


def test_run_and_spend_under_the_question_starts_without_a_second_confirmation(
    client, analysis, analyst, django_capture_on_commit_callbacks
) -> None:
    client.force_login(analyst)
    digest = _asked(client, SPLIT).split('name="spend_digest" value="')[1].split('"')[0]
    with django_capture_on_commit_callbacks(execute=False):
        response = client.post(
            "/analyses/test.ages/",
            {**SPLIT, "action": "run-confirmed", "ask_before_spending": "1", "spend_digest": digest},
        )
    assert response.status_code == 302 and Round.objects.count() == 1


def test_a_recipe_changed_after_the_question_is_asked_about_again_and_nothing_is_spent(
    client, analysis, analyst
) -> None:
    client.force_login(analyst)
    digest = _asked(client, FORM).split('name="spend_digest" value="')[1].split('"')[0]
    # The analyst splits by locale after being asked about the unsplit recipe, then presses the
    # question's "Run and spend": that answer was about another recipe.
    response = client.post(
        "/analyses/test.ages/", {**SPLIT, "action": "run-confirmed", "ask_before_spending": "1", "spend_digest": digest}
    )
    assert response.status_code == 200
    page = response.content.decode()
    assert "The recipe changed since you were asked" in page and 'id="spend-question-suppressed"' in page
    assert not Recipe.objects.exists() and not Round.objects.exists()


def test_without_the_question_a_split_leaving_small_cohorts_still_needs_its_go_ahead(client, analysis, analyst) -> None:
    # The API's and a script's path: run-confirmed without the server's question and no go-ahead.
    client.force_login(analyst)
    response = client.post("/analyses/test.ages/", {**SPLIT, "action": "run-confirmed", "ask_before_spending": "1"})
    assert response.status_code == 400 and 'name="confirm_small_cohorts"' in response.content.decode()
    assert not Round.objects.exists()


def test_round_started_is_said_while_it_runs_and_not_on_its_finished_page(
    client, analysis, analyst, django_capture_on_commit_callbacks
) -> None:
    client.force_login(analyst)
    with django_capture_on_commit_callbacks(execute=False):  # not run yet: the round is queued
        started = client.post("/analyses/test.ages/", {**FORM, "action": "run-confirmed", "ask_before_spending": "1"})
    queued = Round.objects.get()
    assert f"Round {queued.pk} started: devices answer" in client.get(started["Location"]).content.decode()

    with django_capture_on_commit_callbacks(execute=True):  # run at once: released before the page is read
        started = client.post(
            "/analyses/test.ages/",
            {**FORM, "epsilon": "0.5", "action": "run-confirmed", "ask_before_spending": "1"},
        )
    released = Round.objects.exclude(pk=queued.pk).get()
    assert released.status == Round.Status.RELEASED
    page = client.get(started["Location"]).content.decode()
    assert f"Round {released.pk} started and has finished (released): what it came to is below." in page
    assert "devices answer as they are asked" not in page and 'id="release-reports"' in page
