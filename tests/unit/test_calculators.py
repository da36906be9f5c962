"""Privacy calculators through both interfaces: `manage.py privacy` and /api/privacy/."""

from __future__ import annotations

import json
import math

import pytest
from django.core.management import CommandError, call_command
from rest_framework.test import APIClient

from analyses.management.commands.privacy import Command

AMPLIFY = {"epsilon0": "4", "n": "10000", "delta": "1e-10"}
MIN_COHORT = {"epsilon0": "3", "epsilon": "1", "delta": "1e-6", "method": "closed-form"}
GAUSSIAN = {"epsilon": "0.317", "delta": "1e-9", "sensitivity": repr(math.sqrt(2))}

# (endpoint and subcommand, valid parameters, the parameter made invalid, its invalid value)
INVALID = [
    ("amplify", AMPLIFY, "epsilon0", "0"),
    ("amplify", AMPLIFY, "epsilon0", "-1"),
    ("amplify", AMPLIFY, "epsilon0", "four"),
    ("amplify", AMPLIFY, "epsilon0", "nan"),
    ("amplify", AMPLIFY, "epsilon0", "1000"),
    ("amplify", AMPLIFY, "n", "0"),
    ("amplify", AMPLIFY, "n", "2.5"),
    ("amplify", AMPLIFY, "n", "1e13"),
    ("amplify", AMPLIFY, "n", "many"),
    ("amplify", AMPLIFY, "delta", "0"),
    ("amplify", AMPLIFY, "delta", "1"),
    ("amplify", AMPLIFY, "delta", "-1e-6"),
    ("amplify", AMPLIFY, "delta", "1e-320"),
    ("amplify", AMPLIFY, "method", "fastest"),
    ("min-cohort", MIN_COHORT, "epsilon0", "0"),
    ("min-cohort", MIN_COHORT, "epsilon0", "x"),
    ("min-cohort", MIN_COHORT, "epsilon", "0"),
    ("min-cohort", MIN_COHORT, "epsilon", "inf"),
    ("min-cohort", MIN_COHORT, "epsilon", "1e-5"),  # valid, but no cohort of up to 1e12 reaches it
    ("min-cohort", MIN_COHORT, "delta", "1.5"),
    ("min-cohort", MIN_COHORT, "method", "clones"),
    ("gaussian", GAUSSIAN, "epsilon", "0"),
    ("gaussian", GAUSSIAN, "epsilon", "1e-12"),
    ("gaussian", GAUSSIAN, "epsilon", "x"),
    ("gaussian", GAUSSIAN, "delta", "0"),
    ("gaussian", GAUSSIAN, "delta", "1"),
    ("gaussian", GAUSSIAN, "sensitivity", "0"),
    ("gaussian", GAUSSIAN, "sensitivity", "-1"),
    ("gaussian", GAUSSIAN, "sensitivity", "root two"),
]


def run(subcommand: str, params: dict[str, str], capsys, *flags: str) -> str:
    call_command("privacy", subcommand, *(f"--{name}={value}" for name, value in params.items()), *flags)
    return capsys.readouterr().out


def run_json(subcommand: str, params: dict[str, str], capsys, *flags: str) -> dict:
    return json.loads(run(subcommand, params, capsys, "--json", *flags))


# The published values, over the API.


@pytest.mark.django_db
def test_amplify_endpoint_reproduces_seed_003_example_4(api) -> None:
    response = api.get("/api/privacy/amplify/", AMPLIFY)
    assert response.status_code == 200
    # "satisfies (0.61, 1e-10)-DP" (two decimals); 0.6052560 is privacy/shuffling.py's value.
    assert response.json()["epsilon"] == pytest.approx(0.61, abs=0.005)
    assert response.json()["epsilon"] == pytest.approx(0.6052560, rel=1e-6)
    assert response.json()["method"] == "stronger-2022"


@pytest.mark.django_db
def test_amplify_endpoint_applies_the_method_asked_for(api) -> None:
    stronger = api.get("/api/privacy/amplify/", {**AMPLIFY, "method": "stronger-2022"}).json()["epsilon"]
    clones = api.get("/api/privacy/amplify/", {**AMPLIFY, "method": "clones-2020"}).json()["epsilon"]
    closed_form = api.get("/api/privacy/amplify/", {**AMPLIFY, "n": "1000000", "method": "closed-form"}).json()
    assert stronger < clones < 4.0
    assert closed_form["method"] == "closed-form"
    assert 0 < closed_form["epsilon"] < 4.0


@pytest.mark.django_db
def test_min_cohort_endpoint_gives_2935_by_the_closed_form(api) -> None:
    response = api.get("/api/privacy/min-cohort/", MIN_COHORT)
    assert response.status_code == 200
    assert response.json() == {
        "epsilon0": 3.0,
        "epsilon": 1.0,
        "delta": 1e-6,
        "method": "closed-form",
        "min_cohort": 2935,
    }


