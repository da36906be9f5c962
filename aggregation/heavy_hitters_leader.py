"""The leader's part of a Poplar1 collection (aggregation.heavy_hitters): it opens the collection at
both aggregators, takes reports, and runs a level of the prefix tree with the helper over HTTP.

``level_run`` is one level of a walk: the leader checks the level against its own record (the
same rules the helper enforces on its own), verifies the reports in jobs of ``JOB_REPORTS`` with
the helper (aggregation.dap_poplar1: init, then continue; the helper decides each sketch itself,
and so does the leader), then releases the level: its own noised share goes to the helper with the
request for the helper's, and the counts are their sum. A job's id is the digest of what it holds,
and the leader commits a job's result only after the helper's answer, so a leader that stops
mid-level and runs the level again sends the helper the same job, which the helper answers as
before: no report is counted twice or lost. The leader keeps its noised share before it asks, so
the release's retry is the same request too.
"""

from __future__ import annotations

import hashlib
import secrets
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from django.db import connections, transaction

from aggregation import dap, dap_poplar1, helper_client
from aggregation import heavy_hitters as hh
from aggregation.models import CollectionRules, Poplar1Level, Poplar1Report
from aggregation.reports import PROOF_INVALID, rejections_add
from pfs_base.errors import NotAllowed
from pfs_device.tokens import IssuerPublicKey
from privacy.heavy_hitters import level_sigma
from privacy.vdaf.errors import VdafError
from privacy.vdaf.poplar1 import AggParam, Poplar1

STORE = "default"
JOB_REPORTS = (
    500  # a job well within the helper's request timeout (about 11 s at the leaf level, Field255, 2^20 elements)
)
# Jobs of a level in flight at once: one prepared while the helper works on another (its service runs
# two workers). One inside a transaction (a test's): another thread's connection would not see it.
JOBS_IN_FLIGHT = 2


@dataclass(frozen=True)
class LevelRelease:
    """A released level: its counts by prefix (0s and 1s), noised by both aggregators; the reports
    verified at it; the noise each aggregator added (its sigma); the reports either refused, by reason."""

    level: int
    counts: dict[str, int]
    reports: int
    sigma: float
    refused: dict[str, int]


def collection_open(
    *,
    collection_key: str,
    bits: int,
    min_cohort: int,
    epsilon: float,
    delta: float,
    levels: int,
    token_key: IssuerPublicKey | None = None,
    provision: bool = True,
) -> CollectionRules:
    """A Poplar1 collection at the leader (idempotent: a second call returns the first rules), and the
    helper's task for it. ``token_key``: the issuer's key of a real fleet's collection, whose devices'
    tokens both aggregators check (None: a simulated fleet's). ``provision=False``: not now (a
    simulated round's start: its dispatch provisions the helper, aggregation.services.collection_provision)."""
    rules, _ = CollectionRules.objects.using(STORE).get_or_create(
        key=collection_key,
        defaults={
            "length": bits,
            "min_cohort": min_cohort,
            "weight_bound": 1,
            "vdaf": hh.VDAF,
            "noise_epsilon": epsilon,
            "noise_delta": delta,
            "levels": levels,
            "noise_sigma": level_sigma(epsilon, delta, levels),  # ValueError now, not at the first release
            "token_key": None if token_key is None else {"n": str(token_key.modulus), "e": str(token_key.exponent)},
        },
    )
    if provision:
        helper_client.task_provision(rules)
    return rules


@dataclass(frozen=True)
class ShardedReports:
    """Simulated devices' Poplar1 reports, sharded: the leader's (nonce, public share, input share)
    and the helper's as its service takes them."""

    mine: list[tuple[bytes, bytes, bytes]]
    theirs: list[dap_poplar1.Poplar1Report]


