"""The helper's part of a Poplar1 collection (aggregation.heavy_hitters), as its own service runs it.

Behind the thin views of aggregation.helper_api, on the helper's store and with the helper's rules:

- ``reports_store``: a simulated fleet's helper input shares (a collection of real devices takes
  none: their shares would come sealed to the helper's key);
- ``job_init``: a job's first step. The helper checks the level against its own record of the
  collection (aggregation.heavy_hitters.level_refusal), runs verify_init on each report it holds and
  may verify at the level, adds the leader's first share to its own (the masked sketch), runs
  verify_next, and answers the message and its second share; it marks the reports verified at the
  level (their randomness is spent) and keeps its state, in one transaction;
- ``job_continue``: the second step. The sketch of each report must add up to zero with the
  leader's second share: the helper decides, and adds the output shares of the reports it accepted
  to the level's aggregate share;
- ``aggregate_share``: the level's release, once: at least the minimum cohort of reports, as many as
  the leader aggregated, and the helper's own noise.

Every step is idempotent by its request: a retry gets the same bytes, another request under a job
id (or a level already released) is a conflict.
"""

from __future__ import annotations

from collections import Counter

from django.conf import settings
from django.db import IntegrityError, transaction

from aggregation import dap, dap_poplar1, helper_service
from aggregation import heavy_hitters as hh
from aggregation.aggregators import HELPER
from aggregation.dap_poplar1 import FINISH
from aggregation.helper_service import UnknownTask, _digest
from aggregation.models import CollectionRules, HelperJob, Poplar1Job, Poplar1Level, Poplar1Report
from aggregation.reports import PROOF_INVALID, SHARE_MALFORMED
from pfs_base import metrics
from pfs_base.errors import Conflict, NotAllowed
from privacy.report_vdaf import report_nonce
from privacy.vdaf.errors import VdafError

STORE = HELPER.store


class UnknownJob(LookupError):
    """A continue step for a job the helper never started."""


def _rules(collection_key: str, *, lock: bool = False) -> CollectionRules:
    rows = CollectionRules.objects.using(STORE)
    rules = (rows.select_for_update() if lock else rows).filter(key=collection_key).first()
    if rules is None:
        raise UnknownTask(f"the helper has no task for collection {collection_key}")
    hh.vdaf_of(rules)  # NotAllowed for a Prio3 collection
    return rules


def _same_collection(request_collection: str, collection_key: str) -> None:
    if request_collection != collection_key:
        raise dap.MessageError("collection: the body names another collection than the path")


# ------------------------------------------------------------------ reports


def reports_store(collection_key: str, request: dap_poplar1.Poplar1ReportsReq) -> int:
    """Store a simulated fleet's helper input shares; how many were new. The same report again
    changes nothing; another report under a stored id (its nonce) is a conflict."""
    _same_collection(request.collection, collection_key)
    rules = _rules(collection_key)
    if rules.token_key is not None:
        raise NotAllowed("this collection takes devices' reports only, no simulated shares")
    vdaf = hh.vdaf_of(rules)
    rows = []
    for report in request.reports:
        public, share = dap.unb64(report.public_share, "public_share"), dap.unb64(report.input_share, "input_share")
        try:
            vdaf.decode_public_share(public)
            vdaf.decode_input_share(hh.HELPER, share)
        except VdafError as error:
            raise dap.MessageError(f"report {report.report_id}: {error}") from None
        rows.append((report.report_id, public, share))
    with transaction.atomic(using=STORE):
        if _rules(collection_key, lock=True).closed:
            raise NotAllowed("the collection takes no more reports: its first level was asked")
        held = {
            row.report_id: row
            for row in Poplar1Report.objects.using(STORE).filter(
                collection_key=collection_key, report_id__in=[r[0] for r in rows]
            )
        }
        new = []
        for report_id, public, share in rows:
            if report_id in held:
                if (bytes(held[report_id].public_share), bytes(held[report_id].input_share)) != (public, share):
                    raise Conflict(f"report {report_id} is held with other shares (a nonce is used once)")
                continue
            new.append(
                Poplar1Report(
                    collection_key=collection_key,
                    report_id=report_id,
                    nonce=bytes.fromhex(report_id),
                    public_share=public,
                    input_share=share,
                )
            )
        Poplar1Report.objects.using(STORE).bulk_create(new)
    return len(new)


