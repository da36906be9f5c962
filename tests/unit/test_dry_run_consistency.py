"""Issue 31, item 2: the dry run's headline and its table say the same thing about each batch.

Split by locale with a minimum cohort only en_US reaches, the headline said "nothing would be
released" while the table said en_US would be. Both now read one verdict per batch."""

from __future__ import annotations

import re

import pytest

pytestmark = pytest.mark.django_db

FORM = {
    "field": "age",
    "boundaries": "20, 30, 40, 50, 60, 70, 80",
    "cohorts": ["locale"],
    "noise": "client",
    "mechanism": "asymmetric_ohe",
    "epsilon0": "2",
    "epsilon": "1",
    "delta": "1e-6",
    "sampling_rate": "1",
    "source": "form",
    "action": "dry-run",
}
BELOW = ["locale=de_DE", "locale=en_GB", "locale=es_ES", "locale=fr_FR"]


def _dry_run(client, analyst, min_cohort: str, **changed: str) -> tuple[str, str, dict[str, str]]:
    client.force_login(analyst)
    page = client.post("/analyses/test.ages/", {**FORM, "min_cohort": min_cohort, **changed}).content.decode()
    start = page.index('id="messages"')
    top = page[start : page.index("</div>", start)]
    box = page[page.index('id="dry-run"') :]
    headline = box[: box.index("</p>")]
    table = box[box.index('id="dry-run-cohorts"') : box.index("</table>")]
    rows = dict(re.findall(r"<tr><td>([^<]+)</td><td class=\"num\">[^<]*</td><td>(.*?)</td></tr>", table))
    return top, headline, rows


def test_a_split_with_one_batch_released_says_so_in_the_headline_and_the_table(client, analyst, analysis) -> None:
    top, headline, rows = _dry_run(client, analyst, "974")
    assert rows["locale=en_US"] == "yes"
    assert all("suppressed" in rows[cohort] for cohort in BELOW)
    assert "nothing would be released" not in headline + top
    for text in (headline, top):
        assert "locale=en_US would be released" in text
        assert ", ".join(BELOW) + " would not: below the minimum cohort of 974" in text


def test_a_split_with_every_batch_below_says_nothing_is_released_and_the_table_agrees(
    client, analyst, analysis
) -> None:
    top, headline, rows = _dry_run(client, analyst, "4000")
    assert len(rows) == 5 and all("suppressed" in verdict for verdict in rows.values())
    assert "nothing would be released" in headline and "nothing would be released" in top


def test_a_split_with_every_batch_large_enough_says_enough_and_the_table_agrees(client, analyst, analysis) -> None:
    top, headline, rows = _dry_run(client, analyst, "", epsilon0="0.5")  # the enforced minimum, under 500
    assert len(rows) == 5 and set(rows.values()) == {"yes"}
    assert "enough for the minimum cohort of" in headline and "enough for the minimum cohort of" in top
