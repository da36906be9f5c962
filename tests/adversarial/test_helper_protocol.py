"""Attacks on the helper's endpoints (aggregation.dap, aggregation.helper_api) by whoever can reach
them: a leader's operator that wants more than the protocol gives, or anyone on the wire.

Every request here goes through the helper's URLs and views as bytes, as the leader's client sends
them (the helper's views run in this process; tests/integration/test_two_services.py runs the same
over a socket to the helper as a process of its own). A refusal writes nothing at the helper.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from django.test import Client, override_settings

from aggregation import dap, helper_client
from aggregation.issuer import issuer_public_key
from aggregation.models import CollectionRules, HelperJob, HelperRelease, HelperShare, SpentToken
from aggregation.reports import rejections
from aggregation.services import collection_rules_open
from analyses.services.collector import ClientNoiseEstimator, collection_release
from pfs_device import wire
from tests.unit.test_report_ingest import receive
from tests.unit.test_report_protocol import DOMAIN, KEY, ORACLE, one_hot, report, rules_open

pytestmark = pytest.mark.django_db
HELPER_STORE = "helper"
KARY = ClientNoiseEstimator(mechanism="asymmetric_ohe", epsilon0=3.0, domain_size=DOMAIN)


@pytest.fixture
def rules():
    return rules_open()


@pytest.fixture
def helper():
    """An HTTP client of the helper's service (its URLs, its views)."""
    with override_settings(ROOT_URLCONF="pfs_web.urls_helper"):
        yield Client()


def send(helper: Client, method: str, path: str, message: str, body: bytes, *, collection: str = KEY, token=None):
    auth = dap.auth_token(b"x", "x") if token == "wrong" else token
    if auth is None:
        from django.conf import settings

        auth = dap.auth_token(settings.PFS_AGGREGATOR_AUTH_SECRET, collection)
    return helper.generic(
        method,
        f"/tasks/{dap.task_id(collection)}{path}",
        body,
        content_type=dap.media_type(message),
        HTTP_AUTHORIZATION=f"Bearer {auth}",
    )


def jobs_captured(monkeypatch) -> list[tuple[str, dap.AggregationJobInitReq]]:
    """Every aggregation job the leader sends, as it sends it (the job still runs)."""
    sent: list[tuple[str, dap.AggregationJobInitReq]] = []
    real = helper_client.job_run

    def capture(job, request):
        sent.append((job, request))
        return real(job, request)

    monkeypatch.setattr(helper_client, "job_run", capture)
    return sent


def helper_state() -> tuple:
    """Everything the helper keeps of the collection: a refusal changes none of it."""
    return (
        sorted(HelperShare.objects.using(HELPER_STORE).values_list("pair", "reports")),
        sorted(SpentToken.objects.using(HELPER_STORE).values_list("token_digest", flat=True)),
        sorted(HelperJob.objects.using(HELPER_STORE).values_list("job", flat=True)),
        list(CollectionRules.objects.using(HELPER_STORE).values_list("min_cohort", "noise_epsilon", "closed")),
    )


def honest_job(monkeypatch, devices=("a", "b", "c")) -> tuple[str, dap.AggregationJobInitReq]:
    from aggregation.ingest import reports_ingest

    sent = jobs_captured(monkeypatch)
    for device in devices:
        receive(report(device, one_hot(1)))
    assert reports_ingest(collection_key=KEY).accepted == len(devices)
    (job,) = sent
    return job


# ------------------------------------------------------------------ authentication and framing


@pytest.mark.parametrize("token", ["wrong", "", "another collection's"])
def test_a_request_without_the_collections_token_is_refused_logged_and_changes_nothing(
    rules, monkeypatch, helper, caplog, token
) -> None:
    job_id, request = honest_job(monkeypatch)
    before = helper_state()
    if token == "another collection's":
        from django.conf import settings

        token = dap.auth_token(settings.PFS_AGGREGATOR_AUTH_SECRET, "another-collection")
    for path, message, body in [
        (f"/aggregation_jobs/{job_id}-2", dap.JOB_INIT, dap.encode(request)),
        ("/aggregate_shares", dap.SHARE_REQ, dap.encode(dap.AggregateShareReq(collection=KEY, batches={"": []}))),
        ("", dap.TASK_CONFIG, json.dumps({"collection": KEY}).encode()),
    ]:
        method = "POST" if message == dap.SHARE_REQ else "DELETE" if message == dap.TASK_CONFIG else "PUT"
        answer = send(helper, method, path, message, body, token=token)
        assert answer.status_code == 401 and answer.json()["code"] == "unauthorized"
    assert helper_state() == before
    refusals = [r for r in caplog.records if "wrong aggregator auth token" in r.getMessage()]
    assert len(refusals) == 3 and all(r.dap_task == dap.task_id(KEY) for r in refusals)
    given = dap.auth_token(b"x", "x") if token == "wrong" else token
    assert not given or all(given not in str(vars(r)) for r in refusals)  # the token itself is never logged