def uploads_store(collection_key: str, job: str, body: bytes) -> bytes:
    """Real devices' reports, as the leader relays them (Poplar1UploadsReq): the helper checks each
    token over the report as it holds it, its own spent tokens, opens its share with its own key and
    decodes it, then keeps the reports it accepted with their spent tokens, in one transaction. The
    answer (Poplar1JobResp: finish or reject per report) is kept under the job's id: a retry gets
    the same bytes, another request under the id is a conflict."""
    digest = _digest(body)
    request = dap_poplar1.Poplar1UploadsReq.parse(body)
    _same_collection(request.collection, collection_key)
    rules = _rules(collection_key)
    if rules.token_key is None:
        raise NotAllowed("this collection takes a simulated fleet's shares only, no device's report")
    try:
        with transaction.atomic(using=STORE):
            rules = _rules(collection_key, lock=True)  # uploads and a level's job never interleave
            replay = helper_service.job_answer(collection_key, job, digest)
            if replay is not None:
                return replay
            if rules.closed or Poplar1Level.objects.using(STORE).filter(collection_key=collection_key).exists():
                raise NotAllowed("the collection takes no more reports: its first level was asked")
            resps, rows, counts = _uploads_checked(rules, request)
            answer = dap.encode(dap_poplar1.Poplar1JobResp(resps=resps))
            HelperJob.objects.using(STORE).create(
                collection_key=collection_key, job=job, request_digest=digest, response=answer
            )
            Poplar1Report.objects.using(STORE).bulk_create(rows)
            spent = [
                upload.report_id for upload, resp in zip(request.uploads, resps, strict=True) if resp.type == FINISH
            ]
            helper_service.spent_and_rejected_store(rules, job, spent, counts)
    except IntegrityError:  # the same job committed by a concurrent request: answer as it did
        replay = helper_service.job_answer(collection_key, job, digest)
        if replay is None:
            raise
        return replay
    metrics.helper_job_counted(accepted=len(rows), rejected={reason: n for (_, reason), n in counts.items()})
    return answer


def _uploads_checked(
    rules: CollectionRules, request: dap_poplar1.Poplar1UploadsReq
) -> tuple[list[dap_poplar1.Poplar1Resp], list[Poplar1Report], Counter]:
    """Each upload's verdict, the reports to keep (by their Poplar1 nonce) and the rejections by reason."""
    vdaf = hh.vdaf_of(rules)
    reasons, opened = helper_service.open_checks(rules, request.uploads)
    resps, rows, counts = [], [], Counter()
    for i, upload in enumerate(request.uploads):
        reason = reasons.get(i)
        if reason is None:
            public, share = opened[i]
            try:
                vdaf.decode_public_share(public)
                vdaf.decode_input_share(hh.HELPER, share)
            except VdafError:
                reason = SHARE_MALFORMED
        if reason is not None:
            counts["helper", reason] += 1
            resps.append(dap_poplar1.Poplar1Resp(upload.report_id, dap.REJECT, report_error=reason))
            continue
        # The VDAF nonce is the token's (report_nonce): the leader keeps the report under the same id.
        nonce = report_nonce(dap.unb64(upload.token["nonce"], "token.nonce"))
        rows.append(
            Poplar1Report(
                collection_key=rules.key, report_id=nonce.hex(), nonce=nonce, public_share=public, input_share=share
            )
        )
        resps.append(dap_poplar1.Poplar1Resp(upload.report_id, FINISH))
    return resps, rows, counts


# ------------------------------------------------------------------ jobs


