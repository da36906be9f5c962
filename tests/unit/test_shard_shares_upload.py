"""A simulated shard's shares with the helper over HTTP (aggregation.upload.shard_shares_upload).

The helper's request is out while the leader writes its own share and the rest of the shard in the
shard's transaction (helper_client.simulated_put_beside): the upload's block ends only once the
helper has answered, and a request that fails fails it, so the shard's transaction rolls back and
the leader keeps nothing the helper does not have. The request itself is replaced here: no helper runs.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from django.db import transaction

from aggregation import helper_client
from aggregation.models import LeaderShare
from aggregation.upload import BatchPair, shard_shares_upload

pytestmark = pytest.mark.django_db


def pairs() -> list[BatchPair]:
    leader, helper = np.arange(8, dtype=np.uint64), np.arange(8, 16, dtype=np.uint64)
    return [BatchPair(batch_key="", leader_share=leader, helper_share=helper, reports=3, min_cohort=1)]


@pytest.fixture
def over_http(settings):
    settings.PFS_HELPER_TRANSPORT = "http"


def test_the_upload_returns_once_the_helper_has_answered(over_http, monkeypatch) -> None:
    answered = []

    def slow_helper(request) -> None:
        assert threading.current_thread() is not threading.main_thread()  # sent beside the leader's writes
        time.sleep(0.2)
        answered.append(request.source)

    monkeypatch.setattr(helper_client, "simulated_put", slow_helper)
    with transaction.atomic():
        with shard_shares_upload(collection_key="c/1", source="shard:1", batches=pairs()):
            assert answered == []  # the leader's writes go on meanwhile
        assert answered == ["shard:1"]
    assert LeaderShare.objects.get().reports == 3


def test_a_failed_request_leaves_nothing_of_the_leaders(over_http, monkeypatch) -> None:
    def helper_down(request) -> None:
        raise helper_client.HelperUnavailable("the helper did not answer")

    monkeypatch.setattr(helper_client, "simulated_put", helper_down)
    with pytest.raises(helper_client.HelperUnavailable), transaction.atomic():
        with shard_shares_upload(collection_key="c/1", source="shard:1", batches=pairs()):
            pass
    assert not LeaderShare.objects.exists()
