"""Uploads verified in bulk (aggregation.ingest): the same checks and sums as the per-report path.

Reports are received through aggregation.intake's answer (as the WSGI fast path and the DRF view
call it) and verified a chunk at a time. Real crypto throughout, as in test_report_protocol.
"""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from datetime import timedelta

import pytest
from django.db import connection, connections, transaction
from django.utils import timezone

from aggregation import ingest, intake
from aggregation.aggregators import HELPER
from aggregation.ingest import reports_ingest
from aggregation.key_rotation import keys_rotate
from aggregation.models import HelperJob, HelperShare, LeaderShare, PendingReport, SpentToken
from aggregation.reports import rejections
from aggregation.upload import SealedShare
from analyses.services.collector import ClientNoiseEstimator, collection_release
from pfs_device import hpke, wire
from pfs_device.report_client import report_seal, report_shard
from privacy.vdaf.field import Field128
from tests.report_path import report_submit
from tests.unit.test_hpke_v2 import shares_seal_v2
from tests.unit.test_report_protocol import (
    BURST,
    DOMAIN,
    KEY,
    keys,
    one_hot,
    proven,
    rate_rules_open,
    report,
    rules_open,
    shape_for,
    signed,
    token_unbound,
)

pytestmark = pytest.mark.django_db

KARY = ClientNoiseEstimator(mechanism="kary_rr", epsilon0=3.0, domain_size=DOMAIN)


@pytest.fixture
def rules():
    return rules_open()


def receive(sealed: wire.Report) -> None:
    body = wire.report_bytes(sealed)
    meta = {"REMOTE_ADDR": "192.0.2.1", "CONTENT_LENGTH": str(len(body))}
    answer = intake.upload_answer(meta, lambda _size: body)
    assert answer.status == 202, answer.body


def batched(device: str, value: int, batch: str) -> wire.Report:
    sealed = report_seal(collection_key=KEY, batch_key=batch, vector=one_hot(value), keys=keys(), shape=shape_for(KEY))
    return signed(sealed, device)


def stored_v2(sealed: wire.Report) -> None:
    """A body as the leader stored it before the upgrade to v3 or v4 (aggregation.intake's row),
    which the upload path would refuse now."""
    PendingReport.objects.create(collection_key=sealed.collection_key, body=wire.report_bytes(sealed))


def report_v2(device: str, value: int, batch: str = "") -> wire.Report:
    """A v2 device's report: sharded as today (Prio3 did not change), sealed the v2 way, its token
    over the collection only."""
    tok = token_unbound(device)
    shape = shape_for(KEY)
    public, leader, helper = report_shard(collection_key=KEY, vector=one_hot(value), shape=shape, nonce=tok.nonce)
    return shares_seal_v2(
        collection_key=KEY, batch_key=batch, token=tok, keys=keys(), public=public, leader=leader, helper=helper
    )


def report_v3(device: str, value: int, batch: str = "") -> wire.Report:
    """A v3 device's report: sealed as today, its token over the collection only."""
    tok = token_unbound(device)
    sealed = report_seal(
        collection_key=KEY, batch_key=batch, vector=one_hot(value), keys=keys(), shape=shape_for(KEY), nonce=tok.nonce
    )
    return replace(sealed, token=tok, version=wire.SEALED_V3)


def stored_sums() -> dict[str, tuple[list[int], list[int], int]]:
    """Per batch: the sum of the leader's stored shares, of the helper's, and the reports in them."""
    sums = {}
    for batch in sorted(set(LeaderShare.objects.values_list("collection__batch_key", flat=True))):
        leader = list(LeaderShare.objects.filter(collection__batch_key=batch))
        helper = list(HelperShare.objects.filter(collection__batch_key=batch))
        sums[batch] = (_total(leader), _total(helper), sum(s.reports for s in leader))
    return sums


def spent_tokens() -> int:
    """Tokens recorded spent, by both aggregators, each in its own store."""
    return SpentToken.objects.using("default").count() + SpentToken.objects.using("helper").count()


def _total(shares) -> list[int]:
    p = Field128.MODULUS
    total = [0] * DOMAIN
    for share in shares:
        total = [(a + b) % p for a, b in zip(total, share.load_ints(), strict=True)]
    return total


class RolledBack(Exception):
    pass


