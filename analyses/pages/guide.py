"""The parameter guide: what epsilon0, epsilon, delta, q and the minimum cohort mean, with the
calculator beside it (analyses.calculators, the numbers the API's /api/privacy/* give) and a worked
example whose figures are computed, not typed in."""

from __future__ import annotations

import functools
from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from analyses import calculators
from pfs_base.errors import ValidationFailed
from privacy.mechanisms import MECHANISMS, mechanism_get, replacement_epsilon0

# The worked example: Figure 4's recipe on the demo's fleet of 100,000 devices, half of them asked.
EXAMPLE = {
    "mechanism": "asymmetric_ohe",
    "epsilon0": "3",
    "epsilon": "1",
    "delta": "1e-6",
    "sampling_rate": "0.5",
    "fleet": "100000",
}
_FIELDS = tuple(EXAMPLE)


def privacy_figures(values: dict[str, str]) -> dict[str, Any]:
    """The calculator's answer for ``values`` (strings as a form posts them), or its errors by field.

    Figures: the minimum cohort devices enforce for the mechanism and the closed form's, the reports
    expected (fleet x q), and the aggregate epsilon those reports would give."""
    errors: dict[str, list[str]] = {}
    rate = _number(values, "sampling_rate", errors, low=0.0, high=1.0)
    fleet = _number(values, "fleet", errors, low=1.0, high=1e12, whole=True)
    mechanism = values.get("mechanism", "")
    if mechanism not in MECHANISMS:
        errors["mechanism"] = [f"Must be one of {', '.join(sorted(MECHANISMS))}."]
    figures: dict[str, Any] = {}
    try:
        # The cohort bound counts epsilon0 in the replacement model, as devices do (check 3).
        local = float(values.get("epsilon0", ""))
        replacement = replacement_epsilon0(mechanism_get(mechanism, local)) if mechanism in MECHANISMS else local
    except ValueError:
        replacement = values.get("epsilon0", "")
    try:
        enforced = calculators.privacy_min_cohort(
            epsilon0=replacement, epsilon=values.get("epsilon"), delta=values.get("delta"), mechanism=mechanism
        )
        closed = calculators.privacy_min_cohort(
            epsilon0=replacement, epsilon=values.get("epsilon"), delta=values.get("delta"), method="closed-form"
        )
        figures.update(replacement_epsilon0=replacement, min_cohort=enforced["min_cohort"], bound=enforced["method"])
        figures["closed_form_cohort"] = closed["min_cohort"]
    except ValidationFailed as failed:
        for name, messages in failed.errors.items():
            errors.setdefault("epsilon0" if name == "epsilon0" else name, []).extend(messages)
    if errors:
        return {"errors": errors}
    expected = round(fleet * rate)
    figures.update(expected=expected, reaches=expected >= figures["min_cohort"])
    if expected >= 1:
        reached = calculators.privacy_amplify(
            epsilon0=replacement, n=expected, delta=values["delta"], method="stronger-2022"
        )
        figures["epsilon_at_expected"] = reached["epsilon"]
    return {"errors": {}, "figures": figures}


def _number(
    values: dict[str, str], name: str, errors: dict[str, list[str]], *, low: float, high: float, whole: bool = False
) -> float:
    try:
        value = float(values.get(name, ""))
    except ValueError:
        errors[name] = ["A number is required."]
        return 0.0
    if not low < value <= high or (whole and not value.is_integer()):
        kind = "a whole number" if whole else "a number"
        errors[name] = [f"Must be {kind} above {low:g} and at most {high:g}."]
    return value


# The composition form ("Composing rounds"): its fields carry a compose_ prefix so that they never
# mix with the calculator's. By default, the aggregators' noise of the demo recipe (sigma 18.37 is
# the discrete Gaussian at epsilon 0.3, delta 1e-6 on a histogram) over 10 rounds.
COMPOSE_EXAMPLE = {
    "compose_release": "gaussian",
    "compose_rounds": "10",
    "compose_delta": "1e-6",
    "compose_mechanism": "asymmetric_ohe",
    "compose_epsilon0": "3",
    "compose_n": "50000",
    "compose_sigma": "18.37",
    "compose_scale": "6.67",
    "compose_sensitivity": "2",
}
COMPOSE_RELEASES = {"recipe": "A recipe's round (local randomizer)", "gaussian": "Discrete Gaussian aggregator noise",
                    "laplace": "Discrete Laplace aggregator noise"}  # fmt: skip
# Service parameter -> form field.
_COMPOSE_FIELDS = {
    "rounds": "compose_rounds",
    "delta": "compose_delta",
    "mechanism": "compose_mechanism",
    "epsilon0": "compose_epsilon0",
    "n": "compose_n",
    "gaussian_sigma": "compose_sigma",
    "laplace_scale": "compose_scale",
    "sensitivity": "compose_sensitivity",
}


def compose_figures(values: dict[str, str]) -> dict[str, Any]:
    """analyses.calculators.privacy_compose for the form's ``values``, or its errors by form field.
    Only the fields of the chosen release are passed on."""
    release = values.get("compose_release", "")
    if release not in COMPOSE_RELEASES:
        return {"errors": {"compose_release": [f"Must be one of {', '.join(COMPOSE_RELEASES)}."]}}
    used = {"recipe": ("mechanism", "epsilon0", "n"), "gaussian": ("gaussian_sigma", "sensitivity"),
            "laplace": ("laplace_scale", "sensitivity")}[release]  # fmt: skip
    asked = tuple((name, values.get(_COMPOSE_FIELDS[name], "")) for name in ("rounds", "delta", *used))
    return _compose_figures(asked)


@functools.lru_cache(maxsize=256)
def _compose_figures(asked: tuple[tuple[str, str], ...]) -> dict[str, Any]:
    """Memoized: a composition costs up to a couple of seconds, and the page shows the same example to all."""
    try:
        return {"errors": {}, "figures": calculators.privacy_compose(**dict(asked))}
    except ValidationFailed as failed:
        return {"errors": {_COMPOSE_FIELDS.get(name, name): messages for name, messages in failed.errors.items()}}


@login_required
@require_GET
def privacy_guide(request: HttpRequest) -> HttpResponse:
    asked = {name: request.GET.get(name, EXAMPLE[name]).strip() for name in _FIELDS}
    composing = {name: request.GET.get(name, default).strip() for name, default in COMPOSE_EXAMPLE.items()}
    context = {
        "compose_values": composing,
        "compose_answer": compose_figures(composing),
        "compose_releases": COMPOSE_RELEASES,
        "values": asked,
        "answer": privacy_figures(asked),
        "example": EXAMPLE,
        "example_answer": privacy_figures(EXAMPLE),
        "mechanisms": sorted(MECHANISMS),
    }
    return render(request, "analyses/guide.html", context)
