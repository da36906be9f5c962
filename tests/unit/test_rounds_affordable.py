"""The analysis page says how many more rounds of the last recipe the remaining budget affords, by
the analysis's accountant (the tightest composition by default), as devices would count them."""

from __future__ import annotations

import copy

import pytest

from analyses.models import Round
from analyses.services.budget import recipe_budget_request, rounds_affordable
from analyses.services.policy import analysis_approve, analysis_create
from analyses.services.rounds import round_create_and_start
from privacy.composition import ApproximateDP, advanced_composition
from tests.conftest import FLEET_SIZE, RECIPE, SPEC

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
    # The PLD account composes the rounds' clone pairs (ε0 = 0.5 over thousands of reports): far more
    # than advanced composition's, beyond the page's count of 200.
    assert rounds_affordable(analysis, recipe_budget_request(Round.objects.get().recipe), composition="advanced") == (
        total - 1
    )
    assert "<strong>at least 200</strong> by tightest of basic, advanced, Rényi DP and PLD composition" in shown
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


def test_devices_answer_the_rounds_the_tightest_accountant_affords_beyond_the_plain_sum(
    fleet, analyst, officer, django_capture_on_commit_callbacks
) -> None:
    """Aggregator-noise rounds of epsilon 0.1 on a budget of 0.5: the plain sum affords 5, Renyi
    composition of the discrete Gaussians' curves more. The server's count, its pre-check and every
    device agree: the 6th round releases all 5,000 devices, and the round after the count is refused."""
    from analyses.models import Round
    from pfs_base.errors import ValidationFailed

    spec = copy.deepcopy(POLICY)
    spec["budget"] = {"epsilon": 0.5, "reports": 100, "delta": 1e-6}
    spec["fields"]["age"] = {"localEpsilon": 1.0, "epsilon": 0.5, "reports": 100, "aggregatorNoise": True}
    analysis = analysis_approve(analysis=analysis_create(spec=spec, owner=analyst), officer=officer)
    content = {
        **copy.deepcopy(RECIPE),
        "AnalysisIdentifier": "t.small-steps",
        "privacy": {"noise": "aggregator", "epsilon": 0.1, "delta": 1e-6, "minCohort": 1000},
    }

    def named(index: int) -> dict:
        return {**copy.deepcopy(content), "recipeIdentifier": f"step-{index}"}

    with django_capture_on_commit_callbacks(execute=True):
        first = round_create_and_start(analysis=analysis, content=named(0), user=analyst)
    request = recipe_budget_request(first.recipe)
    more = rounds_affordable(analysis, request)
    assert rounds_affordable(analysis, request, composition="basic") == 4 and more > 4
    for index in range(1, more + 1):
        with django_capture_on_commit_callbacks(execute=True):
            round_ = round_create_and_start(analysis=analysis, content=named(index), user=analyst)
        round_.refresh_from_db()
        assert round_.status == Round.Status.RELEASED and round_.release.content["reports"] == FLEET_SIZE
    assert rounds_affordable(analysis, request) == 0
    with pytest.raises(ValidationFailed) as refused:
        round_create_and_start(analysis=analysis, content=named(more + 1), user=analyst)
    assert "Exceeds the analysis budget" in refused.value.errors["privacy.epsilon"][0]