def test_bulk_sums_equal_the_per_report_sums(rules) -> None:
    sealed = [batched(f"d{i}", i % DOMAIN, "locale=en_US" if i % 3 else "locale=fr_FR") for i in range(7)]
    with pytest.raises(RolledBack), transaction.atomic(), transaction.atomic(using="helper"):
        for one in sealed:
            assert report_submit(one).accepted
        per_report = stored_sums()
        raise RolledBack  # the same tokens again below, in bulk
    assert not LeaderShare.objects.exists()

    for one in sealed:
        receive(one)
    result = reports_ingest(collection_key=KEY, chunk=3)
    assert (result.accepted, result.rejected, result.chunks) == (7, 0, 3)
    assert stored_sums() == per_report
    assert per_report["locale=en_US"][2] == 4 and per_report["locale=fr_FR"][2] == 3
    # Summed: one share per chunk and batch, not one per report.
    assert LeaderShare.objects.count() == HelperShare.objects.count() == 5
    assert spent_tokens() == 2 * 7 and not PendingReport.objects.exists()


def test_bulk_rejections_are_the_per_report_reasons_and_a_token_counts_once(rules) -> None:
    good = report("d1", one_hot(2))
    bad = report("d2", one_hot(0))
    aad = hpke.share_aad(KEY, batch_key=bad.batch_key, token_digest=bad.token.digest, public_share=bad.public)
    short = hpke.seal(HELPER.public_key(), b"\x00" * 63, hpke.share_info("helper"), aad=aad)  # a helper's is 64 bytes
    receive(signed(replace(bad, helper=SealedShare(*short)), "d4"))  # a device's own malformed report
    weight_bits = shape_for(KEY).vdaf().flp.MEAS_LEN - DOMAIN
    receive(proven("d3", [1] * DOMAIN + [0] * weight_bits))  # every bucket, its weight claimed 0
    receive(good)
    receive(good)  # the same report again, same chunk
    assert reports_ingest(collection_key=KEY).verified == 4
    # The leader refuses the second use of a token itself (it never reaches the helper's job); the
    # helper refuses the share it cannot read and decides the proof, and the leader counts its answers.
    assert rejections(KEY) == {
        "helper": {"proof_invalid": 1, "share_malformed": 1},
        "leader": {"token_reused": 1},
    }
    assert LeaderShare.objects.get().reports == 1


def test_a_failure_inside_a_chunk_stores_nothing_and_leaves_the_chunk_for_a_retry(rules, monkeypatch) -> None:
    first = report("d0", one_hot(0))
    receive(first)
    receive(report("d1", one_hot(1)))
    receive(first)  # a replay: would be counted
    receive(report("d3", one_hot(3)))
    real_count = ingest.rejections_add

    def crash(**_kwargs) -> None:  # in the leader's transaction, after the helper committed its part of the job
        assert HelperShare.objects.exists() and SpentToken.objects.using("helper").exists()
        raise RuntimeError("the worker died here")

    monkeypatch.setattr(ingest, "rejections_add", crash)
    with pytest.raises(RuntimeError, match="died"):
        reports_ingest(collection_key=KEY)
    assert PendingReport.objects.count() == 4
    assert not LeaderShare.objects.exists() and HelperShare.objects.count() == 1
    assert not SpentToken.objects.using("default").exists() and rejections(KEY) == {}

    monkeypatch.setattr(ingest, "rejections_add", real_count)
    result = reports_ingest(collection_key=KEY)
    assert (result.accepted, result.rejected) == (3, 1)
    assert LeaderShare.objects.get().reports == 3 and not PendingReport.objects.exists()
    assert HelperShare.objects.get().reports == 3  # the job resumed: its answer replayed, nothing stored twice


def test_a_failure_after_the_helper_stored_a_chunk_resumes_the_same_job_and_counts_each_report_once(
    rules, monkeypatch
) -> None:
    first = report("d0", one_hot(0))
    receive(first)
    receive(first)  # a replay: rejected once, by the leader
    receive(report("d1", one_hot(1)))
    receive(report("d3", one_hot(3)))
    real_count = ingest.rejections_add

    def crash_at_the_leader(*, collection_key, counts) -> None:
        if any(role == "leader" for role, _ in counts):
            raise RuntimeError("the worker died in the leader's transaction")
        real_count(collection_key=collection_key, counts=counts)

    monkeypatch.setattr(ingest, "rejections_add", crash_at_the_leader)
    with pytest.raises(RuntimeError, match="died"):
        reports_ingest(collection_key=KEY, chunk=2)
    assert HelperShare.objects.count() == 1 and not LeaderShare.objects.exists()  # the helper's committed
    assert PendingReport.objects.exclude(job=None).count() == 2  # the job's rows, kept for a resume

    monkeypatch.setattr(ingest, "rejections_add", real_count)
    receive(report("d4", one_hot(4)))
    result = reports_ingest(collection_key=KEY, chunk=2)
    assert (result.accepted, result.rejected, result.chunks) == (4, 1, 3)
    assert HelperShare.objects.count() == LeaderShare.objects.count() == 3  # no share stored twice
    assert rejections(KEY) == {"leader": {"token_reused": 1}}
    assert spent_tokens() == 2 * 4
    (batch,) = collection_release(collection_key=KEY, estimator=KARY)
    assert batch.reports == 4 and not batch.suppressed


