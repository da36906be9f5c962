"""Fuzzing the validators (hypothesis, derandomized): any input is accepted or refused with a
message per field, never an unhandled exception or a server error."""

from __future__ import annotations

import copy
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from analyses.adaptive.spec import adaptive_validate
from analyses.models import Recipe
from analyses.services.recipes import recipe_validate
from pfs_base.errors import ValidationFailed
from pfs_device.query import QueryRefused, parse_query
from privacy.encoding import content_encoding
from privacy.ngrams import SchemaError
from tests.conftest import DISCOVERY_SPEC, RECIPE

FUZZ = settings(
    max_examples=150,
    derandomize=True,  # the same examples on every run: CI is reproducible
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# Any JSON value, shallow enough to stay fast.
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**12), 10**12) | st.floats(allow_nan=True) | st.text(max_size=12),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)


def mutated(base: dict, paths: list[tuple[str, ...]]):
    """``base`` with some of ``paths`` replaced by arbitrary JSON (or removed)."""

    @st.composite
    def strategy(draw):
        document = copy.deepcopy(base)
        for path in draw(st.lists(st.sampled_from(paths), min_size=1, max_size=3, unique=True)):
            parent = document
            for key in path[:-1]:
                parent = parent.setdefault(key, {}) if isinstance(parent, dict) else {}
            if not isinstance(parent, dict):
                continue
            if draw(st.booleans()):
                parent[path[-1]] = draw(json_values)
            else:
                parent.pop(path[-1], None)
        return document

    return strategy()


def assert_refused_with_messages(refusal: ValidationFailed) -> None:
    assert refusal.errors
    assert all(isinstance(k, str) and v and all(isinstance(m, str) and m for m in v) for k, v in refusal.errors.items())


@FUZZ
@given(st.text(max_size=80))
def test_any_query_text_parses_or_is_refused_with_a_reason(text: str) -> None:
    try:
        parse_query(text)
    except QueryRefused as refusal:
        assert str(refusal)


@FUZZ
@given(st.dictionaries(st.text(max_size=8), json_values, max_size=4))
def test_any_data_type_content_encodes_or_names_the_key_at_fault(data_types: dict) -> None:
    try:
        fields, encoding = content_encoding(data_types)
    except SchemaError as refusal:
        assert str(refusal) and isinstance(refusal.key, str)
    else:
        assert fields and encoding.size >= 1


RECIPE_PATHS = [
    ("query",),
    ("cohorts",),
    ("recipeIdentifier",),
    ("AnalysisIdentifier",),
    ("dataTypeContent",),
    ("dataTypeContent", "age"),
    ("dataTypeContent", "age", "dataType"),
    ("dataTypeContent", "age", "boundaries"),
    ("privacy",),
    ("privacy", "mechanism"),
    ("privacy", "epsilon0"),
    ("privacy", "epsilon"),
    ("privacy", "delta"),
    ("privacy", "samplingRate"),
    ("privacy", "noise"),
    ("privacy", "minCohort"),
]


@FUZZ
@given(recipe=mutated(RECIPE, RECIPE_PATHS))
def test_any_recipe_validates_or_is_refused_per_field(analysis, recipe: dict) -> None:
    try:
        recipe_validate(analysis=analysis, content=recipe)
    except ValidationFailed as refusal:
        assert_refused_with_messages(refusal)
    assert not Recipe.objects.exists()


SPEC_PATHS = [
    ("analysis",),
    ("kind",),
    ("field",),
    ("unit",),
    ("vocabulary",),
    ("maxLength",),
    ("cohorts",),
    ("privacy",),
    ("privacy", "epsilon0"),
    ("privacy", "epsilonPerRound"),
    ("privacy", "delta"),
    ("privacy", "mechanism"),
    ("threshold",),
    ("threshold", "zScore"),
    ("threshold", "maxPerLevel"),
    ("baseline",),
    ("baseline", "analysis"),
    ("baseline", "columns"),
]


@FUZZ
@given(spec=mutated(DISCOVERY_SPEC, SPEC_PATHS))
def test_any_adaptive_spec_validates_or_is_refused_per_field(discovery, spec: dict) -> None:
    try:
        adaptive_validate(spec=spec)
    except ValidationFailed as refusal:
        assert_refused_with_messages(refusal)
    assert not Recipe.objects.exists()


@pytest.mark.parametrize("path", ["/api/analyses/test.ages/recipes/", "/api/adaptive-runs/"])
@FUZZ
@given(body=json_values)
def test_the_api_answers_any_json_body_without_a_server_error(api, analysis, path: str, body) -> None:
    # Sent as raw text: json.dumps writes NaN and Infinity as a careless client would.
    response = api.post(path, json.dumps(body), content_type="application/json")
    assert response.status_code < 500, response.content
    if response.status_code == 400:
        assert response.json()
