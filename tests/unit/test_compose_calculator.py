"""The composition calculator (issue 30, requirement 3): the service, `manage.py privacy compose`,
/api/privacy/compose/ and the guide's "Composing rounds" section give the same numbers."""

from __future__ import annotations

import json
import math

import pytest
from django.core.management import CommandError, call_command
from rest_framework.test import APIClient

from analyses.calculators import COMPOSE_ROUNDS_MAX, privacy_compose
from analyses.management.commands.privacy import Command
from pfs_base.errors import ValidationFailed
from privacy import pld
from privacy.composition import DEFAULT_ORDERS, ApproximateDP, RenyiDP, advanced_composition, gaussian_rdp, rdp_epsilon
from privacy.shuffling import amplified_epsilon

GAUSSIAN = {"rounds": "10", "delta": "1e-6", "gaussian_sigma": "18.37"}
LAPLACE = {"rounds": "10", "delta": "1e-6", "laplace_scale": "4"}
RECIPE = {"rounds": "5", "delta": "1e-8", "mechanism": "kary_rr", "epsilon0": "3", "n": "20000"}
ACCOUNTANTS = {"pld", "renyi", "advanced", "basic"}


def test_gaussian_noise_over_ten_histogram_rounds_is_decided_by_the_pld() -> None:
    answer = privacy_compose(**GAUSSIAN)
    assert answer["accountant"] == "pld" and answer["epsilon"] == answer["accountants"]["pld"]
    assert set(answer["accountants"]) == ACCOUNTANTS
    # The audit's exact 1.031 (sigma 18.37, two coordinates a round), never below it; within the
    # rounding the answer states (every loss of 20 steps rounded up by one grid step).
    assert 1.0305 <= answer["epsilon"] <= 1.0315 + answer["pld_rounding"]
    curve = gaussian_rdp(18.37, math.sqrt(2), DEFAULT_ORDERS)
    renyi = rdp_epsilon(RenyiDP(DEFAULT_ORDERS, tuple(10 * rho for rho in curve.rhos)), 1e-6)
    assert answer["accountants"]["renyi"] == renyi
    assert answer["sensitivity"] == 2 and answer["release"] == "gaussian"


def test_laplace_noise_basic_composition_is_rounds_times_sensitivity_over_scale() -> None:
    answer = privacy_compose(**LAPLACE)
    assert answer["accountants"]["basic"] == pytest.approx(10 * 2 / 4, rel=1e-12)
    assert answer["accountants"]["basic"] >= 5.0
    assert answer["epsilon"] <= answer["accountants"]["basic"]
    per_round = math.nextafter(0.5, math.inf)  # 2 / 4 rounded up
    assert answer["accountants"]["advanced"] == advanced_composition(ApproximateDP(per_round), 10, 1e-6).epsilon


def test_recipe_rounds_use_the_bound_devices_enforce_for_the_mechanism() -> None:
    answer = privacy_compose(**RECIPE)
    assert answer["method"] == "stronger-2022"
    per_round = amplified_epsilon(3.0, 20000, 1e-8 / 5, method="stronger-2022")
    assert answer["accountants"]["basic"] == pytest.approx(5 * per_round, rel=1e-12)
    expected = pld.shuffled(3.0, 20000, "stronger-2022", interval=answer["pld_interval"]).self_compose(5)
    assert answer["accountants"]["pld"] == expected.epsilon(1e-8)
    assert answer["epsilon"] == min(value for value in answer["accountants"].values() if value is not None)
    hadamard = privacy_compose(**{**RECIPE, "mechanism": "hadamard_response"})
    assert hadamard["method"] == "clones-2020"
    assert hadamard["accountants"]["pld"] > answer["accountants"]["pld"]


def test_one_round_of_a_recipe_agrees_with_the_amplification_bound() -> None:
    answer = privacy_compose(**{**RECIPE, "rounds": "1"})
    reference = amplified_epsilon(3.0, 20000, 1e-8, method="stronger-2022")
    assert (
        reference * (1 - 1e-8) <= answer["accountants"]["pld"] <= reference + answer["pld_rounding"] + 1e-3 * reference
    )