def test_ingestion_is_idempotent(rules) -> None:
    for device in range(4):
        receive(report(f"d{device}", one_hot(device)))
    assert reports_ingest(collection_key=KEY).accepted == 4
    before = stored_sums()
    again = reports_ingest(collection_key=KEY)
    assert (again.verified, again.chunks) == (0, 0)
    assert stored_sums() == before and spent_tokens() == 8
    (batch,) = collection_release(collection_key=KEY, estimator=KARY)
    assert batch.reports == 4 and not batch.suppressed


def test_the_release_drains_the_pending_reports_first(rules) -> None:
    for device in range(3):
        receive(report(f"d{device}", one_hot(device)))
    reports_ingest(collection_key=KEY, limit=1)
    assert PendingReport.objects.count() == 2
    (batch,) = collection_release(collection_key=KEY, estimator=KARY)
    assert batch.reports == 3 and not PendingReport.objects.exists()
    # Closed by the release: a later upload is not stored.
    body = wire.report_bytes(report("late", one_hot(0)))
    answer = intake.upload_answer({"CONTENT_LENGTH": str(len(body))}, lambda _size: body)
    assert (answer.status, answer.body["code"]) == (409, "collection_closed")
    assert not PendingReport.objects.exists()


@pytest.mark.parametrize(("spacing", "refused"), [(0, True), (10, False)])
def test_rate_validation_reads_when_the_bulk_verified_reports_arrived(spacing, refused) -> None:
    rate_rules_open()
    for device in range(BURST):
        receive(report(f"d{device}", one_hot(device % DOMAIN)))
    start = timezone.now()
    for i, pending in enumerate(PendingReport.objects.order_by("pk")):
        PendingReport.objects.filter(pk=pending.pk).update(received_at=start + timedelta(seconds=spacing * i))
    reports_ingest(collection_key=KEY)
    assert LeaderShare.objects.count() == 1  # one chunk: the arrival times travel with the sum
    # 40 reports within a minute from 40 tokens: more than the 29 their pacing allows; 10 s apart, 6 a minute.
    (batch,) = collection_release(collection_key=KEY, estimator=KARY)
    assert batch.suppressed is refused
    if refused:
        assert "rate validation" in batch.reason


@pytest.mark.django_db(transaction=True)
def test_a_run_skips_a_job_another_run_holds_and_resumes_it_once_released(rules) -> None:
    if not connection.features.has_select_for_update_skip_locked:
        pytest.skip("SQLite runs one writer at a time: no run ever sees another's job held")
    for device in range(4):
        receive(report(f"d{device}", one_hot(device)))
    job = ingest._job_take(KEY, size=2, wait=False, passed=set())  # another run's T0: two rows assigned a job
    rows = list(PendingReport.objects.filter(job=job))
    held, done = threading.Event(), threading.Event()

    def other_run_holds_its_job() -> None:  # ... and its T1 holds them while it checks
        try:
            with transaction.atomic():
                list(PendingReport.objects.select_for_update().filter(job=job))
                held.set()
                done.wait(30)
        finally:
            connections.close_all()

    other = threading.Thread(target=other_run_holds_its_job)
    other.start()
    try:
        assert held.wait(30)
        result = reports_ingest(collection_key=KEY, chunk=2)
        assert (result.verified, result.chunks) == (2, 1)  # the two new rows; the held job untouched
        assert set(PendingReport.objects.values_list("pk", flat=True)) == {row.pk for row in rows}
    finally:
        done.set()
        other.join(30)
    result = reports_ingest(collection_key=KEY, chunk=2)  # the job released unfinished: resumed
    assert (result.verified, result.chunks) == (2, 1) and not PendingReport.objects.exists()
    assert HelperJob.objects.count() == 2  # each job stored by the helper once
    assert sum(share.reports for share in LeaderShare.objects.all()) == 4