@pytest.mark.django_db
def test_min_cohort_endpoint_numerical_bound_needs_fewer_reports(api) -> None:
    response = api.get("/api/privacy/min-cohort/", {**MIN_COHORT, "method": ""})
    assert response.json()["method"] == "stronger-2022"
    assert 1 < response.json()["min_cohort"] < 2935


@pytest.mark.django_db
def test_gaussian_endpoint_reproduces_seed_001_table_2(api) -> None:
    response = api.get("/api/privacy/gaussian/", GAUSSIAN)
    assert response.status_code == 200
    assert response.json()["sigma"] == pytest.approx(23.3903, rel=1e-4)
    assert response.json()["classical"] is False


@pytest.mark.django_db
def test_gaussian_endpoint_gives_the_classical_calibration_on_request(api) -> None:
    response = api.get("/api/privacy/gaussian/", {**GAUSSIAN, "classical": "true"})
    # Dwork and Roth, Theorem A.1: sqrt(2 ln(1.25 / delta)) * sensitivity / epsilon.
    assert response.json()["sigma"] == pytest.approx(28.8752350, rel=1e-7)
    assert response.json()["classical"] is True


# The same values on the command line.


def test_privacy_amplify_command_reproduces_seed_003_example_4(capsys) -> None:
    answer = run_json("amplify", AMPLIFY, capsys)
    assert answer["epsilon"] == pytest.approx(0.6052560, rel=1e-6)


def test_privacy_min_cohort_command_gives_2935_by_the_closed_form(capsys) -> None:
    assert run_json("min-cohort", MIN_COHORT, capsys)["min_cohort"] == 2935


def test_privacy_gaussian_command_reproduces_seed_001_table_2(capsys) -> None:
    assert run_json("gaussian", GAUSSIAN, capsys)["sigma"] == pytest.approx(23.3903, rel=1e-4)
    assert run_json("gaussian", GAUSSIAN, capsys, "--classical")["sigma"] == pytest.approx(28.8752350, rel=1e-7)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("subcommand", "params"), [("amplify", AMPLIFY), ("min-cohort", MIN_COHORT), ("gaussian", GAUSSIAN)]
)
def test_command_and_api_give_the_same_json(api, capsys, subcommand, params) -> None:
    assert run_json(subcommand, params, capsys) == api.get(f"/api/privacy/{subcommand}/", params).json()


def test_privacy_commands_print_one_line_rounded_up_without_json(capsys) -> None:
    assert run("amplify", AMPLIFY, capsys) == (
        "epsilon = 0.605256 for 10,000 reports of epsilon0 = 4 at delta = 1e-10 (stronger-2022)\n"
    )
    assert run("min-cohort", MIN_COHORT, capsys).startswith("min cohort = 2,935 reports")
    # 23.3907294... shown as 23.3908: never below the noise the calibration asks for.
    assert run("gaussian", GAUSSIAN, capsys).startswith("sigma = 23.3908 (analytic)")


# Every invalid parameter: 400 naming it, or exit code 2 naming it.


@pytest.mark.django_db
@pytest.mark.parametrize(("endpoint", "valid", "name", "value"), INVALID)
def test_calculator_endpoints_refuse_an_invalid_parameter_naming_it(api, endpoint, valid, name, value) -> None:
    assert api.get(f"/api/privacy/{endpoint}/", valid).status_code == 200
    response = api.get(f"/api/privacy/{endpoint}/", {**valid, name: value})
    assert response.status_code == 400
    assert list(response.json()["fields"]) == [name]
    assert len(response.json()["fields"][name]) == 1


@pytest.mark.parametrize(("subcommand", "valid", "name", "value"), INVALID)
def test_privacy_commands_exit_2_on_an_invalid_parameter_naming_it(capsys, subcommand, valid, name, value) -> None:
    run(subcommand, valid, capsys)
    with pytest.raises(CommandError) as raised:
        run(subcommand, {**valid, name: value}, capsys)
    assert raised.value.returncode == 2
    assert f"--{name}:" in str(raised.value)


@pytest.mark.django_db
def test_calculator_endpoints_report_every_invalid_parameter_at_once(api) -> None:
    response = api.get("/api/privacy/amplify/", {"epsilon0": "-1", "delta": "2", "method": "x"})
    assert response.status_code == 400
    assert response.json() == {
        "detail": "Invalid input: epsilon0, n, delta, method.",
        "code": "invalid",
        "fields": {
            "epsilon0": ["Must be greater than 0."],
            "n": ["This parameter is required."],
            "delta": ["Must lie strictly between 0 and 1."],
            "method": ["Must be one of stronger-2022, clones-2020, closed-form."],
        },
    }