def simulated_shard(
    rules: CollectionRules, measurements: list[tuple[bool, ...]], coins: Callable[[int], bytes] = secrets.token_bytes
) -> ShardedReports:
    """Shard each measurement as a device would (privacy.vdaf.poplar1); nothing is stored or sent.

    ``coins``: the devices' randomness (a simulated shard's keyed coins, so that a retried shard sends
    the helper the same reports, which it takes once)."""
    vdaf = hh.vdaf_of(rules)
    ctx = hh.context(rules.key)
    mine, theirs = [], []
    for measurement in measurements:  # sharding is per device: each proves its own report
        nonce = coins(Poplar1.NONCE_SIZE)
        public, shares = vdaf.shard(ctx, measurement, nonce, coins(vdaf.RAND_SIZE))
        encoded = vdaf.encode_public_share(public)
        mine.append((nonce, encoded, vdaf.encode_input_share(shares[hh.LEADER])))
        theirs.append(
            dap_poplar1.Poplar1Report(
                report_id=nonce.hex(),
                public_share=dap.b64(encoded),
                input_share=dap.b64(vdaf.encode_input_share(shares[hh.HELPER])),
            )
        )
    return ShardedReports(mine=mine, theirs=theirs)


def sharded_upload(rules: CollectionRules, reports: ShardedReports) -> int:
    """Hand the helper its shares of ``reports`` (in requests of at most dap_poplar1.MAX_JOB_REPORTS),
    then keep the leader's; how many."""
    for start in range(0, len(reports.theirs), dap_poplar1.MAX_JOB_REPORTS):
        request = dap_poplar1.Poplar1ReportsReq(
            collection=rules.key, reports=reports.theirs[start : start + dap_poplar1.MAX_JOB_REPORTS]
        )
        helper_client.call(
            "POST", rules.key, "/poplar1_reports", dap_poplar1.REPORTS, dap.encode(request), expect=(204,)
        )
    Poplar1Report.objects.using(STORE).bulk_create(
        Poplar1Report(collection_key=rules.key, report_id=nonce.hex(), nonce=nonce, public_share=p, input_share=s)
        for nonce, p, s in reports.mine
    )
    return len(reports.mine)


def simulated_reports(
    rules: CollectionRules, measurements: list[tuple[bool, ...]], coins: Callable[[int], bytes] = secrets.token_bytes
) -> int:
    """Shard each measurement as a device would and upload the reports to both aggregators; how many."""
    return sharded_upload(rules, simulated_shard(rules, measurements, coins))


def collection_finish(collection_key: str) -> None:
    """The walk is over: both aggregators drop the collection's input shares (the helper's through
    its task's DELETE), and neither takes a report or a level of it again."""
    helper_client.task_delete(collection_key)
    with transaction.atomic(using=STORE):
        CollectionRules.objects.using(STORE).filter(key=collection_key).update(closed=True)
        Poplar1Report.objects.using(STORE).filter(collection_key=collection_key).delete()


def level_run(collection_key: str, agg_param: AggParam) -> LevelRelease:
    """Verify every report at ``agg_param`` with the helper and release the level's noised counts."""
    rules = CollectionRules.objects.using(STORE).get(key=collection_key)
    vdaf = hh.vdaf_of(rules)
    encoded = vdaf.encode_agg_param(agg_param)
    agg_param = hh.agg_param_decode(vdaf, encoded)
    released = Poplar1Level.objects.using(STORE).filter(collection_key=collection_key, level=agg_param[0]).first()
    if released is not None and released.released and bytes(released.agg_param) == encoded:
        # A walk run again after a stop (the same question, as a walk is a function of its released
        # counts): the leader's own record of the release, nothing asked of anyone again.
        counts = released.counts or {}
        return LevelRelease(agg_param[0], counts, released.reports, hh.noise_sigma(rules), {})
    with transaction.atomic(using=STORE):
        hh.level_refusal(STORE, rules, agg_param, encoded)
        hh.level_open(STORE, rules, agg_param, encoded)
    refused: Counter[str] = Counter()
    jobs = _jobs(collection_key, agg_param)
    in_flight = 1 if transaction.get_connection(STORE).in_atomic_block else JOBS_IN_FLIGHT
    if in_flight == 1:
        for ids in jobs:
            refused.update(_job(rules, vdaf, agg_param, encoded, ids))
    else:
        # While the helper works on one job the leader prepares the next: the two processes' work
        # overlaps on the two cores. Each job commits on its own (its thread's connection).
        with ThreadPoolExecutor(max_workers=in_flight, thread_name_prefix="poplar1-job") as pool:
            for counts in pool.map(lambda ids: _job_in_thread(rules, vdaf, agg_param, encoded, ids), jobs):
                refused.update(counts)
    return _release(rules, vdaf, agg_param, dict(refused))