def test_a_body_for_another_collection_than_its_path_or_another_version_is_refused(rules, helper) -> None:
    body = dap.encode(dap.AggregateShareReq(collection="another", batches={}))
    answer = send(helper, "POST", "/aggregate_shares", dap.SHARE_REQ, body)
    assert answer.status_code == 400 and answer.json()["code"] == "invalid_message"
    body = dap.encode(dap.AggregateShareReq(collection=KEY, batches={}))
    old = helper.post(
        f"/tasks/{dap.task_id(KEY)}/aggregate_shares",
        body,
        content_type=dap.media_type(dap.SHARE_REQ).replace("version=1", "version=0"),
    )
    assert old.status_code == 415
    assert not HelperRelease.objects.using(HELPER_STORE).exists()


# ------------------------------------------------------------------ the task's configuration


@pytest.mark.parametrize(
    "change",
    [
        pytest.param({"min_cohort": 1}, id="a lower minimum cohort"),
        pytest.param({"noise_epsilon": 100.0, "noise_delta": 1e-5}, id="other noise"),
        pytest.param({"noise_epsilon": 1.0, "noise_delta": 0}, id="discrete Laplace noise"),
        pytest.param({"token_key": {"n": "3233", "e": "17"}}, id="a token key of the leader's own"),
        pytest.param({"token_key": None}, id="made a simulated collection"),
        pytest.param({"verify_key": dap.b64(b"\x01" * 32)}, id="another verification key"),
    ],
)
def test_the_leader_cannot_reconfigure_a_task_the_helper_has(rules, helper, change) -> None:
    config = json.loads(dap.encode(_config(rules)))
    before = helper_state()
    answer = send(helper, "PUT", "", dap.TASK_CONFIG, json.dumps({**config, **change}).encode())
    assert answer.status_code == 409 and answer.json()["code"] == "conflict"
    assert helper_state() == before
    assert send(helper, "PUT", "", dap.TASK_CONFIG, json.dumps(config).encode()).status_code == 200  # the same: fine


def _config(rules: CollectionRules) -> dap.TaskConfig:
    captured = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(helper_client, "call", lambda *args, **kwargs: captured.append(args[4]))
        helper_client.task_provision(rules)
    return dap.TaskConfig.parse(captured[0])


def test_a_task_config_takes_noise_delta_zero_for_the_discrete_laplace_and_no_negative_one(rules) -> None:
    config = json.loads(dap.encode(_config(rules)))
    laplace = dap.TaskConfig.parse(json.dumps({**config, "noise_epsilon": 1.0, "noise_delta": 0}).encode())
    assert (laplace.noise_epsilon, laplace.noise_delta) == (1.0, 0.0)
    with pytest.raises(dap.MessageError, match="noise_delta: must be a non-negative number"):
        dap.TaskConfig.parse(json.dumps({**config, "noise_epsilon": 1.0, "noise_delta": -1e-6}).encode())
    with pytest.raises(dap.MessageError, match="noise_epsilon: must be a positive number"):
        dap.TaskConfig.parse(json.dumps({**config, "noise_epsilon": 0, "noise_delta": 0}).encode())


def test_a_helper_that_takes_no_simulated_fleets_refuses_their_task_and_their_shares(db, helper, settings) -> None:
    settings.PFS_HELPER_ACCEPT_SIMULATED = False
    with pytest.raises(helper_client.HelperRefused, match="takes no simulated"):
        collection_rules_open(key="simulated", length=DOMAIN, min_cohort=3, weight_bound=1)
    assert not CollectionRules.objects.using(HELPER_STORE).filter(key="simulated").exists()


