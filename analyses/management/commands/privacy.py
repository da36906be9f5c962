"""Privacy calculators on the command line: amplify, min-cohort, gaussian, compose (the same services as /api/privacy/)."""

from __future__ import annotations

import json
import math
from decimal import ROUND_CEILING, Decimal
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from analyses.calculators import (
    COMPOSE_SENSITIVITY_DEFAULT,
    privacy_amplify,
    privacy_compose,
    privacy_gaussian,
    privacy_min_cohort,
)
from pfs_base.errors import ValidationFailed
from privacy.shuffling import DEFAULT_METHOD, METHODS

METHOD_HELP = f"amplification bound: {', '.join(METHODS)} (default {DEFAULT_METHOD})"


class Command(BaseCommand):
    help = (
        "Privacy calculators: aggregate epsilon by shuffling, minimum cohort, Gaussian noise scale, epsilon of "
        "composed rounds."
    )
    requires_system_checks: list[str] = []  # pure numerics: no database, no models

    def add_arguments(self, parser: CommandParser) -> None:
        # Numbers stay strings here so that analyses.calculators validates them, as it does for the API.
        calculators = parser.add_subparsers(
            dest="calculator", required=True, metavar="{amplify,min-cohort,gaussian,compose}"
        )
        amplify = calculators.add_parser("amplify", help="aggregate epsilon of n epsilon0-DP reports")
        amplify.add_argument("--epsilon0", required=True, help="local epsilon of each report")
        amplify.add_argument("--n", required=True, help="number of reports aggregated")
        amplify.add_argument("--delta", required=True, help="aggregate delta")
        amplify.add_argument("--method", help=METHOD_HELP)

        cohort = calculators.add_parser("min-cohort", help="smallest cohort reaching an aggregate epsilon")
        cohort.add_argument("--epsilon0", required=True, help="local epsilon of each report")
        cohort.add_argument("--epsilon", required=True, help="target aggregate epsilon")
        cohort.add_argument("--delta", required=True, help="aggregate delta")
        cohort.add_argument("--method", help=METHOD_HELP)
        cohort.add_argument(
            "--mechanism",
            help="a recipe mechanism: the cohort devices enforce for it (check 3: the tightest bound proven for "
            "that randomizer; epsilon0 in the replacement model), instead of --method",
        )

        gaussian = calculators.add_parser("gaussian", help="Gaussian noise scale sigma for (epsilon, delta)-DP")
        gaussian.add_argument("--epsilon", required=True, help="epsilon of the mechanism")
        gaussian.add_argument("--delta", required=True, help="delta of the mechanism")
        gaussian.add_argument("--sensitivity", required=True, help="L2 sensitivity of the query")
        gaussian.add_argument("--classical", action="store_true", help="classical bound (epsilon < 1), not analytic")
        gaussian.add_argument(
            "--discrete",
            action="store_true",
            help="the discrete Gaussian's exact calibration (sensitivity 1 or sqrt(2)), what aggregators add",
        )

        compose = calculators.add_parser(
            "compose",
            help="epsilon of rounds composed: a recipe's round (--mechanism, --epsilon0, --n) or aggregator noise "
            "(--gaussian-sigma or --laplace-scale, with --sensitivity)",
        )
        compose.add_argument("--rounds", required=True, help="rounds composed (1 to 10,000)")
        compose.add_argument("--delta", required=True, help="total delta of the composition")
        compose.add_argument("--mechanism", help="a recipe mechanism: the bound devices enforce for it")
        compose.add_argument("--epsilon0", help="the recipe's local epsilon0, in the replacement model")
        compose.add_argument("--n", help="reports summed each round (the cohort)")
        compose.add_argument(
            "--gaussian-sigma", dest="gaussian_sigma", help="sigma of each aggregator's discrete Gaussian noise"
        )
        compose.add_argument(
            "--laplace-scale", dest="laplace_scale", help="scale b of each aggregator's discrete Laplace noise"
        )
        compose.add_argument(
            "--sensitivity",
            help="aggregator noise only: histogram coordinates one report's change moves by 1 (default "
            f"{COMPOSE_SENSITIVITY_DEFAULT}: a report moving between two buckets; L1 = this, L2 = its square root)",
        )

        for subparser in (amplify, cohort, gaussian, compose):
            subparser.add_argument("--json", action="store_true", help="print the answer as JSON")

    def handle(self, *args: object, **options: Any) -> None:
        try:
            answer, line = _calculate(options)
        except ValidationFailed as error:
            lines = [f"  --{name.replace('_', '-')}: {' '.join(messages)}" for name, messages in error.errors.items()]
            raise CommandError("invalid parameters:\n" + "\n".join(lines), returncode=2) from error
        self.stdout.write(json.dumps(answer) if options["json"] else line)


def _calculate(options: dict[str, Any]) -> tuple[dict[str, Any], str]:
    if options["calculator"] == "amplify":
        answer = privacy_amplify(
            epsilon0=options["epsilon0"], n=options["n"], delta=options["delta"], method=options["method"]
        )
        return answer, (
            f"epsilon = {_up(answer['epsilon'])} for {answer['n']:,} reports of epsilon0 = {answer['epsilon0']:g} "
            f"at delta = {answer['delta']:g} ({answer['method']})"
        )
    if options["calculator"] == "min-cohort":
        answer = privacy_min_cohort(
            epsilon0=options["epsilon0"],
            epsilon=options["epsilon"],
            delta=options["delta"],
            method=options["method"],
            mechanism=options["mechanism"],
        )
        return answer, (
            f"min cohort = {answer['min_cohort']:,} reports of epsilon0 = {answer['epsilon0']:g} "
            f"for epsilon = {answer['epsilon']:g} at delta = {answer['delta']:g} ({answer['method']}"
            + (f", what devices enforce for {answer['mechanism']})" if "mechanism" in answer else ")")
        )
    if options["calculator"] == "compose":
        answer = privacy_compose(
            rounds=options["rounds"],
            delta=options["delta"],
            mechanism=options["mechanism"],
            epsilon0=options["epsilon0"],
            n=options["n"],
            gaussian_sigma=options["gaussian_sigma"],
            laplace_scale=options["laplace_scale"],
            sensitivity=options["sensitivity"],
        )
        others = ", ".join(
            f"{name} {_up(value) if value is not None else 'none'}"
            for name, value in answer["accountants"].items()
            if name != answer["accountant"]
        )
        return answer, (
            f"epsilon = {_up(answer['epsilon'])} ({answer['accountant']}) for {answer['rounds']:,} rounds at "
            f"delta = {answer['delta']:g}; {others}"
        )
    answer = privacy_gaussian(
        epsilon=options["epsilon"],
        delta=options["delta"],
        sensitivity=options["sensitivity"],
        classical=options["classical"],
        discrete=options["discrete"],
    )
    calibration = "discrete" if answer["discrete"] else "classical" if answer["classical"] else "analytic"
    return answer, (
        f"sigma = {_up(answer['sigma'])} ({calibration}) for epsilon = {answer['epsilon']:g}, "
        f"delta = {answer['delta']:g}, sensitivity = {answer['sensitivity']:g}"
    )


def _up(value: float) -> str:
    """Six significant digits rounded up, so a shown epsilon or sigma is never below the computed one."""
    if value == 0 or not math.isfinite(value):
        return f"{value:g}"
    exact = Decimal(value)
    rounded = exact.quantize(Decimal(1).scaleb(exact.adjusted() - 5), rounding=ROUND_CEILING)
    return f"{float(rounded):.6g}"
