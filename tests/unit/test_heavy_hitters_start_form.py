"""The start form's heavy-hitters kind (Poplar1): offered for a text field whose policy allows
aggregator noise and only there, its fields make the spec (no local randomizer), the plan check
shows its one round, a good post starts a walk, and bad values come back under their fields."""

from __future__ import annotations

import copy
import json

import pytest

from analyses.adaptive.spec import adaptive_validate
from analyses.models import AdaptiveRun, Round
from analyses.services.policy import analysis_approve
from privacy.heavy_hitters import DEFAULT_ALPHABET

START = "/analyses/t.hh/adaptive/"
FIELDS = {
    "source": "form",
    "kind": "heavy_hitters",
    "field": "ngrams",
    "max_length": "4",
    "alphabet": DEFAULT_ALPHABET,
    "epsilon": "2",
    "delta": "1e-6",
    "sampling_rate": "1",
    "z_score": "4",
    "max_per_level": "8",
    "document": "",
}
SPEC = {
    "analysis": "t.hh",
    "kind": "heavy_hitters",
    "field": "ngrams",
    "maxLength": 4,
    "alphabet": DEFAULT_ALPHABET,
    "privacy": {"epsilon": 2.0, "delta": 1e-6, "samplingRate": 1.0},
    "threshold": {"zScore": 4.0, "maxPerLevel": 8},
}


pytestmark = pytest.mark.usefixtures("fixed_coins")


@pytest.fixture
def alice(client, analyst):
    client.force_login(analyst)
    return client


def test_the_kind_is_offered_for_a_text_field_that_allows_aggregator_noise(alice, hh_analysis) -> None:
    response = alice.get(START)
    form = response.context["form"]
    assert form.kinds["heavy_hitters"] == ["ngrams"]
    assert dict(form.fields["kind"].choices)["heavy_hitters"] == "heavy hitters, Poplar1 (text, no local noise)"
    assert [value for value, _ in form.fields["field"].choices].count("ngrams") == 1  # listed once for two kinds
    # Switching to the walk on the page finds its own fields filled from its example.
    assert form["max_length"].value() == 8 and form["alphabet"].value() == DEFAULT_ALPHABET
    assert form["epsilon"].value() == 3.0  # the whole field's epsilon: one round
    page = response.content.decode()
    assert 'value="heavy_hitters"' in page and "kind-refused" not in page
    assert 'data-kinds="heavy_hitters"' in page and 'data-kinds="ngram_discovery bucket_refinement"' in page
    assert "Example: heavy hitters (poplar1)" in page and "&quot;maxPerLevel&quot;: 24" in page


def test_the_kind_is_not_offered_without_aggregator_noise_and_the_page_says_why(alice, discovery) -> None:
    response = alice.get("/analyses/t.discovery/adaptive/")
    form = response.context["form"]
    assert "heavy_hitters" not in form.kinds
    assert "heavy_hitters" not in dict(form.fields["kind"].choices)
    page = response.content.decode()
    assert 'id="kind-refused-heavy_hitters"' in page and "does not allow aggregator noise" in page
    # A post of the kind anyway is refused under the kind, and starts nothing.
    posted = alice.post("/analyses/t.discovery/adaptive/", {**FIELDS, "action": "start"})
    assert posted.status_code == 400 and "kind" in posted.context["form"].errors
    assert not AdaptiveRun.objects.exists()


def test_the_fields_make_the_walks_spec_without_the_local_randomizer(alice, hh_analysis) -> None:
    response = alice.post(START, {**FIELDS, "mechanism": "", "epsilon0": "", "action": "check"})
    assert response.status_code == 200, response.context["form"].errors
    form = response.context["form"]
    assert form.spec() == SPEC
    plan = response.context["plan"]
    assert [(row["round"], row["epsilon"], row["delta"]) for row in plan["rows"]] == [(1, 2.0, 1e-6)]
    assert plan["epsilon"] == 2.0 and plan["analysis_left"] == 3.0 and plan["rows"][0]["min_cohort"] > 0
    assert "The plan fits: it spends ε 2 of the 3 left for the analysis" in response.content.decode()
    assert not AdaptiveRun.objects.exists() and not Round.objects.exists()


def test_a_walk_needs_its_length_and_epsilon_and_nothing_of_the_local_noise(alice, hh_analysis) -> None:
    response = alice.post(START, {**FIELDS, "max_length": "", "epsilon": "", "action": "check"})
    errors = response.context["form"].errors
    assert errors == {"max_length": ["This field is required."], "epsilon": ["This field is required."]}


