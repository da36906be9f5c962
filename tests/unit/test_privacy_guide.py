"""The parameter guide: linked from every privacy field of the editor, its calculator's figures
are the calculators' (analyses.calculators), and its worked example is computed, not typed in."""

from __future__ import annotations

import re

import pytest

from analyses import calculators
from analyses.pages.guide import EXAMPLE

pytestmark = pytest.mark.django_db

GUIDE = "/guide/privacy/"


def test_every_privacy_field_of_the_editor_links_to_its_entry_in_the_guide(client, analysis, analyst) -> None:
    client.force_login(analyst)
    page = client.get("/analyses/test.ages/").content.decode()
    guide = client.get(GUIDE).content.decode()
    for name in ("noise", "mechanism", "epsilon0", "epsilon", "delta", "sampling_rate", "min_cohort"):
        assert f'href="{GUIDE}#{name}"' in page, name
        assert f'id="{name}"' in guide, name


def test_the_guide_explains_each_parameter_and_computes_its_worked_example(client, analyst) -> None:
    client.force_login(analyst)
    page = client.get(GUIDE).content.decode()
    for term in ("Local epsilon (ε₀)", "Aggregate epsilon (ε)", "Delta (δ)", "Sampling rate (q)", "Minimum cohort"):
        assert term in page
    enforced = calculators.privacy_min_cohort(epsilon0=3, epsilon=1, delta=1e-6, mechanism="asymmetric_ohe")
    closed = calculators.privacy_min_cohort(epsilon0=3, epsilon=1, delta=1e-6, method="closed-form")
    example = page[page.index('id="example"') : page.index('id="calculator"')]
    assert f"<strong>{enforced['min_cohort']:,}</strong> reports" in example
    assert f"{closed['min_cohort']:,}" in example
    assert "About 50,000 devices are asked" in example
    assert EXAMPLE["fleet"] == "100000"


def test_the_calculator_answers_what_is_asked_with_the_enforced_minimum_cohort(client, analyst) -> None:
    client.force_login(analyst)
    asked = {**EXAMPLE, "epsilon0": "4", "epsilon": "0.5", "sampling_rate": "0.01"}
    page = client.get(GUIDE, asked).content.decode()
    enforced = calculators.privacy_min_cohort(epsilon0=4, epsilon=0.5, delta=1e-6, mechanism="asymmetric_ohe")
    assert re.search(rf'id="calc-min-cohort">{enforced["min_cohort"]:,} reports<', page)
    assert 'id="calc-expected">1,000<' in page
    assert "Too few: nothing would be released" in page


def test_the_calculator_names_each_bad_value_by_its_field(client, analyst) -> None:
    client.force_login(analyst)
    response = client.get(GUIDE, {**EXAMPLE, "epsilon": "0", "sampling_rate": "2", "fleet": "many"})
    page = response.content.decode()
    assert response.status_code == 200
    assert 'id="calc-epsilon-error">Must be greater than 0.<' in page
    assert 'id="calc-sampling_rate-error">Must be a number above 0 and at most 1.<' in page
    assert 'id="calc-fleet-error">A number is required.<' in page
    assert 'id="calc-min-cohort"' not in page


def test_the_guide_needs_sign_in(client) -> None:
    response = client.get(GUIDE)
    assert response.status_code == 302 and response["Location"].startswith("/login/")
