"""The start form of an adaptive run: its fields make the spec (no JSON needed), a vocabulary comes
from a list or a file, the budget plan is shown before the start, and errors land by their field."""

from __future__ import annotations

import json

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from analyses.models import AdaptiveRun, Round
from analyses.services.policy import analysis_approve
from devices.synthetic import TOKENS

pytestmark = pytest.mark.django_db

START = "/analyses/t.discovery/adaptive/"
FIELDS = {
    "source": "form",
    "kind": "ngram_discovery",
    "field": "ngrams",
    "unit": "word",
    "vocabulary": "\n".join(TOKENS[:40]),
    "rounds": "2",
    "mechanism": "asymmetric_ohe",
    "epsilon0": "4",
    "epsilon_per_round": "1",
    "delta": "1e-6",
    "sampling_rate": "1",
    "z_score": "3",
    "max_per_level": "10",
    "document": "",
}


@pytest.fixture
def alice(client, analyst):
    client.force_login(analyst)
    return client


def test_the_start_page_offers_the_form_with_the_example_and_its_json(alice, discovery) -> None:
    response = alice.get(START)
    form = response.context["form"]
    assert form["kind"].value() == "ngram_discovery" and form["field"].value() == "ngrams"
    assert form["rounds"].value() == 3 and form["epsilon_per_round"].value() == 1.0
    assert form["vocabulary"].value().startswith(", ".join(TOKENS[:3]))
    spec = json.loads(form["document"].value())
    assert spec["unit"] == "word" and spec["vocabulary"] == list(TOKENS)
    page = response.content.decode()
    assert 'href="/guide/privacy/#epsilon"' in page and 'name="vocabulary_file"' in page


def test_checking_the_plan_shows_every_round_and_starts_nothing(alice, discovery) -> None:
    response = alice.post(START, {**FIELDS, "action": "check"})
    assert response.status_code == 200
    plan = response.context["plan"]
    assert [(row["round"], row["epsilon"], row["delta"]) for row in plan["rows"]] == [(1, 1.0, 1e-6), (2, 1.0, 1e-6)]
    assert plan["epsilon"] == 2.0 and plan["analysis_left"] == 3.0 and plan["reports_left"] == 3
    assert plan["rows"][0]["min_cohort"] == 2203  # tests/conftest.py: epsilon0 4, epsilon 1, delta 1e-6
    page = response.content.decode()
    assert "The plan fits: it spends ε 2 of the 3 left for the analysis" in page
    assert not AdaptiveRun.objects.exists() and not Round.objects.exists()


def test_the_fields_start_a_run_without_any_json(alice, discovery, django_capture_on_commit_callbacks) -> None:
    with django_capture_on_commit_callbacks(execute=False):
        response = alice.post(START, {**FIELDS, "action": "start"})
    assert response.status_code == 302
    run = AdaptiveRun.objects.get()
    assert run.spec["vocabulary"] == list(TOKENS[:40])
    assert run.spec["maxLength"] == 2 and run.spec["threshold"] == {"zScore": 3.0, "maxPerLevel": 10}
    assert run.spec["privacy"] == {
        "mechanism": "asymmetric_ohe",
        "epsilon0": 4.0,
        "epsilonPerRound": 1.0,
        "delta": 1e-6,
        "samplingRate": 1.0,
    }


def test_a_vocabulary_file_replaces_the_list(alice, discovery, django_capture_on_commit_callbacks) -> None:
    upload = SimpleUploadedFile("words.txt", "\n".join(TOKENS[:30]).encode(), content_type="text/plain")
    with django_capture_on_commit_callbacks(execute=False):
        response = alice.post(START, {**FIELDS, "vocabulary": "", "vocabulary_file": upload, "action": "start"})
    assert response.status_code == 302
    assert AdaptiveRun.objects.get().spec["vocabulary"] == list(TOKENS[:30])


def test_a_plan_over_the_budget_is_refused_under_epsilon_per_round(alice, discovery, officer) -> None:
    # Basic composition: 2 + 2 is over the allowance of 3 (the tightest accountant's PLD account
    # composes two such rounds within it, at delta' = 1e-5).
    discovery.accountant = "basic"
    discovery.save(update_fields=["accountant"])
    analysis_approve(analysis=discovery, officer=officer)
    response = alice.post(START, {**FIELDS, "rounds": "2", "epsilon_per_round": "2", "action": "check"})
    assert response.status_code == 400
    errors = response.context["form"].errors
    assert list(errors) == ["epsilon_per_round"]
    assert errors["epsilon_per_round"][0].startswith("The budget plan exceeds the policy of t.discovery at round 2")
    assert response.context["plan"] is None


def test_a_planned_rounds_error_names_the_round_under_its_field(alice, discovery) -> None:
    response = alice.post(START, {**FIELDS, "epsilon0": "5", "action": "check"})
    errors = response.context["form"].errors
    assert errors["epsilon0"][0].startswith("Round 1: Above the local epsilon cap of 4 for ngrams")
    assert not AdaptiveRun.objects.exists()


def test_a_discovery_without_vocabulary_is_refused_under_the_vocabulary(alice, discovery) -> None:
    response = alice.post(START, {**FIELDS, "vocabulary": " , \n", "action": "start"})
    assert response.context["form"].errors == {"vocabulary": ["Give the words n-grams are made of: a list, or a file."]}
    assert not AdaptiveRun.objects.exists()


def test_the_json_side_still_starts_as_written(alice, discovery, django_capture_on_commit_callbacks) -> None:
    spec = {
        "analysis": "t.discovery",
        "kind": "ngram_discovery",
        "field": "ngrams",
        "vocabulary": list(TOKENS[:20]),
        "maxLength": 1,
        "privacy": {"mechanism": "asymmetric_ohe", "epsilon0": 4.0, "epsilonPerRound": 1.0, "delta": 1e-6},
        "threshold": {"zScore": 3.0},
    }
    with django_capture_on_commit_callbacks(execute=False):
        response = alice.post(START, {**FIELDS, "epsilon0": "oops", "source": "json", "document": json.dumps(spec)})
    assert response.status_code == 302
    assert AdaptiveRun.objects.get().spec == spec


def test_start_from_the_page_asks_first_with_the_plan_and_starts_on_the_go_ahead(
    alice, discovery, django_capture_on_commit_callbacks
) -> None:
    asked = alice.post(START, {**FIELDS, "action": "start", "ask_before_spending": "1"})
    assert asked.status_code == 200
    page = asked.content.decode()
    assert "Start this run and spend its budget?" in page
    assert "The plan: 2 rounds, ε 2 in all of the 3 left for the analysis, and 2 of its 3 reports" in page
    assert not AdaptiveRun.objects.exists() and not Round.objects.exists()
    with django_capture_on_commit_callbacks(execute=False):
        started = alice.post(START, {**FIELDS, "action": "start-confirmed", "ask_before_spending": "1"})
    assert started.status_code == 302 and AdaptiveRun.objects.count() == 1