def job_init(collection_key: str, job: str, body: bytes) -> bytes:
    """A job's first step, answered once and kept (Poplar1JobResp, encoded)."""
    digest = _digest(body)
    request = dap_poplar1.Poplar1JobInitReq.parse(body)
    _same_collection(request.collection, collection_key)
    rules = _rules(collection_key)
    vdaf = hh.vdaf_of(rules)
    encoded = dap.unb64(request.agg_param, "agg_param")
    try:
        with transaction.atomic(using=STORE):
            rules = _rules(collection_key, lock=True)  # a job and a release never interleave
            replay = _init_replay(collection_key, job, digest)
            if replay is not None:
                return replay
            agg_param = hh.agg_param_decode(vdaf, encoded)
            if len(request.shares) * len(agg_param[1]) > dap_poplar1.MAX_JOB_ELEMENTS:
                raise NotAllowed(
                    f"a job of {len(request.shares):,} reports x {len(agg_param[1]):,} prefixes holds more than "
                    f"{dap_poplar1.MAX_JOB_ELEMENTS:,} output-share elements: send smaller jobs"
                )
            hh.level_refusal(STORE, rules, agg_param, encoded, floor=settings.PFS_HELPER_MIN_COHORT_FLOOR)
            hh.level_open(STORE, rules, agg_param, encoded)
            resps, state = _first_step(rules, vdaf, agg_param, request)
            answer = dap.encode(dap_poplar1.Poplar1JobResp(resps=resps))
            Poplar1Report.objects.using(STORE).filter(collection_key=collection_key, report_id__in=list(state)).update(
                last_level=agg_param[0]
            )
            Poplar1Job.objects.using(STORE).create(
                collection_key=collection_key,
                job=job,
                level=agg_param[0],
                init_digest=digest,
                init_response=answer,
                state=hh.state_dump(state),
            )
    except IntegrityError:  # the same job committed by a concurrent request: answer as it did
        replay = _init_replay(collection_key, job, digest)
        if replay is None:
            raise
        return replay
    return answer


def _init_replay(collection_key: str, job: str, digest: str) -> bytes | None:
    stored = Poplar1Job.objects.using(STORE).filter(collection_key=collection_key, job=job).first()
    if stored is None:
        return None
    if stored.init_digest != digest:
        raise Conflict(f"Poplar1 job {job} exists with another request (a job id is used once)")
    return bytes(stored.init_response)


def _first_step(rules, vdaf, agg_param, request) -> tuple[list[dap_poplar1.Poplar1Resp], dict]:
    ids = [share.report_id for share in request.shares]
    prepared, _ = hh.prepare(STORE, rules, hh.HELPER, agg_param, ids)
    ctx = hh.context(rules.key)
    resps, state = [], {}
    for share in request.shares:
        rid = share.report_id
        if rid in prepared.refused:
            resps.append(dap_poplar1.Poplar1Resp(rid, dap.REJECT, report_error=prepared.refused[rid]))
            continue
        try:
            leader = vdaf.decode_verifier_share(agg_param, dap.unb64(share.payload, "payload"))
            if len(leader) != 3:
                raise VdafError("a first verifier share is three elements")
            message = vdaf.verifier_shares_to_message(ctx, agg_param, [leader, prepared.shares[rid]])
            (_, _, out_share), check = vdaf.verify_next(ctx, prepared.states[rid], message)
        except VdafError:
            resps.append(dap_poplar1.Poplar1Resp(rid, dap.REJECT, report_error=SHARE_MALFORMED))
            continue
        state[rid] = (check, list(out_share))
        payload = vdaf.encode_verifier_message(agg_param, message) + vdaf.encode_verifier_share(agg_param, check)
        resps.append(dap_poplar1.Poplar1Resp(rid, dap.CONTINUE, payload=dap.b64(payload)))
    return resps, state


