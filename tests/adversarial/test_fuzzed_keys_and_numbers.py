"""Fuzzing recipes through the API with unknown keys and extreme numbers (hypothesis, derandomized):
never a server error, never a budget moved, and a refusal names the key at fault."""

from __future__ import annotations

import copy
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from analyses.models import Recipe, Round
from devices.models import ShardLedger
from tests.conftest import RECIPE

FUZZ = settings(
    max_examples=120,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

extreme_numbers = st.sampled_from(
    [0, -1, 1e-300, 5e-324, 1e300, 1.7976931348623157e308, 10**30, -(10**30), 2**53 + 1, 2**63, 1e-15, 20.0001]
) | st.floats(allow_nan=False, allow_infinity=False)
NUMBER_PATHS = [
    ("privacy", "epsilon0"),
    ("privacy", "epsilon"),
    ("privacy", "delta"),
    ("privacy", "samplingRate"),
    ("privacy", "minCohort"),
]
KEY_PLACES = [(), ("privacy",), ("dataTypeContent",), ("dataTypeContent", "age")]
# Near misses of real keys, and anything at all.
unknown_keys = st.sampled_from(
    ["samplingrate", "sampling_rate", "epsilon_0", "Epsilon", "mincohort", "cohort", "boundary", "noize"]
) | st.text(min_size=1, max_size=10)


@st.composite
def hostile_recipes(draw) -> dict:
    recipe = copy.deepcopy(RECIPE)
    for path in draw(st.lists(st.sampled_from(NUMBER_PATHS), max_size=3, unique=True)):
        recipe[path[0]][path[1]] = draw(extreme_numbers)
    for place in draw(st.lists(st.sampled_from(KEY_PLACES), max_size=2)):
        parent = recipe
        for key in place:
            parent = parent[key]
        key = draw(unknown_keys)
        if key not in parent:
            parent[key] = draw(st.integers() | st.floats() | st.text(max_size=5))
    return recipe


@pytest.mark.django_db
@FUZZ
@given(recipe=hostile_recipes())
def test_hostile_recipes_never_break_the_api_nor_move_a_budget(api, analysis, recipe: dict) -> None:
    for endpoint in ("recipes/validate/", "dry-run/", "recipes/"):
        response = api.post(f"/api/analyses/test.ages/{endpoint}", json.dumps(recipe), content_type="application/json")
        assert response.status_code < 500, response.content
        if response.status_code == 400 and response.json()["code"] != "parse_error":  # NaN is not JSON
            fields = response.json()["fields"]
            assert fields and all(messages for messages in fields.values())
    assert not ShardLedger.objects.exists() and not Round.objects.exists()
    Recipe.objects.all().delete()  # a valid one was stored: the next example starts clean