@pytest.mark.django_db
def test_amplify_endpoint_refuses_n_outside_the_closed_form_validity(api) -> None:
    # Theorem 3.1 needs epsilon0 <= log(n / (8 log(2 / delta)) - 1): n = 10,000 is too few at epsilon0 = 4.
    response = api.get("/api/privacy/amplify/", {**AMPLIFY, "method": "closed-form"})
    assert response.status_code == 400
    assert "Theorem 3.1" in response.json()["fields"]["n"][0]


@pytest.mark.django_db
def test_gaussian_endpoint_refuses_the_classical_bound_at_epsilon_1(api) -> None:
    assert api.get("/api/privacy/gaussian/", {**GAUSSIAN, "epsilon": "1"}).status_code == 200
    response = api.get("/api/privacy/gaussian/", {**GAUSSIAN, "epsilon": "1", "classical": "true"})
    assert response.status_code == 400
    assert list(response.json()["fields"]) == ["epsilon"]


@pytest.mark.django_db
def test_gaussian_endpoint_refuses_a_classical_flag_that_is_not_a_boolean(api) -> None:
    response = api.get("/api/privacy/gaussian/", {**GAUSSIAN, "classical": "maybe"})
    assert response.status_code == 400
    assert list(response.json()["fields"]) == ["classical"]


def test_privacy_command_missing_a_parameter_exits_2_from_the_command_line(capsys) -> None:
    with pytest.raises(SystemExit) as raised:
        Command().run_from_argv(["manage.py", "privacy", "amplify", "--epsilon0", "4"])
    assert raised.value.code == 2
    assert "--n" in capsys.readouterr().err


def test_privacy_command_invalid_parameter_exits_2_from_the_command_line(capsys) -> None:
    with pytest.raises(SystemExit) as raised:
        Command().run_from_argv(["manage.py", "privacy", "amplify", "--epsilon0", "0", "--n", "10", "--delta", "0.1"])
    assert raised.value.code == 2
    assert "--epsilon0: Must be greater than 0." in capsys.readouterr().err


# Authentication.


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("endpoint", "params"), [("amplify", AMPLIFY), ("min-cohort", MIN_COHORT), ("gaussian", GAUSSIAN)]
)
def test_calculator_endpoints_refuse_anonymous_requests(endpoint, params) -> None:
    assert APIClient().get(f"/api/privacy/{endpoint}/", params).status_code == 401


@pytest.mark.django_db
def test_gaussian_endpoint_gives_the_discrete_calibration_the_aggregators_use(api) -> None:
    from privacy.aggregator_noise import AggregatorGaussian
    from privacy.discrete_gaussian import discrete_gaussian_delta

    response = api.get("/api/privacy/gaussian/", {**GAUSSIAN, "discrete": "true"})
    assert response.status_code == 200
    body = response.json()
    assert body["discrete"] is True and body["sigma"] == AggregatorGaussian(0.317, 1e-9).sigma
    assert discrete_gaussian_delta(body["sigma"], 0.317) <= 1e-9
    one = api.get("/api/privacy/gaussian/", {**GAUSSIAN, "sensitivity": "1", "discrete": "true"}).json()
    assert discrete_gaussian_delta(one["sigma"], 0.317, coordinates=1) <= 1e-9 and one["sigma"] < body["sigma"]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"sensitivity": "2"}, "sensitivity"),
        ({"classical": "true"}, "discrete"),
        ({"epsilon": "1e-6", "delta": "1e-300"}, "epsilon"),
    ],
)
def test_gaussian_endpoint_refuses_a_discrete_calibration_it_cannot_make(api, changes: dict, field: str) -> None:
    response = api.get("/api/privacy/gaussian/", {**GAUSSIAN, "discrete": "true", **changes})
    assert response.status_code == 400
    assert field in response.json()["fields"]


def test_privacy_gaussian_command_gives_the_discrete_calibration(capsys) -> None:
    from privacy.aggregator_noise import AggregatorGaussian

    assert run_json("gaussian", GAUSSIAN, capsys, "--discrete")["sigma"] == AggregatorGaussian(0.317, 1e-9).sigma


def test_privacy_min_cohort_command_gives_what_devices_enforce_for_a_mechanism(capsys) -> None:
    demo = {"epsilon0": "2", "epsilon": "0.3", "delta": "1e-6"}
    assert run("min-cohort", demo, capsys, "--mechanism", "asymmetric_ohe").startswith(
        "min cohort = 1,670 reports of epsilon0 = 2 for epsilon = 0.3 at delta = 1e-06 (stronger-2022, what devices "
        "enforce for asymmetric_ohe)"
    )
    assert run_json("min-cohort", demo, capsys, "--mechanism", "hadamard_response")["method"] == "clones-2020"


@pytest.mark.django_db
def test_min_cohort_endpoint_refuses_a_method_and_a_mechanism_together(api) -> None:
    response = api.get("/api/privacy/min-cohort/", {**MIN_COHORT, "mechanism": "asymmetric_ohe"})
    assert response.status_code == 400
    assert list(response.json()["fields"]) == ["method"]
