"""schemathesis against the live API: every operation of /api/schema/, fuzzed, answers without a server
error and as its schema says (status, content type, body).

The live server reads the schema it serves; the requests carry an analyst's token, so they reach the
views. Half the generated cases name real objects (an analysis, a recipe, a released round, a fleet,
an adaptive run) instead of random ids, so the views get past their 404s. Rounds started here run
inline (the test settings' `sync` task mode) on a fleet of 5,000 devices.
"""

from __future__ import annotations

import copy
import os

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.generation import GenerationMode
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from analyses.models import AdaptiveRun, Recipe, Round
from tests.conftest import DISCOVERY_SPEC

# Examples per operation and generation mode; PFS_SCHEMATHESIS_EXAMPLES raises it for a longer hunt.
EXAMPLES = int(os.environ.get("PFS_SCHEMATHESIS_EXAMPLES", "15"))
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


@pytest.fixture
def seeded(transactional_db, analysis, discovery, recipe, api, analyst):
    """A recipe with a released round, a queued round, and an adaptive run: real ids to hit."""
    created = api.post("/api/analyses/test.ages/recipes/", recipe, format="json")
    assert created.status_code == 201, created.json()
    recipe_id = created.json()["id"]
    released = api.post(f"/api/recipes/{recipe_id}/rounds/").json()["id"]  # sync tasks: released on commit
    released_round = Round.objects.get(pk=released)
    assert released_round.status == Round.Status.RELEASED
    spec = copy.deepcopy(DISCOVERY_SPEC)
    spec["maxLength"] = 1
    run = api.post("/api/adaptive-runs/", spec, format="json")
    assert run.status_code == 201, run.json()
    return {
        "identifier": ["test.ages", "t.discovery"],
        "id": [recipe_id, released, run.json()["id"]],
        "name": ["small", "words"],
        "collection_key": [released_round.task_key],  # the issuer's signed count of a collection
    }


def test_every_api_operation_survives_fuzzing_and_answers_as_its_schema_says(live_server, seeded, client) -> None:
    token = client.post("/api/token/", {"username": "alice", "password": "alice-password"}).json()["token"]
    headers = {"Authorization": f"Token {token}"}
    schema = schemathesis.openapi.from_url(f"{live_server.url}/api/schema/", headers=headers, timeout=30)
    failures: list[str] = []
    operations = 0
    calls = []
    for result in schema.get_all_operations():
        operation = result.ok()
        operations += 1
        names = [p.name for p in operation.path_parameters]
        real = {name: st.sampled_from(seeded[name]) for name in names}
        strategies = [operation.as_strategy(GenerationMode.POSITIVE), operation.as_strategy(GenerationMode.NEGATIVE)]

        @given(case=st.one_of(*strategies), data=st.data())
        @settings(
            max_examples=EXAMPLES * 2,
            deadline=None,
            database=None,
            derandomize=True,  # the same cases every run: a failure here is reproducible
            suppress_health_check=list(HealthCheck),
        )
        def fuzz(case, data) -> None:
            if real and data.draw(st.booleans(), label="real objects"):
                case.path_parameters = {**case.path_parameters, **{k: data.draw(v, label=k) for k, v in real.items()}}
            calls.append(case.operation.label)
            case.call_and_validate(base_url=live_server.url, headers=headers, checks=CHECKS, timeout=60)

        try:
            fuzz()
        except (Exception, BaseExceptionGroup) as failure:  # one operation's failure must not hide the others'
            failures.append(f"{operation.label}:\n{failure}")
    assert operations >= 25, f"only {operations} operations in the schema"
    assert len(calls) >= operations * 10, f"only {len(calls)} requests for {operations} operations"
    assert not failures, "\n\n".join(failures)
    # The fuzzing ran real work, not only 404s.
    assert Recipe.objects.count() >= 1 and AdaptiveRun.objects.count() >= 1
