"""Seed the demo: two accounts, the `demo` fleet, and approved analyses with Table 1's policies.

Safe to re-run: what exists is kept (passwords included). --reset-budgets forgets the demo
analyses' rounds and the devices' ledgers for them, so the demo can be run again.
"""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandParser
from django.db import transaction

from analyses.models import Analysis, Round
from analyses.rules.roles import make_privacy_officer
from analyses.services.policy import analysis_approve, analysis_create
from devices.fleet_io import fleet_create
from devices.models import Fleet, ShardLedger, ShardRun

DEMO_USERS = [
    # (username, password, is privacy officer)
    ("officer", "officer-demo-password", True),
    ("analyst", "analyst-demo-password", False),
]

# Seed 000, Table 1: (a) the analysis budget and (b) the per-field budgets of keyboard analysis,
# with room for the README's walk. Table 1 allows one report of age (ε 0.3); the demo allows three
# rounds of it (ε 0.9 in all), so an analyst can run the demo recipe, drill down into a bucket and
# compare the two releases without asking an officer for more (issue 31, item 11).
DEMO_ANALYSES = [
    {
        "identifier": "demo.keyboard",
        "title": "Keyboard n-grams and age (the example recipe of the PFS paper)",
        "fleet": "demo",
        "queryClass": {"stream": "KeyboardNGrams", "fields": ["age", "ngrams"], "cohortFields": ["locale"]},
        "budget": {"epsilon": 1.0, "reports": 3, "delta": 1e-6},
        "fields": {
            "ngrams": {"localEpsilon": 5.0, "epsilon": 1.0, "reports": 1},
            "age": {"localEpsilon": 2.0, "epsilon": 0.9, "reports": 3},
        },
    },
    {
        "identifier": "demo.metrics",
        "title": "Keyboard model perplexity",
        "fleet": "demo",
        "queryClass": {"stream": "ModelMetrics", "fields": ["perplexity"], "cohortFields": ["locale"]},
        "budget": {"epsilon": 1.0, "reports": 1, "delta": 1e-6},
        "fields": {"perplexity": {"localEpsilon": 8.0, "epsilon": 1.0, "reports": 1}},
    },
    # Interactive analyses (docs/adaptive.md): three rounds of epsilon 1 each, and a twin analysis
    # with the same budget for the static baseline, so both spend the same on every device.
    *(
        {
            "identifier": identifier,
            "title": title,
            "fleet": "demo",
            "queryClass": {"stream": "KeyboardNGrams", "fields": ["ngrams"], "cohortFields": ["locale"]},
            "budget": {"epsilon": 3.0, "reports": 3, "delta": 1e-5},
            "fields": {"ngrams": {"localEpsilon": 4.0, "epsilon": 3.0, "reports": 3}},
        }
        for identifier, title in (
            ("demo.discovery", "Interactive n-gram discovery"),
            ("demo.discovery-static", "Static n-gram baseline (same budget)"),
        )
    ),
    {
        "identifier": "demo.refinement",
        "title": "Perplexity, buckets refined round by round",
        "fleet": "demo",
        "queryClass": {"stream": "ModelMetrics", "fields": ["perplexity"], "cohortFields": ["locale"]},
        "budget": {"epsilon": 4.0, "reports": 4, "delta": 1e-5},
        "fields": {"perplexity": {"localEpsilon": 8.0, "epsilon": 4.0, "reports": 4}},
    },
    # Heavy hitters without local noise (Poplar1, docs/adaptive.md): the typed words' field allows
    # aggregator noise, two walks of epsilon 1 each. Its floor of 100 reports is the minimum cohort
    # every released prefix must reach before the walk may extend it.
    {
        "identifier": "demo.heavy-hitters",
        "title": "Typed words without local noise (Poplar1 heavy hitters)",
        "fleet": "demo",
        "queryClass": {"stream": "KeyboardNGrams", "fields": ["ngrams"], "cohortFields": ["locale"]},
        "budget": {"epsilon": 2.0, "reports": 2, "delta": 1e-5, "minCohort": 100},
        "fields": {"ngrams": {"localEpsilon": 4.0, "epsilon": 2.0, "reports": 2, "aggregatorNoise": True}},
    },
]


class Command(BaseCommand):
    help = "Create the demo accounts, fleet and analyses (idempotent)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--devices", type=int, default=100_000, help="size of the demo fleet")
        parser.add_argument("--shard-size", type=int, default=settings.PFS_SHARD_SIZE, help="devices per shard")
        parser.add_argument("--seed", type=int, default=2022, help="seed of the synthetic fleet")
        parser.add_argument("--reset-budgets", action="store_true", help="forget the demo analyses' rounds and ledgers")

    def handle(self, *args: object, **options: object) -> None:
        users = get_user_model().objects
        credentials = []
        for username, password, officer in DEMO_USERS:
            user, created = users.get_or_create(username=username)
            if created:
                user.set_password(password)
                user.save()
            if officer:
                make_privacy_officer(user)
            credentials.append((username, password if created else "(unchanged)", officer))

        fleet = Fleet.objects.filter(name="demo").first()
        if fleet is None:
            self.stdout.write(f"creating fleet demo: {options['devices']:,} devices ...")
            fleet = fleet_create(
                name="demo", size=options["devices"], seed=options["seed"], shard_size=options["shard_size"]
            )

        officer = users.get(username="officer")
        analyst = users.get(username="analyst")
        for spec in DEMO_ANALYSES:
            if not Analysis.objects.filter(identifier=spec["identifier"]).exists():
                with transaction.atomic():
                    analysis_approve(analysis=analysis_create(spec=spec, owner=analyst), officer=officer)
            if options["reset_budgets"]:
                self._reset(spec["identifier"])

        self.stdout.write(
            self.style.SUCCESS(
                f"demo ready: fleet {fleet}, analyses {', '.join(s['identifier'] for s in DEMO_ANALYSES)}"
            )
        )
        for username, password, officer_role in credentials:
            role = "privacy officer" if officer_role else "analyst"
            self.stdout.write(f"  {role:16} username: {username:8} password: {password}")

    def _reset(self, identifier: str) -> None:
        analysis = Analysis.objects.get(identifier=identifier)
        with transaction.atomic():
            # Exactly this analysis's rounds: a prefix would also match another analysis whose
            # identifier starts with this one and a slash.
            rounds = Round.objects.filter(recipe__analysis=analysis).select_related("recipe__analysis")
            ShardRun.objects.filter(task_key__in=[round_.task_key for round_ in rounds]).delete()
            ShardLedger.objects.filter(analysis_identifier=identifier).delete()
            analysis.adaptive_runs.all().delete()  # their rounds go with the recipes below
            analysis.recipes.all().delete()
        self.stdout.write(f"reset the budgets of {identifier}")