def test_simulated_shares_never_join_a_collection_of_real_devices(rules, helper) -> None:
    share = dap.SimulatedShare(batch="", pair="p1", vector=dap.b64(b"\x00" * 8 * DOMAIN), reports=1000, min_cohort=1)
    body = dap.encode(dap.SimulatedSharesReq(collection=KEY, source="shard:1", shares=[share]))
    answer = send(helper, "POST", "/simulated_shares", dap.SIMULATED, body)
    assert answer.status_code == 403 and "devices' reports only" in answer.json()["detail"]
    assert not HelperShare.objects.using(HELPER_STORE).exists()


def test_a_devices_report_never_counts_in_a_simulated_collection(db, monkeypatch) -> None:
    # The leader provisions a real fleet's collection as simulated (no token key) and sends the
    # devices' reports into it: the helper takes none of them.
    from privacy.mechanisms import report_weight_bound

    collection_rules_open(key=KEY, length=DOMAIN, min_cohort=1, weight_bound=report_weight_bound(ORACLE, DOMAIN, 1e-9))
    CollectionRules.objects.filter(key=KEY).update(token_key={"n": "1", "e": "1"})  # only the leader's copy
    sent = jobs_captured(monkeypatch)
    from aggregation.ingest import reports_ingest

    receive(report("a", one_hot(1)))
    monkeypatch.setattr("aggregation.reports.token_valid", lambda *args, **kwargs: True)  # the leader lets it through
    assert reports_ingest(collection_key=KEY).accepted == 0
    assert len(sent) == 1 and rejections(KEY) == {"helper": {"unknown_collection": 1}}
    assert not HelperShare.objects.using(HELPER_STORE).exists()


# ------------------------------------------------------------------ aggregation jobs


def test_a_replayed_job_gets_the_same_answer_and_counts_nothing_twice(rules, monkeypatch, helper) -> None:
    job_id, request = honest_job(monkeypatch)
    state = helper_state()
    first = send(helper, "PUT", f"/aggregation_jobs/{job_id}", dap.JOB_INIT, dap.encode(request))
    second = send(helper, "PUT", f"/aggregation_jobs/{job_id}", dap.JOB_INIT, dap.encode(request))
    assert first.status_code == second.status_code == 200 and first.content == second.content
    assert all(r.type == dap.CONTINUE for r in dap.AggregationJobResp.parse(first.content).verify_resps)
    assert helper_state() == state


def test_another_body_under_a_jobs_id_is_refused(rules, monkeypatch, helper) -> None:
    job_id, request = honest_job(monkeypatch)
    state = helper_state()
    reordered = replace(request, verify_inits=list(reversed(request.verify_inits)))
    answer = send(helper, "PUT", f"/aggregation_jobs/{job_id}", dap.JOB_INIT, dap.encode(reordered))
    assert answer.status_code == 409 and "exists with another request" in answer.json()["detail"]
    assert helper_state() == state


def test_a_jobs_reports_replayed_or_reordered_under_a_new_id_are_refused_as_spent(rules, monkeypatch, helper) -> None:
    job_id, request = honest_job(monkeypatch)
    for n, inits in enumerate([request.verify_inits, list(reversed(request.verify_inits))]):
        body = dap.encode(replace(request, verify_inits=inits))
        answer = send(helper, "PUT", f"/aggregation_jobs/{job_id}-again-{n}", dap.JOB_INIT, body)
        resps = dap.AggregationJobResp.parse(answer.content).verify_resps
        assert [(r.type, r.report_error) for r in resps] == [(dap.REJECT, "token_reused")] * 3
    assert sum(HelperShare.objects.using(HELPER_STORE).values_list("reports", flat=True)) == 3


def test_a_job_naming_one_report_twice_is_refused_whole(rules, monkeypatch, helper) -> None:
    job_id, request = honest_job(monkeypatch)
    state = helper_state()
    doubled = replace(request, verify_inits=[request.verify_inits[0]] * 2)
    answer = send(helper, "PUT", f"/aggregation_jobs/{job_id}-doubled", dap.JOB_INIT, dap.encode(doubled))
    assert answer.status_code == 400 and "distinct" in answer.json()["detail"]
    assert helper_state() == state