def job_continue(collection_key: str, job: str, body: bytes) -> bytes:
    """A job's second step: the helper decides each report and commits what it accepted."""
    digest = _digest(body)
    request = dap_poplar1.Poplar1JobContinueReq.parse(body)
    _same_collection(request.collection, collection_key)
    rules = _rules(collection_key)
    vdaf = hh.vdaf_of(rules)
    with transaction.atomic(using=STORE):
        _rules(collection_key, lock=True)
        row = Poplar1Job.objects.using(STORE).select_for_update().filter(collection_key=collection_key, job=job).first()
        if row is None:
            raise UnknownJob(f"the helper never started Poplar1 job {job}")
        if row.continue_digest:
            if row.continue_digest != digest:
                raise Conflict(f"Poplar1 job {job} was continued with another request")
            return bytes(row.continue_response)
        level = (
            Poplar1Level.objects.using(STORE).select_for_update().get(collection_key=collection_key, level=row.level)
        )
        if level.released:
            raise NotAllowed(f"level {row.level} is released already: no report joins it")
        agg_param = hh.agg_param_decode(vdaf, bytes(level.agg_param))
        state = hh.state_load(bytes(row.state))
        resps, accepted, failed = [], [], []
        for share in request.shares:
            rid = share.report_id
            if rid not in state:
                resps.append(dap_poplar1.Poplar1Resp(rid, dap.REJECT, report_error=hh.REPORT_UNKNOWN))
                continue
            check, out_share = state[rid]
            try:
                leader = vdaf.decode_verifier_share(agg_param, dap.unb64(share.payload, "payload"))
            except VdafError:
                leader = []
            if len(leader) == 1 and hh.sketch_check(vdaf, agg_param, [leader, check]):
                accepted.append(out_share)
                resps.append(dap_poplar1.Poplar1Resp(rid, dap_poplar1.FINISH))
            else:
                failed.append(rid)
                resps.append(dap_poplar1.Poplar1Resp(rid, dap.REJECT, report_error=PROOF_INVALID))
        answer = dap.encode(dap_poplar1.Poplar1JobResp(resps=resps))
        level.agg_share = hh.share_add(vdaf, agg_param, bytes(level.agg_share), accepted)
        level.reports += len(accepted)
        level.save(update_fields=["agg_share", "reports"])
        Poplar1Report.objects.using(STORE).filter(collection_key=collection_key, report_id__in=failed).update(
            refused=True
        )
        row.continue_digest, row.continue_response, row.state = digest, answer, b""
        row.save(update_fields=["continue_digest", "continue_response", "state"])
    rejected: dict[str, int] = {}
    for resp in dap_poplar1.Poplar1JobResp.parse(answer).resps:
        if resp.type == dap.REJECT:
            rejected[resp.report_error] = rejected.get(resp.report_error, 0) + 1
    metrics.helper_job_counted(accepted=len(accepted), rejected=rejected)
    return answer


# ------------------------------------------------------------------ the release


def aggregate_share(collection_key: str, body: bytes) -> bytes:
    """The helper's noised aggregate share of a level, released once (Poplar1ShareResp, encoded)."""
    digest = _digest(body)
    request = dap_poplar1.Poplar1ShareReq.parse(body)
    _same_collection(request.collection, collection_key)
    rules = _rules(collection_key)
    vdaf = hh.vdaf_of(rules)
    with transaction.atomic(using=STORE):
        rules = _rules(collection_key, lock=True)
        level = (
            Poplar1Level.objects.using(STORE)
            .select_for_update()
            .filter(collection_key=collection_key, level=request.level)
            .first()
        )
        if level is None:
            raise NotAllowed(f"level {request.level} was never asked")
        if level.released:
            if level.release_digest != digest:
                raise Conflict(f"level {request.level} is released already")
            return bytes(level.release)
        minimum = hh.effective_min_cohort(rules, settings.PFS_HELPER_MIN_COHORT_FLOOR)
        if level.reports < minimum:
            raise NotAllowed(
                f"level {request.level} holds {level.reports} verified reports, fewer than the minimum cohort of {minimum}"
            )
        if request.reports != level.reports:
            raise Conflict(
                f"the leader aggregated {request.reports} reports at level {request.level}, the helper {level.reports}"
            )
        agg_param = hh.agg_param_decode(vdaf, bytes(level.agg_param))
        try:
            leader = vdaf.decode_agg_share(agg_param, dap.unb64(request.leader_share, "leader_share"))
        except VdafError as error:
            raise dap.MessageError(f"leader_share: {error}") from None
        mine = hh.noised_share(vdaf, rules, agg_param, bytes(level.agg_share))
        answer = dap.encode(
            dap_poplar1.Poplar1ShareResp(
                level=request.level,
                reports=level.reports,
                helper_share=dap.b64(vdaf.encode_agg_share(agg_param, mine)),
            )
        )
        level.released, level.release_digest, level.release = True, digest, answer
        level.counts = hh.released_counts(vdaf, agg_param, [leader, mine])
        level.agg_share = b""
        level.save(update_fields=["released", "release_digest", "release", "counts", "agg_share"])
        hh.reports_drop_when_spent(STORE, rules)
    return answer
