"""The round list reads every row's progress in one query, however many rounds it shows."""

from __future__ import annotations

from django.db import connection
from django.test.utils import CaptureQueriesContext

from analyses.models import Recipe, Round
from analyses.services.rounds import round_progress
from privacy.parameters import PrivacyParameters


def _rounds(analysis, analyst, count: int) -> list[Round]:
    recipe = Recipe.objects.create(
        analysis=analysis,
        identifier="listed",
        content={},
        encoded_field="age",
        privacy=PrivacyParameters(
            noise="client",
            mechanism="asymmetric_ohe",
            epsilon0=2.0,
            epsilon=0.3,
            delta=1e-6,
            sampling_rate=1.0,
            min_cohort=100,
        ),
        created_by=analyst,
    )
    return [Round.objects.create(recipe=recipe, seed=i, created_by=analyst) for i in range(count)]


def _list_queries(api) -> int:
    with CaptureQueriesContext(connection) as queries:
        assert api.get("/api/rounds/").status_code == 200
    return len(queries)


def test_the_round_list_costs_the_same_queries_for_two_rounds_as_for_twelve(api, analysis, analyst) -> None:
    _rounds(analysis, analyst, 2)
    two = _list_queries(api)
    Round.objects.all().delete()
    Recipe.objects.all().delete()
    _rounds(analysis, analyst, 12)
    assert _list_queries(api) == two


def test_listed_progress_is_each_rounds_own(api, analysis, analyst) -> None:
    rounds = _rounds(analysis, analyst, 3)
    listed = {row["id"]: row["progress"] for row in api.get("/api/rounds/").json()["results"]}
    for round_ in rounds:
        expected = {k: v for k, v in round_progress(round_).items() if k not in ("status", "error")}
        assert {k: v for k, v in listed[round_.pk].items() if k != "elapsed_seconds"} == {
            k: v for k, v in expected.items() if k != "elapsed_seconds"
        }