@pytest.mark.django_db(transaction=True)
def test_a_run_never_verifies_part_of_a_job_it_waits_for_a_row_another_run_holds_a_moment(rules) -> None:
    if not connection.features.has_select_for_update_skip_locked:
        pytest.skip("SQLite runs one writer at a time: no run ever sees another's job held")
    for device in range(3):
        receive(report(f"d{device}", one_hot(device)))
    job = ingest._job_take(KEY, size=2, wait=False, passed=set())
    last = PendingReport.objects.filter(job=job).order_by("pk").last()
    held = threading.Event()

    def another_run_holds_one_row_a_moment() -> None:  # as another run's T0 does
        try:
            with transaction.atomic():
                list(PendingReport.objects.select_for_update().filter(pk=last.pk))
                held.set()
                time.sleep(1)
        finally:
            connections.close_all()

    other = threading.Thread(target=another_run_holds_one_row_a_moment)
    other.start()
    assert held.wait(30)
    result = reports_ingest(collection_key=KEY)
    other.join(30)
    # The job whole (not its first row alone, stored under its id for good), then the third report.
    assert (result.accepted, result.chunks) == (3, 2) and not PendingReport.objects.exists()
    assert HelperJob.objects.count() == 2 and HelperShare.objects.filter(pair=job).get().reports == 2
    (batch,) = collection_release(collection_key=KEY, estimator=KARY)
    assert batch.reports == 3 and not batch.suppressed  # every pair the leader names, the helper holds


# ---------------------------------------------------------------- v2 reports stored before the upgrade to v3


def test_a_v2_report_stored_before_the_upgrade_is_ingested_and_counted(rules) -> None:
    old = report_v2("d1", 2, batch="locale=en_US")
    assert wire.report_json(old)["v"] == 2
    stored_v2(old)
    receive(batched("d2", 5, "locale=en_US"))  # a v3 upload beside it, in the same chunk
    result = reports_ingest(collection_key=KEY)
    assert (result.accepted, result.rejected) == (2, 0)
    leader, helper, reports = stored_sums()["locale=en_US"]
    assert reports == 2
    assert [(a + b) % Field128.MODULUS for a, b in zip(leader, helper, strict=True)] == (
        one_hot(2) + one_hot(5)
    ).tolist()
    assert spent_tokens() == 2 * 2 and not PendingReport.objects.exists()


def test_a_v3_report_stored_before_the_upgrade_to_v4_is_ingested_with_its_unbound_token(rules) -> None:
    old = report_v3("d1", 2)
    stored_v2(old)
    assert wire.report_json(old)["v"] == 3
    receive(batched("d2", 5, ""))  # a v4 upload beside it, in the same chunk
    assert (reports_ingest(collection_key=KEY).accepted, spent_tokens()) == (2, 2 * 2)


def test_a_stored_v2_report_still_opens_after_a_key_rotation(rules) -> None:
    stored_v2(report_v2("d1", 3))  # sealed to the keys current then
    keys_rotate(role="leader")
    keys_rotate(role="helper")
    assert reports_ingest(collection_key=KEY).accepted == 1
    assert LeaderShare.objects.get().reports == 1


@pytest.mark.parametrize(
    ("tamper", "reason"),
    [
        # A v4 token signs a v4 message: it does not verify as an older report's.
        pytest.param(lambda v2, v4: replace(v2, token=v4.token), "token_invalid", id="v2 shares under another token"),
        pytest.param(
            lambda v2, v4: replace(v2, batch_key="locale=fr_FR"),
            "share_unopened",
            id="v2 shares moved to another batch",
        ),
        pytest.param(
            lambda v2, v4: replace(v2, public=v4.public), "share_unopened", id="v2 shares with another public share"
        ),
        pytest.param(
            lambda v2, v4: replace(v2, leader=v2.helper, helper=v2.leader), "share_unopened", id="v2 shares swapped"
        ),
        pytest.param(lambda v2, v4: replace(v4, version=2), "token_invalid", id="v4 report in a body claiming v2"),
        pytest.param(lambda v2, v4: replace(v4, version=3), "token_invalid", id="v4 report in a body claiming v3"),
        pytest.param(lambda v2, v4: replace(v2, version=3), "share_unopened", id="v2 shares in a body claiming v3"),
    ],
)
def test_a_stored_v2_report_opens_only_in_its_own_context_and_version(rules, tamper, reason) -> None:
    v2, v4 = report_v2("d1", 1), batched("d2", 4, "")
    tampered = tamper(v2, v4)
    PendingReport.objects.create(collection_key=KEY, body=wire.report_bytes(tampered))
    result = reports_ingest(collection_key=KEY)
    assert (result.accepted, result.rejected) == (0, 1)
    assert rejections(KEY) == {"leader": {reason: 1}}
    assert not LeaderShare.objects.exists() and not SpentToken.objects.exists()


def test_a_stored_body_of_a_version_no_aggregator_opens_is_counted_malformed(rules) -> None:
    stored_v2(replace(report_v2("d1", 1), version=1))
    assert reports_ingest(collection_key=KEY).rejected == 1
    assert rejections(KEY) == {"leader": {"report_malformed": 1}}