def test_the_other_kinds_still_need_the_local_randomizer(alice, hh_analysis) -> None:
    fields = {**FIELDS, "kind": "ngram_discovery", "vocabulary": "hello, world", "action": "check"}
    errors = alice.post(START, fields).context["form"].errors
    required = ["This field is required."]
    assert errors == {"rounds": required, "mechanism": required, "epsilon0": required, "epsilon_per_round": required}


@pytest.mark.parametrize(
    ("changes", "field", "starts"),
    [
        ({"max_length": "17"}, "max_length", "At most 16 bytes"),
        ({"max_per_level": "500"}, "max_per_level", "(the alphabet's 26 bytes + 1) must be at most 4,096"),
        ({"epsilon": "3.5"}, "epsilon", "Round 1: Exceeds the analysis budget"),  # the policy allows 3
    ],
)
def test_bad_values_come_back_under_their_fields_and_start_nothing(alice, hh_analysis, changes, field, starts) -> None:
    response = alice.post(START, {**FIELDS, **changes, "action": "start"})
    assert response.status_code == 400
    errors = response.context["form"].errors
    assert list(errors) == [field], errors
    assert starts in errors[field][0], errors
    assert not AdaptiveRun.objects.exists() and not Round.objects.exists()


def test_the_json_side_puts_errors_under_the_fields_that_show_them(alice, hh_analysis) -> None:
    spec = {**SPEC, "maxLength": 17}
    posted = {**FIELDS, "max_length": "17", "source": "json", "document": json.dumps(spec), "action": "check"}
    errors = alice.post(START, posted).context["form"].errors
    assert list(errors) == ["max_length"] and errors["max_length"][0].startswith("At most 16 bytes")
    # An alphabet no field shows as the JSON has it (the field's blank is the default): by the JSON.
    errors = alice.post(START, {**posted, "document": json.dumps({**SPEC, "alphabet": ""})}).context["form"].errors
    assert list(errors) == ["document"] and errors["document"][0].startswith("alphabet: Alphabet must be")
    # A key no field shows is named in the JSON's errors.
    spec = {**SPEC, "privacy": {**SPEC["privacy"], "epsilon0": 4.0}}
    errors = alice.post(START, {**posted, "document": json.dumps(spec)}).context["form"].errors
    assert list(errors) == ["document"] and errors["document"][0].startswith("privacy.epsilon0: ")
    assert not AdaptiveRun.objects.exists()


def test_an_alphabets_problem_goes_under_the_alphabet(alice, hh_analysis) -> None:
    response = alice.post(START, {**FIELDS, "action": "check"})
    form = response.context["form"]
    form.add_problems({"alphabet": ["Alphabet must be a non-empty string of the characters words hold."]})
    assert form.errors["alphabet"] == ["Alphabet must be a non-empty string of the characters words hold."]


def test_a_walk_over_what_running_runs_planned_is_refused_under_its_epsilon(alice, hh_analysis, officer) -> None:
    # Basic composition: a planned walk at 2 and this one at 2 are over the allowance of 3.
    hh_analysis.accountant = "basic"
    hh_analysis.save(update_fields=["accountant"])
    analysis_approve(analysis=hh_analysis, officer=officer)
    planned = adaptive_validate(spec=copy.deepcopy(SPEC)).plan
    AdaptiveRun.objects.create(
        analysis=hh_analysis, kind="heavy_hitters", spec=SPEC, plan=planned, created_by=hh_analysis.owner
    )
    response = alice.post(START, {**FIELDS, "action": "start"})
    errors = response.context["form"].errors
    assert list(errors) == ["epsilon"], errors
    assert errors["epsilon"][0].startswith("The budget plan exceeds the policy of t.hh at round 1 of 1")
    assert AdaptiveRun.objects.count() == 1 and not Round.objects.exists()


def test_the_form_starts_a_walk_that_finishes(alice, hh_analysis, django_capture_on_commit_callbacks) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        response = alice.post(START, {**FIELDS, "action": "start"})
    run = AdaptiveRun.objects.get()
    assert response.status_code == 302 and response.url == f"/adaptive/{run.pk}/"
    assert run.kind == "heavy_hitters" and run.spec == SPEC
    assert run.status == AdaptiveRun.Status.FINISHED, run.stop_reason
    assert {"hell", "worl"} <= {w["word"] for w in Round.objects.get().release.content["walk"]["words"]}
