"""The leader and the helper as two processes that talk over HTTP only, and the faults between them.

The helper runs as `make helper` runs it (its own settings, its own SQLite file, gunicorn); this
test's process is the leader (PFS_HELPER_TRANSPORT=http, HELPER_URL the helper's port), with its
own database. The two share one thing, the secret from which each collection's bearer token is
derived (PFS_AGGREGATOR_AUTH_SECRET), as two operators exchange it at set-up.

Faults, each with two real processes: the helper down while reports are verified or a round is
released (the leader waits and retries, releases nothing alone, loses nothing), the helper killed
with SIGKILL in the middle of jobs and restarted (every report counted exactly once), a wrong auth
token (refused and logged by the helper).
"""

from __future__ import annotations

import os
import signal
import sqlite3
import threading
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from django.db import connections

from aggregation import dap, helper_client
from aggregation.aggregators import LEADER
from aggregation.ingest import reports_ingest
from aggregation.issuer import issuer_public_key, token_issue
from aggregation.models import HelperShare, LeaderShare, PendingReport
from aggregation.reports import rejections
from aggregation.services import collection_rules_open
from analyses.models import Round
from analyses.services.collector import ClientNoiseEstimator, collection_release
from analyses.services.rounds import round_create_and_start
from pfs_device.report_client import AggregatorKeys, report_seal, report_token_obtain
from privacy.report_vdaf import ReportShape
from tests.integration.test_helper_service import start_helper
from tests.unit.test_report_ingest import receive

pytestmark = [pytest.mark.integration, pytest.mark.django_db]

SECRET = "the-secret-the-two-operators-exchanged"
KEY = "two-services/round-1"
DOMAIN = 8
ESTIMATOR = ClientNoiseEstimator(mechanism="kary_rr", epsilon0=3.0, domain_size=DOMAIN)
# The devices here are the test itself, sending thousands of reports within seconds: both operators
# trust them to pace over a second (rate validation's floor, aggregation.batch_rules), not 600.
PACING_FLOOR = "1"


class Helper:
    """The helper's service as a process of its own, restartable on its own store."""

    def __init__(self, folder: Path, settings) -> None:
        self.folder, self.settings, self.starts = folder, settings, 0
        self.server = None
        self.start()

    def start(self, **extra: str) -> None:
        self.starts += 1
        self.server, url = start_helper(
            self.folder,
            log_name=f"helper-{self.starts}.log",
            PFS_AGGREGATOR_AUTH_SECRET=SECRET,
            PFS_DEVICE_MIN_SPREAD=PACING_FLOOR,
            **extra,
        )
        self.settings.HELPER_URL = url

    def stop(self) -> None:
        self.server.stop()

    def kill(self) -> None:
        os.killpg(self.server.process.pid, signal.SIGKILL)
        self.server.process.wait()

    def log(self) -> str:
        return "".join(path.read_text(errors="replace") for path in sorted(self.folder.glob("helper-*.log")))

    def rows(self, sql: str) -> list[tuple]:
        with sqlite3.connect(self.folder / "helper.sqlite3") as store:
            return store.execute(sql).fetchall()


@pytest.fixture
def helper(tmp_path, settings):
    settings.PFS_HELPER_TRANSPORT = "http"
    settings.PFS_AGGREGATOR_AUTH_SECRET = SECRET.encode()
    settings.PFS_HELPER_ATTEMPTS = 2  # a helper that is down is noticed in a fraction of a second here
    settings.PFS_DEVICE_MIN_SPREAD = float(PACING_FLOOR)
    helper_client.public_key_forget()
    service = Helper(tmp_path, settings)
    yield service
    service.stop()
    helper_client.public_key_forget()


def open_collection() -> None:
    collection_rules_open(
        key=KEY, length=DOMAIN, min_cohort=3, weight_bound=DOMAIN, vdaf="histogram", token_key=issuer_public_key(KEY)
    )


def reports(count: int, *, start: int = 0) -> list[int]:
    """``count`` devices' reports received by the leader; the bucket of each."""
    keys = AggregatorKeys(leader=LEADER.public_key(), helper=helper_client.public_key())  # the helper's, from it
    values = [(start + i) % DOMAIN for i in range(count)]
    for i, value in enumerate(values):
        device = f"device-{start + i}"
        vector = np.eye(DOMAIN, dtype=np.int64)[value]
        shape = ReportShape("histogram", DOMAIN, 1)
        sealed = report_seal(collection_key=KEY, batch_key="", vector=vector, keys=keys, shape=shape)
        # Its token names the sealed report (its digest): asked for once it is sealed.
        receive(
            report_token_obtain(
                report=sealed,
                issuer=issuer_public_key(KEY),
                issue=lambda blinded, device=device: token_issue(
                    collection_key=KEY, device_identity=device, blinded=blinded
                ),
            )
        )
    return values


def release_counts() -> tuple[int, np.ndarray]:
    (batch,) = collection_release(collection_key=KEY, estimator=ESTIMATOR)
    assert not batch.suppressed, batch.reason
    return batch.reports, np.asarray(batch.estimates)


