"""Issue 31, item 9: the officer's analyses list says what each analysis has spent (the budget
page's statement), and the device lookup says which id format it expects and takes a bare number."""

from __future__ import annotations

import pytest

from analyses.services.budget import analysis_guarantees
from analyses.services.rounds import round_create_and_start
from analyses.templatetags.figures import figure

pytestmark = pytest.mark.django_db

AUDIT = "/admin/devices/fleet/{pk}/audit/"


def test_the_analyses_list_shows_the_spent_statement_of_the_budget_page(
    client, analysis, recipe, analyst, officer, django_capture_on_commit_callbacks
) -> None:
    client.force_login(officer)
    assert "ε 0, δ 0" in client.get("/admin/analyses/analysis/").content.decode()  # nothing started yet
    with django_capture_on_commit_callbacks(execute=True):
        round_create_and_start(analysis=analysis, content=recipe, user=analyst)
    spent = analysis_guarantees(analysis)[None]
    page = client.get("/admin/analyses/analysis/").content.decode()
    assert "Spent (ε, δ)" in page
    assert f'<td class="field-spent">ε {figure(spent.epsilon)}, δ {figure(spent.delta)}</td>' in page
    assert 0.9 < spent.epsilon <= 1.0  # at most the recipe's ε (the PLD account composes tighter)
    assert '<td class="field-budget">ε 2, 2 reports, δ 0.000001</td>' in page


def test_the_device_lookup_says_the_id_format_and_takes_a_bare_number(
    client, analysis, recipe, analyst, officer, django_capture_on_commit_callbacks
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        round_create_and_start(analysis=analysis, content=recipe, user=analyst)
    client.force_login(officer)
    form = client.get(AUDIT.format(pk=analysis.fleet.pk)).content.decode()
    assert "Ids in this fleet look like <code>d0</code>" in form and "Typing the number alone (42) finds" in form
    page = client.get(AUDIT.format(pk=analysis.fleet.pk), {"device": "7"}).content.decode()
    assert "Device d7 of fleet small" in page and "select age from KeyboardNGrams" in page
    by_id = client.get(AUDIT.format(pk=analysis.fleet.pk), {"device": "d7"}).content.decode()
    assert (
        page[page.index("<table>") : page.index("</table>")] == by_id[by_id.index("<table>") : by_id.index("</table>")]
    )


def test_an_unknown_device_is_refused_with_the_format_it_expects(client, analysis, officer) -> None:
    client.force_login(officer)
    page = client.get(AUDIT.format(pk=analysis.fleet.pk), {"device": "device-42"}).content.decode()
    assert "No device &#x27;device-42&#x27; in fleet small. Its ids look like d0 (the first of them)." in page
    assert "Device device-42 of fleet" not in page