def test_a_leader_that_forges_its_verifier_share_gets_no_report_accepted(rules, monkeypatch, helper) -> None:
    job_id, request = honest_job(monkeypatch, devices=("a",))
    fresh = report("d", one_hot(2))
    forged = replace(
        request.verify_inits[0],
        report_id=fresh.token.digest,
        token={"nonce": dap.b64(fresh.token.nonce), "signature": dap.b64(fresh.token.signature)},
        encrypted_input_share={"enc": dap.b64(fresh.helper.enc), "payload": dap.b64(fresh.helper.ciphertext)},
        public_share=dap.b64(fresh.public),
        leader_share_digest=dap.b64(wire.share_digest(fresh.leader)),  # the token names this report
    )  # another report's verifier share: the proof cannot add up
    answer = send(
        helper, "PUT", "/aggregation_jobs/forged", dap.JOB_INIT, dap.encode(replace(request, verify_inits=[forged]))
    )
    (resp,) = dap.AggregationJobResp.parse(answer.content).verify_resps
    assert (resp.type, resp.report_error) == (dap.REJECT, "proof_invalid")


def three_ingested():
    """Three devices' reports received, then verified by both aggregators: the leader's result."""
    from aggregation.ingest import reports_ingest

    for device in ("a", "b", "c"):
        receive(report(device, one_hot(1)))
    return reports_ingest(collection_key=KEY)


def _between_verify_and_lock(monkeypatch, meanwhile) -> list[int]:
    """Run ``meanwhile(request)`` once, as a concurrent request would, after the helper's first
    (unlocked) verification of a job and before it locks the collection; the transaction depth of
    the helper's store at each verification, for the caller to check."""
    from django.db import connections

    from aggregation import helper_service

    real, depths = helper_service._job_verify, []

    def verify(rules, request, job, spent):
        depths.append(len(connections[HELPER_STORE].atomic_blocks))
        verdict = real(rules, request, job, spent)
        if len(depths) == 1:
            meanwhile(request)
        return verdict

    monkeypatch.setattr(helper_service, "_job_verify", verify)
    return depths


def test_the_helper_verifies_a_job_before_it_locks_the_collection(rules, monkeypatch) -> None:
    """Concurrent jobs of one collection verify side by side; only the commit is serialized."""
    from django.db import connections

    outside = len(connections[HELPER_STORE].atomic_blocks)
    depths = _between_verify_and_lock(monkeypatch, lambda request: None)
    honest_job(monkeypatch)
    assert depths == [outside]  # once, outside any transaction: nothing changed meanwhile
    assert sum(HelperShare.objects.using(HELPER_STORE).values_list("reports", flat=True)) == 3


def test_a_token_spent_while_the_helper_verified_a_job_is_refused_as_reused(rules, monkeypatch) -> None:
    """A concurrent job that spends one of this job's tokens first (a leader replaying a report in
    two jobs at once): the helper reads the spent tokens again under its lock, verifies again, and
    counts that report once, in the other job."""

    def spend_first(request):
        SpentToken.objects.using(HELPER_STORE).create(
            role="helper", collection_key=KEY, token_digest=request.verify_inits[0].report_id, job="concurrent"
        )

    depths = _between_verify_and_lock(monkeypatch, spend_first)
    result = three_ingested()
    assert (result.accepted, result.rejected) == (2, 1) and len(depths) == 2
    assert rejections(KEY)["helper"] == {"token_reused": 1}
    assert sum(HelperShare.objects.using(HELPER_STORE).values_list("reports", flat=True)) == 2


def test_a_job_verified_while_its_collection_closed_counts_nothing(rules, monkeypatch) -> None:
    """The release closes the collection between the helper's verification and its lock: the job's
    reports come too late, and none joins the released shares."""

    def close(request):
        CollectionRules.objects.using(HELPER_STORE).filter(key=KEY).update(closed=True)

    depths = _between_verify_and_lock(monkeypatch, close)
    result = three_ingested()
    assert (result.accepted, result.rejected) == (0, 3) and len(depths) == 2
    assert rejections(KEY)["helper"] == {"collection_closed": 3}
    assert not HelperShare.objects.using(HELPER_STORE).exists()


# ------------------------------------------------------------------ aggregate shares


