"""Shared personas and a small fleet. charlie (other_analyst) must never see alice's analyses."""

from __future__ import annotations

import copy
import os

import pytest
from playwright.sync_api import sync_playwright
from rest_framework.test import APIClient

from analyses.rules.roles import make_privacy_officer
from analyses.services.policy import analysis_approve, analysis_create
from devices.fleet_io import fleet_create
from devices.synthetic import TOKENS
from pfs_web.celery import app as celery_app
from tests.heavy_hitters import fixed_coins, hh_analysis  # noqa: F401 (fixtures, shared by the heavy-hitters tests)
from tests.services import Worker, chromium_or_fail, redis_url_or_fail

FLEET_SIZE = 5_000
SHARD_SIZE = 1_000

SPEC = {
    "identifier": "test.ages",
    "fleet": "small",
    "queryClass": {"stream": "KeyboardNGrams", "fields": ["age", "ngrams"], "cohortFields": ["locale"]},
    "budget": {"epsilon": 2.0, "reports": 2, "delta": 1e-6},
    "fields": {"age": {"localEpsilon": 4.0, "epsilon": 2.0, "reports": 2}},
}

# epsilon0 = 3 and epsilon = 1 at delta = 1e-6 need a minimum cohort of 736 (FMT 2022, what devices
# enforce for asymmetric OHE; the closed form of Theorem 3.1 would need 2,935).
RECIPE = {
    "recipeIdentifier": "ages",
    "version": "1",
    "AnalysisIdentifier": "test.ages",
    "query": "select age from KeyboardNGrams",
    "cohorts": [],
    "dataTypeContent": {"age": {"dataType": "BucketedType", "boundaries": [20, 30, 40, 50, 60, 70, 80]}},
    "privacy": {"mechanism": "asymmetric_ohe", "epsilon0": 3.0, "epsilon": 1.0, "delta": 1e-6, "samplingRate": 1.0},
}


# Interactive analyses: epsilon0 = 4, epsilon = 1, delta = 1e-6 need a minimum cohort of 2,203 (8,762 by
# the closed form), so
# their fleet has 30,000 devices; the policy (seed_demo's demo.discovery) allows three such rounds.
DISCOVERY_POLICY = {
    "identifier": "t.discovery",
    "fleet": "words",
    "queryClass": {"stream": "KeyboardNGrams", "fields": ["ngrams"], "cohortFields": ["locale"]},
    "budget": {"epsilon": 3.0, "reports": 3, "delta": 1e-5},
    "fields": {"ngrams": {"localEpsilon": 4.0, "epsilon": 3.0, "reports": 3}},
}
DISCOVERY_SPEC = {
    "analysis": "t.discovery",
    "kind": "ngram_discovery",
    "field": "ngrams",
    "vocabulary": TOKENS[:40],
    "maxLength": 2,
    "privacy": {"mechanism": "asymmetric_ohe", "epsilon0": 4.0, "epsilonPerRound": 1.0, "delta": 1e-6},
    "threshold": {"zScore": 3.0, "maxPerLevel": 10},
}


@pytest.fixture
def words_fleet(db):
    return fleet_create(name="words", size=30_000, seed=5, shard_size=10_000)


@pytest.fixture
def discovery(words_fleet, analyst, officer):
    """The approved analysis t.discovery on the words fleet, owned by alice."""
    return analysis_approve(
        analysis=analysis_create(spec=copy.deepcopy(DISCOVERY_POLICY), owner=analyst), officer=officer
    )


@pytest.fixture
def recipe() -> dict:
    return copy.deepcopy(RECIPE)


@pytest.fixture
def analyst(django_user_model):
    return django_user_model.objects.create_user("alice", password="alice-password")


@pytest.fixture
def other_analyst(django_user_model):
    return django_user_model.objects.create_user("charlie", password="charlie-password")


@pytest.fixture
def officer(django_user_model):
    user = django_user_model.objects.create_user("olivia", password="olivia-password")
    make_privacy_officer(user)
    return user


@pytest.fixture
def other_officer(django_user_model):
    """A second privacy officer: whoever edited a policy change cannot approve it, another one can."""
    user = django_user_model.objects.create_user("oscar", password="oscar-password")
    make_privacy_officer(user)
    return user


@pytest.fixture
def fleet(db):
    return fleet_create(name="small", size=FLEET_SIZE, seed=11, shard_size=SHARD_SIZE)


@pytest.fixture
def analysis(fleet, analyst, officer):
    return analysis_approve(analysis=analysis_create(spec=copy.deepcopy(SPEC), owner=analyst), officer=officer)


@pytest.fixture
def api(analyst) -> APIClient:
    client = APIClient()
    client.force_authenticate(analyst)
    return client


@pytest.fixture(scope="session")
def celery_worker_process(django_db_setup, django_db_blocker, tmp_path_factory):
    """One real `celery worker` process for the session, sharing the test database."""
    redis_url = redis_url_or_fail()
    with django_db_blocker.unblock():
        worker = Worker(redis_url, tmp_path_factory.mktemp("worker") / "worker.log")
    celery_app.control.purge()  # nothing left over from an earlier run reaches this worker
    worker.wait_ready()
    yield worker
    worker.stop()


# The flags Debian's Chromium needs here: no sandbox as root, and no background connections to a
# network that is closed.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]


@pytest.fixture(scope="session")
def browser():
    """One Chromium for the session (Playwright's sync API allows one per thread), for the browser
    tests and the production profile's."""
    executable = chromium_or_fail()
    # Playwright's sync API runs an event loop in this thread from now on; the tests' own ORM calls
    # are synchronous all the same.
    os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, headless=True, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


STORES = ("default", "issuer", "helper")  # the database aliases (pfs_web.settings)
_DATABASE_FIXTURES = {"db", "transactional_db", "django_db_reset_sequences", "django_db_serialized_rollback"}


def pytest_collection_modifyitems(config, items) -> None:
    """Tests say what they need: a test that reaches the database (through any fixture) is marked
    ``database``; the others are pure and pytest-django refuses them a database. So
    ``pytest -m "not database"`` runs the pure suite, with no database at all."""
    for item in items:
        if _DATABASE_FIXTURES & set(getattr(item, "fixturenames", ())) or item.get_closest_marker("django_db"):
            item.add_marker(pytest.mark.database)
            _with_every_store(item)


def _with_every_store(item) -> None:
    """A database test gets the issuer's and the helper's stores as well as the default one
    (pfs_base.db_router): any round reaches the helper, any round on real devices the issuer. Its own
    django_db marker's arguments are kept."""
    marker = item.get_closest_marker("django_db")
    kwargs = dict(marker.kwargs) if marker else {}
    if "transaction" not in kwargs and marker is not None and marker.args:
        kwargs["transaction"] = marker.args[0]
    if kwargs.get("databases") == "__all__":
        return
    kwargs["databases"] = sorted(set(kwargs.get("databases") or ["default"]) | set(STORES))
    item.add_marker(pytest.mark.django_db(**kwargs), append=False)
