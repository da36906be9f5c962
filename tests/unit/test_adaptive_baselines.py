"""Issue 31, item 7: the start form's static baseline offers only analyses a start would accept
(the one rule, analyses.adaptive.spec.baseline_refusal), and the page's plan knows each one's budget."""

from __future__ import annotations

import copy
import json

import pytest

from analyses.models import AdaptiveRun
from analyses.services.policy import analysis_approve, analysis_create
from tests.conftest import DISCOVERY_POLICY, DISCOVERY_SPEC

pytestmark = pytest.mark.django_db


def _policy(identifier: str, **changes) -> dict:
    return {**copy.deepcopy(DISCOVERY_POLICY), "identifier": identifier, **changes}


@pytest.fixture
def others(discovery, analyst, officer) -> None:
    """On the same fleet as t.discovery: one analysis that can hold its baseline, and three that cannot."""
    analysis_approve(analysis=analysis_create(spec=_policy("t.static"), owner=analyst), officer=officer)
    ages = _policy(
        "t.ages",
        queryClass={"stream": "KeyboardNGrams", "fields": ["age"], "cohortFields": ["locale"]},
        fields={"age": {"localEpsilon": 4.0, "epsilon": 3.0, "reports": 3}},
    )
    analysis_approve(analysis=analysis_create(spec=ages, owner=analyst), officer=officer)
    analysis_create(spec=_policy("t.draft"), owner=analyst)  # never approved


def _start_page(client, analyst):
    client.force_login(analyst)
    return client.get("/analyses/t.discovery/adaptive/")


def test_the_baseline_dropdown_offers_only_analyses_a_start_would_accept(client, analyst, others) -> None:
    response = _start_page(client, analyst)
    assert [value for value, _ in response.context["form"].fields["baseline"].choices] == ["", "t.static"]
    offered = json.loads(
        response.content.decode().split('id="spec-baselines" type="application/json">')[1].split("<")[0]
    )
    assert offered == {
        "t.static": {"fields": ["ngrams"], "left": 3.0, "reports_left": 3, "fields_left": {"ngrams": 3.0}}
    }


@pytest.mark.parametrize(
    ("baseline", "reason"),
    [
        ("t.ages", "t.ages has no policy for the field ngrams: its query class does not read it."),
        ("t.draft", "t.draft is not approved by a privacy officer yet: its rounds cannot start."),
    ],
)
def test_an_analysis_left_out_of_the_dropdown_is_refused_by_the_start_for_the_same_reason(
    client, analyst, others, baseline, reason
) -> None:
    client.force_login(analyst)
    spec = {**copy.deepcopy(DISCOVERY_SPEC), "baseline": {"analysis": baseline, "rows": 2, "columns": 256}}
    response = client.post("/analyses/t.discovery/adaptive/", {"document": json.dumps(spec), "action": "check"})
    assert response.status_code == 400
    assert f"baseline.analysis: {reason}" in response.content.decode()
    assert not AdaptiveRun.objects.exists()


def _synced(spec: dict, **fields: str) -> dict:
    """What the page's script posts: the JSON as the spec, and the fields showing the same values."""
    return {
        "source": "json",
        "document": json.dumps(spec),
        "kind": spec["kind"],
        "field": spec["field"],
        "unit": "word",
        "vocabulary": ", ".join(spec["vocabulary"]),
        "rounds": str(spec["maxLength"]),
        "mechanism": spec["privacy"]["mechanism"],
        "epsilon0": str(spec["privacy"]["epsilon0"]),
        "epsilon_per_round": str(spec["privacy"]["epsilonPerRound"]),
        "delta": str(spec["privacy"]["delta"]),
        "sampling_rate": "1",
        "z_score": str(spec["threshold"]["zScore"]),
        "max_per_level": str(spec["threshold"]["maxPerLevel"]),
        **fields,
    }


def test_an_over_budget_plan_posted_as_json_comes_back_under_its_field_focused(client, analyst, discovery) -> None:
    """Issue 31, item 6: the error was by the JSON box, ~2,000 px down, and the focus on the body."""
    client.force_login(analyst)
    spec = {**copy.deepcopy(DISCOVERY_SPEC), "maxLength": 4, "unit": "word"}  # 4 rounds: 3 reports left
    response = client.post("/analyses/t.discovery/adaptive/", {**_synced(spec), "action": "check"})
    assert response.status_code == 400
    form = response.context["form"]
    assert list(form.errors) == ["epsilon_per_round"]
    assert form.errors["epsilon_per_round"][0].startswith("The budget plan exceeds the policy of t.discovery")
    page = response.content.decode()
    control = page[page.index('name="epsilon_per_round"') - 200 : page.index('name="epsilon_per_round"') + 200]
    assert "autofocus" in control and 'aria-describedby="id_epsilon_per_round_error' in control
    assert page.count("autofocus") == 1
    assert not AdaptiveRun.objects.exists()


def test_a_baseline_over_its_own_budget_comes_back_under_the_baseline_field(
    client, analyst, discovery, officer
) -> None:
    client.force_login(analyst)
    small = _policy("t.small", budget={"epsilon": 1.0, "reports": 3, "delta": 1e-5})
    analysis_approve(analysis=analysis_create(spec=small, owner=analyst), officer=officer)
    spec = {**copy.deepcopy(DISCOVERY_SPEC), "maxLength": 2, "unit": "word"}
    spec["baseline"] = {"analysis": "t.small"}
    response = client.post("/analyses/t.discovery/adaptive/", {**_synced(spec, baseline="t.small"), "action": "check"})
    assert response.status_code == 400
    form = response.context["form"]
    assert list(form.errors) == ["baseline"]
    assert form.errors["baseline"][0].startswith("Baseline: The budget plan exceeds the policy of t.small")
    assert not AdaptiveRun.objects.exists()


def test_the_example_spec_names_its_static_twin_only_when_a_start_would_accept_it(
    client, analyst, discovery, officer
) -> None:
    twin = analysis_create(spec=_policy("t.discovery-static"), owner=analyst)  # not approved yet
    spec = json.loads(_start_page(client, analyst).context["form"]["document"].value())
    assert "baseline" not in spec
    analysis_approve(analysis=twin, officer=officer)
    spec = json.loads(_start_page(client, analyst).context["form"]["document"].value())
    assert spec["baseline"]["analysis"] == "t.discovery-static"
