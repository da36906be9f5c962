"""A plan's refusal says what was used and what was only planned (issue 31, item 8): a plan of three
rounds on an analysis allowing two reports, none used yet, is refused at its third round without
claiming the reports were used."""

from __future__ import annotations

import copy

import pytest

from analyses.services.budget import budget_plan_refusal, budget_request_for, reports_used_up
from analyses.services.recipes import recipe_validate
from analyses.services.rounds import round_create_and_start

pytestmark = pytest.mark.django_db


def _request(analysis, recipe, epsilon: float):
    content = copy.deepcopy(recipe)
    content["privacy"]["epsilon"] = epsilon
    parsed = recipe_validate(analysis=analysis, content=content)
    return budget_request_for(parsed.privacy, parsed.field, parsed.encoding.size)


def test_a_plan_beyond_the_reports_says_they_are_planned_not_used(analysis, recipe) -> None:
    index, reasons = budget_plan_refusal(analysis, "age", [_request(analysis, recipe, 0.5)] * 3)
    assert index == 2
    assert reasons == [
        "The analysis allows each device 2 reports: the rounds started and the 2 rounds of this plan "
        "before this one take them all, so none is left for this round."
    ]
    assert not any("has used" in reason for reason in reasons)


def test_reports_really_used_are_said_used(analysis, analyst, recipe, django_capture_on_commit_callbacks) -> None:
    request = _request(analysis, recipe, 0.5)
    for name in ("one", "two"):
        content = copy.deepcopy(recipe) | {"recipeIdentifier": name}
        content["privacy"]["epsilon"] = 0.5
        with django_capture_on_commit_callbacks(execute=True):
            round_create_and_start(analysis=analysis, content=content, user=analyst)
    index, reasons = budget_plan_refusal(analysis, "age", [request])
    assert index == 0 and reasons[0].startswith("The analysis has used all 2 of its reports")


def test_the_words_count_reports_and_rounds_in_the_singular_too() -> None:
    assert reports_used_up("Field age", 1, planned=1) == (
        "Field age allows each device 1 report: the rounds started and the 1 round of this plan before "
        "this one take them all, so none is left for this round."
    )


@pytest.mark.parametrize(
    ("value", "said"), [(1, "1 report"), (0, "0 reports"), (2, "2 reports"), (100_000, "100,000 reports")]
)
def test_a_count_of_reports_is_never_1_reports(value, said) -> None:
    from analyses.templatetags.numbers import counted

    assert counted(value, "report") == said