def test_a_round_of_devices_reports_through_two_processes(helper) -> None:
    open_collection()
    values = reports(12)
    result = reports_ingest(collection_key=KEY)
    assert (result.accepted, result.rejected) == (12, 0)
    # The helper's shares are in its own file, none in any store of the leader's process.
    assert helper.rows("SELECT SUM(reports) FROM aggregation_helpershare") == [(12,)]
    assert helper.rows("SELECT COUNT(*) FROM aggregation_spenttoken") == [(12,)]
    assert not HelperShare.objects.using("helper").exists()
    # A replay of every report: the leader refuses them itself.
    reports_ingest(collection_key=KEY)
    reported, _ = release_counts()
    assert reported == len(values)
    assert helper.rows("SELECT COUNT(*) FROM aggregation_helpershare") == [(0,)]  # deleted once released
    assert helper.rows("SELECT COUNT(*) FROM aggregation_helperrelease") == [(1,)]


def test_a_simulated_round_sends_the_helpers_shares_to_its_service(
    helper, analysis, recipe, analyst, django_capture_on_commit_callbacks
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        round_ = round_create_and_start(analysis=analysis, content=recipe, user=analyst, confirm_small_cohorts=True)
    round_.refresh_from_db()
    assert round_.status == Round.Status.RELEASED, round_.error
    assert helper.rows("SELECT COUNT(*) FROM aggregation_helperrelease") == [(1,)]
    assert not HelperShare.objects.using("helper").exists()


def test_the_helper_down_during_ingestion_leaves_the_reports_waiting_and_loses_none(helper) -> None:
    open_collection()
    reports(6)
    helper.stop()
    with pytest.raises(helper_client.HelperUnavailable):
        reports_ingest(collection_key=KEY)
    assert PendingReport.objects.count() == 6 and not LeaderShare.objects.exists()
    assert PendingReport.objects.exclude(job=None).count() == 6  # assigned to their job, for its resume
    helper.start()
    assert reports_ingest(collection_key=KEY).accepted == 6
    assert release_counts()[0] == 6


def test_the_helper_down_at_the_release_releases_nothing_and_a_retry_releases_all(helper) -> None:
    open_collection()
    reports(5)
    reports_ingest(collection_key=KEY)
    helper.stop()
    with pytest.raises(helper_client.HelperUnavailable):
        collection_release(collection_key=KEY, estimator=ESTIMATOR)
    assert sum(LeaderShare.objects.values_list("reports", flat=True)) == 5  # the leader's shares kept
    helper.start()
    assert release_counts()[0] == 5


@pytest.mark.django_db(transaction=True)  # the ingestion runs in a thread of its own: committed rows
def test_the_helper_killed_mid_job_and_restarted_counts_each_report_exactly_once(helper) -> None:
    open_collection()
    values = reports(2_000)
    errors: list[BaseException] = []

    def ingest() -> None:
        try:
            # Twenty jobs of 100: many still to go when the helper dies, however fast the first ran
            # (with eight, a busy machine let the ingestion finish before the kill landed).
            reports_ingest(collection_key=KEY, chunk=100)
        except helper_client.HelperUnavailable as error:
            errors.append(error)
        finally:
            connections.close_all()

    worker = threading.Thread(target=ingest)
    worker.start()
    # Killed once it has committed two of the twenty jobs: the next is then on its way or in its hands.
    deadline = time.monotonic() + 60
    while helper.rows("SELECT COUNT(*) FROM aggregation_helperjob")[0][0] < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    helper.kill()
    worker.join(timeout=120)
    assert errors, "the ingestion should have met the dead helper"
    helper.start()
    reports_ingest(collection_key=KEY)
    assert not PendingReport.objects.exists() and rejections(KEY) == {}
    # A job the helper committed before it died is answered again from its record, not stored twice.
    assert helper.rows("SELECT SUM(reports) FROM aggregation_helpershare") == [(len(values),)]
    assert release_counts()[0] == len(values)


def test_a_leader_with_a_wrong_auth_token_is_refused_and_logged(helper, settings) -> None:
    settings.PFS_AGGREGATOR_AUTH_SECRET = b"not-the-secret-we-exchanged"
    with pytest.raises(helper_client.HelperRefused) as refused:
        open_collection()
    assert refused.value.status == 401
    assert helper.rows("SELECT COUNT(*) FROM aggregation_collectionrules") == [(0,)]
    assert "wrong aggregator auth token" in helper.log()
    assert "not-the-secret" not in helper.log()


def test_a_replayed_or_reordered_job_over_http_is_answered_identically_or_refused(
    helper, settings, monkeypatch
) -> None:
    open_collection()
    reports(4)
    sent = []
    real = helper_client.job_run
    monkeypatch.setattr(
        helper_client, "job_run", lambda job, request: sent.append((job, request)) or real(job, request)
    )
    reports_ingest(collection_key=KEY)
    job, request = sent[0]
    path = f"/tasks/{dap.task_id(KEY)}/aggregation_jobs/{job}"
    headers = {
        "Content-Type": dap.media_type(dap.JOB_INIT),
        "Authorization": f"Bearer {dap.auth_token(SECRET.encode(), KEY)}",
    }
    first = helper_client._send_http("PUT", path, dap.encode(request), headers)
    again = helper_client._send_http("PUT", path, dap.encode(request), headers)
    assert first.status == again.status == 200 and first.body == again.body
    reordered = replace(request, verify_inits=list(reversed(request.verify_inits)))
    assert helper_client._send_http("PUT", path, dap.encode(reordered), headers).status == 409
    assert helper.rows("SELECT SUM(reports) FROM aggregation_helpershare") == [(4,)]  # nothing stored twice