def _jobs(collection_key: str, agg_param: AggParam) -> list[list[str]]:
    """The level's jobs: the collection's reports in order of id, in slices of a fixed size (at most
    MAX_JOB_ELEMENTS output-share elements each), each holding the reports of its slice still to be
    verified at the level. A slice commits whole (_job), so a level run again after a stop finds the
    slices not committed exactly as they were: the same jobs, under the same ids, which the helper
    answers as it did; and the committed ones empty."""
    size = max(1, min(JOB_REPORTS, dap_poplar1.MAX_JOB_ELEMENTS // len(agg_param[1])))
    reports = Poplar1Report.objects.using(STORE).filter(collection_key=collection_key).order_by("report_id")
    rows = list(reports.values_list("report_id", "refused", "last_level"))
    jobs = []
    for start in range(0, len(rows), size):
        ids = [rid for rid, refused, last in rows[start : start + size] if not refused and last < agg_param[0]]
        if ids:
            jobs.append(ids)
    return jobs


def _job_in_thread(rules: CollectionRules, vdaf: Poplar1, agg_param: AggParam, encoded: bytes, ids: list[str]):
    try:
        return _job(rules, vdaf, agg_param, encoded, ids)
    finally:
        connections.close_all()  # this thread's own connections


def _job(rules: CollectionRules, vdaf: Poplar1, agg_param: AggParam, encoded: bytes, ids: list[str]) -> dict[str, int]:
    """One job of the level with the helper; the leader's part committed once the helper answered."""
    level = agg_param[0]
    job = hashlib.sha256(f"{rules.key}|{level}|{','.join(ids)}".encode()).hexdigest()[:32]
    prepared, _ = hh.prepare(STORE, rules, hh.LEADER, agg_param, ids)
    # (report, the aggregator that refused it, why): counted with the collection's rejections.
    refused = [(rid, "leader", reason) for rid, reason in prepared.refused.items()]
    sent = [rid for rid in ids if rid in prepared.states]
    ctx = hh.context(rules.key)
    field = vdaf.idpf.current_field(level)
    answers = _step(
        rules.key,
        job,
        "PUT",
        dap_poplar1.JOB_INIT,
        dap_poplar1.Poplar1JobInitReq(
            collection=rules.key,
            agg_param=dap.b64(encoded),
            shares=[
                dap_poplar1.Poplar1Share(rid, dap.b64(vdaf.encode_verifier_share(agg_param, prepared.shares[rid])))
                for rid in sent
            ],
        ),
        sent,
    )
    outputs, seconds = {}, []
    for rid in sent:
        answer = answers[rid]
        if answer.type != dap.CONTINUE:
            refused.append((rid, "helper", answer.report_error or "helper_rejected"))
            continue
        payload = dap.unb64(answer.payload, "payload")
        cut = 3 * field.ENCODED_SIZE
        try:
            message = vdaf.decode_verifier_message(agg_param, payload[:cut])
            theirs = vdaf.decode_verifier_share(agg_param, payload[cut:])
            state, mine = vdaf.verify_next(ctx, prepared.states[rid], message)
        except VdafError:
            refused.append((rid, "leader", PROOF_INVALID))
            continue
        # The helper gets the leader's second share of every report, whatever the leader decides:
        # it decides on its own, and a report either refuses is refused by both.
        seconds.append(dap_poplar1.Poplar1Share(rid, dap.b64(vdaf.encode_verifier_share(agg_param, mine))))
        if len(theirs) == 1 and hh.sketch_check(vdaf, agg_param, [mine, theirs]):
            outputs[rid] = vdaf.verify_next(ctx, state, None)
    finished: set[str] = set()
    if seconds:
        ids_second = [share.report_id for share in seconds]
        answers = _step(
            rules.key,
            job,
            "POST",
            dap_poplar1.JOB_CONTINUE,
            dap_poplar1.Poplar1JobContinueReq(collection=rules.key, shares=seconds),
            ids_second,
        )
        finished = {rid for rid in ids_second if answers[rid].type == dap_poplar1.FINISH and rid in outputs}
        refused += [
            (rid, "leader", PROOF_INVALID)
            if rid not in outputs
            else (rid, "helper", answers[rid].report_error or "helper_rejected")
            for rid in ids_second
            if rid not in finished
        ]
    with transaction.atomic(using=STORE):
        row = Poplar1Level.objects.using(STORE).select_for_update().get(collection_key=rules.key, level=level)
        reports = Poplar1Report.objects.using(STORE).filter(collection_key=rules.key)
        if reports.filter(report_id__in=ids, last_level__gte=level).exists():
            # Another run of this level (a task delivered twice) committed this job first, under the
            # level's lock: its reports are counted once.
            return {}
        row.agg_share = hh.share_add(vdaf, agg_param, bytes(row.agg_share), [outputs[rid] for rid in sorted(finished)])
        row.reports += len(finished)
        row.save(update_fields=["agg_share", "reports"])
        reports.filter(report_id__in=ids).update(last_level=level)
        failed = [rid for rid, _, reason in refused if reason == PROOF_INVALID]
        reports.filter(report_id__in=failed).update(refused=True)
        by_role = Counter((role, reason) for _, role, reason in refused)
        if by_role:
            rejections_add(collection_key=rules.key, counts=dict(by_role))
    return dict(Counter(reason for _, _, reason in refused))


def _step(collection: str, job: str, method: str, message: str, request, ids: list[str]) -> dict:
    if not ids:
        return {}
    body = helper_client.call(method, collection, f"/poplar1_jobs/{job}", message, dap.encode(request), expect=(200,))
    resp = dap_poplar1.Poplar1JobResp.parse(body)
    if [r.report_id for r in resp.resps] != ids:
        # As DAP says: a job whose answer lists other reports, or in another order, is abandoned.
        raise helper_client.HelperRefused(
            200, "invalid_message", "the helper answered for other reports than the job's"
        )
    return {r.report_id: r for r in resp.resps}


def _release(rules: CollectionRules, vdaf: Poplar1, agg_param: AggParam, refused: dict[str, int]) -> LevelRelease:
    level = agg_param[0]
    with transaction.atomic(using=STORE):
        row = Poplar1Level.objects.using(STORE).select_for_update().get(collection_key=rules.key, level=level)
        if row.reports < rules.min_cohort:
            raise NotAllowed(
                f"level {level} holds {row.reports} verified reports, fewer than the minimum cohort of {rules.min_cohort}"
            )
        if not row.release:  # the leader's noised share, drawn once and kept: a retry asks the same
            row.release = vdaf.encode_agg_share(
                agg_param, hh.noised_share(vdaf, rules, agg_param, bytes(row.agg_share))
            )
            row.save(update_fields=["release"])
    request = dap_poplar1.Poplar1ShareReq(
        collection=rules.key, level=level, reports=row.reports, leader_share=dap.b64(bytes(row.release))
    )
    body = helper_client.call(
        "POST", rules.key, "/poplar1_aggregate_shares", dap_poplar1.SHARE_REQ, dap.encode(request), expect=(200,)
    )
    answer = dap_poplar1.Poplar1ShareResp.parse(body)
    helper = vdaf.decode_agg_share(agg_param, dap.unb64(answer.helper_share, "helper_share"))
    counts = hh.released_counts(vdaf, agg_param, [vdaf.decode_agg_share(agg_param, bytes(row.release)), helper])
    with transaction.atomic(using=STORE):
        Poplar1Level.objects.using(STORE).filter(pk=row.pk).update(released=True, counts=counts, agg_share=b"")
        hh.reports_drop_when_spent(STORE, rules)
    return LevelRelease(level=level, counts=counts, reports=row.reports, sigma=hh.noise_sigma(rules), refused=refused)
