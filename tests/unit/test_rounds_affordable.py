"""The analysis page says how many more rounds of the last recipe the remaining budget affords, by
the analysis's accountant (the tightest composition by default), as devices would count them."""

from __future__ import annotations

import copy

import pytest

from analyses.services.policy import analysis_approve, analysis_create
from analyses.services.rounds import round_create_and_start
from privacy.composition import ApproximateDP, advanced_composition
from tests.conftest import RECIPE, SPEC

pytestmark = pytest.mark.django_db

# Many small queries: advanced composition affords far more of them than basic.
POLICY = {
    **copy.deepcopy(SPEC),
    "identifier": "t.small-steps",
    "budget": {"epsilon": 4.0, "reports": 1000, "delta": 1e-6},
    "fields": {"age": {"localEpsilon": 1.0, "epsilon": 4.0, "reports": 1000}},
}
SMALL = {"mechanism": "asymmetric_ohe", "epsilon0": 0.5, "epsilon": 0.05, "delta": 1e-6, "samplingRate": 1.0}


def _recipe() -> dict:
    return {**copy.deepcopy(RECIPE), "AnalysisIdentifier": "t.small-steps", "privacy": dict(SMALL)}


def _advanced_rounds(epsilon: float, allowed: float, delta: float) -> int:
    """Largest k with the advanced composition of k epsilon-DP steps within ``allowed``."""
    k = 1
    while advanced_composition(ApproximateDP(epsilon), k + 1, delta).epsilon <= allowed:
        k += 1
    return k


def test_the_page_shows_the_rounds_the_remaining_budget_affords_by_the_tightest_accountant(
    client, fleet, analyst, officer, django_capture_on_commit_callbacks
) -> None:
    analysis = analysis_approve(analysis=analysis_create(spec=copy.deepcopy(POLICY), owner=analyst), officer=officer)
    assert analysis.enforced.accountant == "tightest"  # the default
    client.force_login(analyst)
    assert 'id="rounds-affordable"' not in client.get("/analyses/t.small-steps/").content.decode()  # no round yet
    with django_capture_on_commit_callbacks(execute=True):
        round_create_and_start(analysis=analysis, content=_recipe(), user=analyst)
    page = client.get("/analyses/t.small-steps/").content.decode()
    shown = page[page.index('id="rounds-affordable"') : page.index("</p>", page.index('id="rounds-affordable"'))]
    total = _advanced_rounds(0.05, 4.0, 1e-6)
    assert total > 80  # basic composition: 4 / 0.05 = 80 rounds in all
    assert f"<strong>{total - 1}</strong> by tightest of basic, advanced and rényi dp composition" in shown
    assert "(basic composition alone: 79)" in shown


def test_the_count_stops_at_the_reports_allowed(client, fleet, analyst, officer, django_capture_on_commit_callbacks):
    spec = copy.deepcopy(POLICY)
    spec["budget"]["reports"] = 3
    analysis = analysis_approve(analysis=analysis_create(spec=spec, owner=analyst), officer=officer)
    with django_capture_on_commit_callbacks(execute=True):
        round_create_and_start(analysis=analysis, content=_recipe(), user=analyst)
    client.force_login(analyst)
    page = client.get("/analyses/t.small-steps/").content.decode()
    shown = page[page.index('id="rounds-affordable"') : page.index("</p>", page.index('id="rounds-affordable"'))]
    assert "<strong>2</strong>" in shown and "basic composition alone" not in shown