@pytest.mark.parametrize(
    "params",
    [
        {"rounds": str(COMPOSE_ROUNDS_MAX), "delta": "1e-6", "gaussian_sigma": "18.37"},
        {
            "rounds": str(COMPOSE_ROUNDS_MAX),
            "delta": "1e-12",
            "mechanism": "symmetric_rappor",
            "epsilon0": "4",
            "n": "1e8",
        },
        {"rounds": str(COMPOSE_ROUNDS_MAX), "delta": "1e-12", "laplace_scale": "1e6", "sensitivity": "100"},
    ],
)
def test_the_largest_requests_are_answered_within_the_grid_cap(params: dict) -> None:
    # How long they take is measured in bench/results/pld.md (seconds, not timed here).
    answer = privacy_compose(**params)
    assert math.isfinite(answer["epsilon"])


# Refusals: each bad parameter named with its own message.
BAD = [
    (GAUSSIAN, "rounds", "0", "Must be between 1 and 10000."),
    (GAUSSIAN, "rounds", "-3", "Must be between 1 and 10000."),
    (GAUSSIAN, "rounds", "1000000000", "Must be between 1 and 10000."),
    (GAUSSIAN, "rounds", "2.5", "A whole number is required."),
    (GAUSSIAN, "rounds", "nan", "A finite number is required."),
    (GAUSSIAN, "rounds", "", "This parameter is required."),
    (GAUSSIAN, "delta", "0", "Must lie strictly between 0 and 1."),
    (GAUSSIAN, "delta", "1", "Must lie strictly between 0 and 1."),
    (GAUSSIAN, "delta", "1e-13", "Must be at least 1e-12 for composition."),
    (GAUSSIAN, "delta", "NaN", "A finite number is required."),
    (GAUSSIAN, "gaussian_sigma", "0", "Must be greater than 0."),
    (GAUSSIAN, "gaussian_sigma", "0.1", "Must be at least 0.5."),
    (GAUSSIAN, "gaussian_sigma", "1e9", "Must be at most 1000."),
    (GAUSSIAN, "gaussian_sigma", "inf", "A finite number is required."),
    (GAUSSIAN, "sensitivity", "1.5", "A whole number is required."),
    (GAUSSIAN, "sensitivity", "0", "Must be between 1 and 100."),
    (LAPLACE, "laplace_scale", "-4", "Must be greater than 0."),
    (LAPLACE, "laplace_scale", "1e7", "Must be at most 1e+06."),
    (RECIPE, "epsilon0", "1e300", "Must be at most 100."),
    (RECIPE, "epsilon0", "-1", "Must be greater than 0."),
    (RECIPE, "n", "0", "Must be at least 1."),
    (RECIPE, "n", "1e9", "Must be at most 1e+08 for composition."),
    (RECIPE, "mechanism", "laplace", "Must be one of"),
    (RECIPE, "sensitivity", "2", "Only for aggregator noise"),
]


@pytest.mark.parametrize(("valid", "name", "value", "message"), BAD)
def test_compose_refuses_each_bad_parameter_by_name(valid: dict, name: str, value: str, message: str) -> None:
    with pytest.raises(ValidationFailed) as raised:
        privacy_compose(**{**valid, name: value})
    assert list(raised.value.errors) == [name]
    assert raised.value.errors[name][0].startswith(message)


def test_compose_needs_exactly_one_release() -> None:
    with pytest.raises(ValidationFailed) as raised:
        privacy_compose(rounds="10", delta="1e-6")
    assert raised.value.errors["mechanism"][0].startswith("Give one release")
    with pytest.raises(ValidationFailed) as raised:
        privacy_compose(**GAUSSIAN, laplace_scale="4")
    assert set(raised.value.errors) == {"gaussian_sigma", "laplace_scale"}
    assert raised.value.errors["laplace_scale"][0].startswith("Give only one release")


def test_compose_names_every_bad_parameter_at_once() -> None:
    with pytest.raises(ValidationFailed) as raised:
        privacy_compose(rounds="0", delta="1", mechanism="kary_rr", epsilon0="nan", n="-1")
    assert set(raised.value.errors) == {"rounds", "delta", "epsilon0", "n"}


# The command line.


def run_json(params: dict[str, str], capsys) -> dict:
    flags = [f"--{name.replace('_', '-')}={value}" for name, value in params.items()]
    call_command("privacy", "compose", *flags, "--json")
    return json.loads(capsys.readouterr().out)


def test_compose_command_prints_the_service_json(capsys) -> None:
    assert run_json(GAUSSIAN, capsys) == json.loads(json.dumps(privacy_compose(**GAUSSIAN)))