def test_the_helper_releases_once_the_same_answer_to_a_retry_and_nothing_to_another_request(
    rules, monkeypatch, helper
) -> None:
    honest_job(monkeypatch)
    pairs = list(HelperShare.objects.using(HELPER_STORE).values_list("pair", flat=True))
    request = dap.encode(dap.AggregateShareReq(collection=KEY, batches={"": pairs}, issued_statement=_statement()))
    first = send(helper, "POST", "/aggregate_shares", dap.SHARE_REQ, request)
    again = send(helper, "POST", "/aggregate_shares", dap.SHARE_REQ, request)
    assert first.status_code == again.status_code == 200 and first.content == again.content  # no second noise draw
    other = dap.encode(dap.AggregateShareReq(collection=KEY, batches={"": [*pairs, "a-pair-it-never-held"]}))
    refused = send(helper, "POST", "/aggregate_shares", dap.SHARE_REQ, other)
    assert refused.status_code == 409 and "released" in refused.json()["detail"]
    # And a job after the release finds the collection closed.
    late = send(helper, "PUT", "/aggregation_jobs/late", dap.JOB_INIT, _one_report_job())
    assert {r.report_error for r in dap.AggregationJobResp.parse(late.content).verify_resps} == {"collection_closed"}


def _one_report_job() -> bytes:
    fresh = report("late", one_hot(3))
    init = dap.VerifyInit(
        report_id=fresh.token.digest,
        batch="",
        time=0.0,
        version=fresh.version,
        public_share=dap.b64(fresh.public),
        token={"nonce": dap.b64(fresh.token.nonce), "signature": dap.b64(fresh.token.signature)},
        encrypted_input_share={"enc": dap.b64(fresh.helper.enc), "payload": dap.b64(fresh.helper.ciphertext)},
        input_share=None,
        payload=dap.b64(b"\x00" * 64),
    )
    return dap.encode(dap.AggregationJobInitReq(collection=KEY, min_cohort=0, verify_inits=[init]))


def test_the_helpers_own_floor_holds_whatever_the_leaders_rules_say(rules, monkeypatch, settings) -> None:
    honest_job(monkeypatch, devices=("a", "b", "c", "d"))
    settings.PFS_HELPER_MIN_COHORT_FLOOR = 5  # the helper's operator: never fewer than 5
    (batch,) = collection_release(collection_key=KEY, estimator=KARY)
    assert batch.suppressed and batch.reason.startswith("helper: fewer than 5")


def test_a_shard_of_many_large_batches_is_taken_in_one_request(db, helper) -> None:
    # 24 cohorts of 16,384 buckets: 4.5 MB of base64, more than Django's limit for form data.
    collection_rules_open(key="wide", length=16_384, min_cohort=1, weight_bound=1)
    vector = dap.b64(b"\x00" * 8 * 16_384)
    shares = [
        dap.SimulatedShare(batch=f"c={i}", pair=f"p{i}", vector=vector, reports=10, min_cohort=1) for i in range(24)
    ]
    body = dap.encode(dap.SimulatedSharesReq(collection="wide", source="shard:1", shares=shares))
    assert len(body) > 4_000_000
    assert send(helper, "POST", "/simulated_shares", dap.SIMULATED, body, collection="wide").status_code == 204
    assert HelperShare.objects.using(HELPER_STORE).count() == 24


def test_the_helper_refuses_a_burst_from_the_issuers_count_and_its_own_floor(db, monkeypatch, helper) -> None:
    # A leader can provision no rate: the helper counts the issuer's tokens (80, signed) and keeps its
    # own pacing floor (PFS_DEVICE_MIN_SPREAD): 80 reports sent at once, at most 46 in a minute allowed.
    from privacy.mechanisms import report_weight_bound

    collection_rules_open(
        key=KEY,
        length=DOMAIN,
        min_cohort=3,
        weight_bound=report_weight_bound(ORACLE, DOMAIN, 1e-9),
        token_key=issuer_public_key(KEY),
    )
    honest_job(monkeypatch, devices=[f"d{i}" for i in range(80)])
    pairs = list(HelperShare.objects.using(HELPER_STORE).values_list("pair", flat=True))
    request = dap.AggregateShareReq(collection=KEY, batches={"": pairs}, issued_statement=_statement())
    answer = send(helper, "POST", "/aggregate_shares", dap.SHARE_REQ, dap.encode(request))
    (share,) = dap.AggregateShareResp.parse(answer.content).batches.values()
    assert share.reports is None and share.refused.startswith("helper:") and "rate validation" in share.refused
    assert "more than 46 in a 60-second window" in share.refused
    assert not HelperShare.objects.using(HELPER_STORE).exists()  # refused whole, its shares deleted


def _statement(key: str = KEY) -> dict:
    """The issuer's signed count for ``key``, as the leader relays it."""
    from aggregation.issuer import issued_statement

    return issued_statement(key).as_json()
