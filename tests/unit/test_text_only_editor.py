"""An analysis of text fields only (demo.discovery) gets no histogram editor: the page says plainly
what it can run, shows no error before any input, and still runs a recipe written as JSON."""

from __future__ import annotations

import html
import json
import re

import pytest

from analyses.models import Recipe, Round
from devices.synthetic import TOKENS
from privacy.ngrams import PrefixTreeType

pytestmark = pytest.mark.django_db


def text_recipe() -> dict:
    return {
        "recipeIdentifier": "words",
        "version": "1",
        "AnalysisIdentifier": "t.discovery",
        "query": "select ngrams from KeyboardNGrams",
        "cohorts": [],
        "dataTypeContent": {"ngrams": PrefixTreeType(tokens=tuple(TOKENS[:20]), unit="word").to_json()},
        "privacy": {"mechanism": "asymmetric_ohe", "epsilon0": 4.0, "epsilon": 1.0, "delta": 1e-6},
    }


def test_a_text_only_analysis_says_what_it_can_run_and_shows_no_error_before_input(client, discovery, analyst) -> None:
    client.force_login(analyst)
    response = client.get("/analyses/t.discovery/")
    page = response.content.decode()
    assert response.status_code == 200
    assert "The fields of this analysis are text: <code>ngrams</code>." in page
    assert "A histogram needs a number field" in page
    assert 'href="/analyses/t.discovery/adaptive/"' in page
    assert 'id="recipe-form"' not in page  # no histogram editor with an empty field list
    assert 'class="error"' not in page and 'role="alert"' not in page
    assert "recipe_form.js" not in page


def test_a_text_only_analysis_runs_a_recipe_written_as_json(
    client, discovery, analyst, django_capture_on_commit_callbacks
) -> None:
    client.force_login(analyst)
    response = client.post(
        "/analyses/t.discovery/", {"source": "json", "action": "run", "recipe_json": json.dumps(text_recipe())}
    )
    assert response.status_code == 302
    assert Recipe.objects.get().identifier == "words"


def test_a_bad_json_recipe_on_a_text_only_analysis_says_why_under_the_json_and_starts_nothing(
    client, discovery, analyst
) -> None:
    client.force_login(analyst)
    recipe = text_recipe()
    recipe["privacy"]["epsilon"] = 0
    response = client.post("/analyses/t.discovery/", {"source": "json", "recipe_json": json.dumps(recipe)})
    page = response.content.decode()
    assert response.status_code == 400
    assert "privacy.epsilon: Must be greater than 0." in page
    assert '<details id="text-recipe" open>' in page
    assert not Round.objects.exists()


def test_the_example_offered_for_the_text_field_is_a_recipe_the_analysis_accepts(
    client, discovery, analyst, api
) -> None:
    client.force_login(analyst)
    page = client.get("/analyses/t.discovery/").content.decode()
    example = html.unescape(re.search(r'<pre class="json">(.*?)</pre>', page, re.DOTALL).group(1))
    response = api.post("/api/analyses/t.discovery/recipes/validate/", json.loads(example), format="json")
    assert response.status_code == 200, response.json()
    assert response.json()["field"] == "ngrams"