def test_compose_command_prints_one_line_with_every_accountant(capsys) -> None:
    call_command("privacy", "compose", "--rounds=10", "--delta=1e-6", "--gaussian-sigma=18.37")
    line = capsys.readouterr().out
    assert line.startswith("epsilon = 1.03") and "(pld) for 10 rounds at delta = 1e-06" in line
    assert "renyi 1.11" in line and "advanced" in line and "basic" in line


def test_compose_command_exits_2_naming_each_bad_parameter(capsys) -> None:
    with pytest.raises(SystemExit) as raised:
        Command().run_from_argv(
            ["manage.py", "privacy", "compose", "--rounds", "0", "--delta", "1", "--gaussian-sigma", "nan"]
        )
    assert raised.value.code == 2
    error = capsys.readouterr().err
    assert "--rounds: Must be between 1 and 10000." in error
    assert "--delta: Must lie strictly between 0 and 1." in error
    assert "--gaussian-sigma: A finite number is required." in error


def test_compose_command_refuses_with_command_error_code_2(capsys) -> None:
    with pytest.raises(CommandError) as raised:
        run_json({**LAPLACE, "laplace_scale": "0"}, capsys)
    assert raised.value.returncode == 2 and "--laplace-scale: Must be greater than 0." in str(raised.value)


# The API.


@pytest.mark.django_db
def test_compose_endpoint_gives_the_service_json(api) -> None:
    response = api.get("/api/privacy/compose/", RECIPE)
    assert response.status_code == 200
    body = response.json()
    assert body == json.loads(json.dumps(privacy_compose(**RECIPE)))
    assert set(body["accountants"]) == ACCOUNTANTS and body["rounds"] == 5 and body["delta"] == 1e-8


@pytest.mark.django_db
@pytest.mark.parametrize(("valid", "name", "value", "message"), BAD)
def test_compose_endpoint_answers_400_naming_the_bad_parameter(api, valid, name, value, message) -> None:
    response = api.get("/api/privacy/compose/", {**valid, name: value})
    assert response.status_code == 400
    assert list(response.json()["fields"]) == [name]
    assert response.json()["fields"][name][0].startswith(message)


@pytest.mark.django_db
def test_compose_endpoint_refuses_anonymous_requests() -> None:
    assert APIClient().get("/api/privacy/compose/", GAUSSIAN).status_code == 401


@pytest.mark.django_db
def test_compose_endpoint_is_in_the_openapi_schema(api) -> None:
    schema = api.get("/api/schema/", HTTP_ACCEPT="application/json").json()
    operation = schema["paths"]["/api/privacy/compose/"]["get"]
    assert {parameter["name"] for parameter in operation["parameters"]} >= {
        "rounds", "delta", "mechanism", "epsilon0", "n", "gaussian_sigma", "laplace_scale", "sensitivity",
    }  # fmt: skip
    assert "400" in operation["responses"]


# The guide page.


@pytest.mark.django_db
def test_the_guide_composes_the_example_rounds(client, analyst) -> None:
    client.force_login(analyst)
    page = client.get("/guide/privacy/").content.decode()
    assert 'id="compose"' in page and "Composing rounds" in page
    answer = privacy_compose(**GAUSSIAN, sensitivity="2")
    assert f'id="compose-epsilon">{answer["epsilon"]:.4f} (pld)<' in page
    assert f'id="compose-renyi">{answer["accountants"]["renyi"]:.4f}<' in page


@pytest.mark.django_db
def test_the_guide_composes_what_is_asked_and_names_bad_fields(client, analyst) -> None:
    client.force_login(analyst)
    asked = {"compose_release": "recipe", "compose_rounds": "5", "compose_delta": "1e-8",
             "compose_mechanism": "kary_rr", "compose_epsilon0": "3", "compose_n": "20000"}  # fmt: skip
    page = client.get("/guide/privacy/", asked).content.decode()
    answer = privacy_compose(**RECIPE)
    assert f'id="compose-pld">{answer["accountants"]["pld"]:.4f}<' in page
    response = client.get("/guide/privacy/", {**asked, "compose_rounds": "0", "compose_n": "many"})
    page = response.content.decode()
    assert response.status_code == 200
    assert 'id="calc-compose_rounds-error">Must be between 1 and 10000.<' in page
    assert 'id="calc-compose_n-error">A number is required.<' in page
    assert 'id="compose-epsilon"' not in page
