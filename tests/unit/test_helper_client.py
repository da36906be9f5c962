"""The leader's one door to the helper (aggregation.helper_client): retries, refusals, and what a
user sees while the helper does not answer. (Two real processes: tests/integration/test_two_services.py.)"""

from __future__ import annotations

import pytest

from aggregation import helper_client
from analyses.models import Round
from tests.unit.test_device_http import CENTRAL, phones, phones_analysis  # noqa: F401 (fixtures)

pytestmark = pytest.mark.django_db


@pytest.fixture
def helper_down(monkeypatch, settings):
    """Every attempt to reach the helper fails as a refused connection does; the attempts are counted."""
    settings.PFS_HELPER_ATTEMPTS = 3
    attempts = []

    def refused(method, path, body, headers):
        attempts.append(path)
        raise ConnectionRefusedError("connection refused")

    monkeypatch.setattr(helper_client, "_send_in_process", refused)
    monkeypatch.setattr(helper_client.time, "sleep", lambda seconds: None)
    return attempts


def test_a_helper_that_does_not_answer_is_tried_again_then_given_up_on(helper_down) -> None:
    with pytest.raises(helper_client.HelperUnavailable, match="did not answer"):
        helper_client.public_key()
    assert helper_down == ["/hpke_config"] * 3


def test_a_refusal_of_the_helper_is_not_retried(db, monkeypatch) -> None:
    calls = []
    real = helper_client._send_in_process

    def counted(*args):
        calls.append(args[1])
        return real(*args)

    monkeypatch.setattr(helper_client, "_send_in_process", counted)
    from aggregation import dap

    with pytest.raises(helper_client.HelperRefused) as refused:
        helper_client.aggregate_shares(dap.AggregateShareReq(collection="never-provisioned", batches={}))
    assert refused.value.status == 404 and refused.value.code == "unrecognized_task" and len(calls) == 1


def test_a_device_round_does_not_start_while_the_helper_does_not_answer(api, phones_analysis, helper_down) -> None:  # noqa: F811
    created = api.post("/api/analyses/t.phones/recipes/", CENTRAL, format="json")
    started = api.post(f"/api/recipes/{created.json()['id']}/rounds/")
    # The devices would seal to a helper that was never told of the collection: nothing starts.
    assert started.status_code == 503 and started.json()["code"] == "unavailable"
    assert "did not answer" in started.json()["detail"]
    assert not Round.objects.exists()
    assert helper_down  # it was asked
