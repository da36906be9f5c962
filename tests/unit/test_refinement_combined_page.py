"""A bucket refinement ends with one combined histogram (issue 31, item 12): every round pooled over
the last round's buckets, in the API's output and on the run's page, never less precise than the
last round alone."""

from __future__ import annotations

import copy

import pytest

from analyses.adaptive.chain import adaptive_start
from analyses.adaptive.presenters import adaptive_output
from tests.unit.test_adaptive import REFINEMENT, run_to_end, words  # noqa: F401 (fixtures)

pytestmark = pytest.mark.django_db


def test_a_finished_refinement_shows_every_round_pooled(words, analyst, run_to_end, client) -> None:  # noqa: F811
    run = run_to_end(adaptive_start, spec=copy.deepcopy(REFINEMENT), user=analyst)
    combined = adaptive_output(run)["combined"]
    last = run.levels[-1]["histogram"]
    assert combined["available"] and combined["rounds"] == 2
    assert [b["bucket"] for b in combined["buckets"]] == [b["bucket"] for b in last]
    pooled = [b["standard_error"] for b in combined["buckets"]]
    alone = [b["standard_error"] for b in last]
    assert all(p <= a + 1e-9 for p, a in zip(pooled, alone)) and any(p < a for p, a in zip(pooled, alone))

    client.force_login(analyst)
    page = client.get(f"/adaptive/{run.pk}/").content.decode()
    section = page[page.index('id="combined"') :]
    assert "All 2 rounds pooled: one histogram" in section
    assert section.count("<tr><td>") >= len(last) and "[37.5, 50)" in section
    assert 'id="level-combined-chart"' in section
    # The first bucket said as what it holds, on the rounds' tables too (issue 31, item 8: no raw "OOV").
    assert "<tr><td>below 0 or missing</td>" in section and "<td>OOV</td>" not in page
