"""The leader's part of real devices' reports to a Poplar1 collection (heavy hitters): a job of uploads.

A device uploads one Poplar1 report (pfs_device.report_client.word_report_seal) as it uploads a
Prio3 one: its token, a public share, and each aggregator's input share sealed to that aggregator's
key (pfs_device.wire). The upload endpoint stores it (aggregation.intake); aggregation.ingest takes
a chunk of pending reports as one job and, for a Poplar1 collection, hands it here:

1. the leader checks each token (the issuer's signature over this very report, not spent here or
   earlier in the chunk: aggregation.reports.leader_open), opens its own share and decodes it with
   the public share; a report it refuses goes no further;
2. the others go to the helper in one request (Poplar1UploadsReq, under the job's id): each with
   the helper's sealed share, the token and the digest of the leader's share, so the helper checks
   the token over the report as it holds it, its own spent tokens, and opens its share itself;
3. the leader keeps its input share of each report the helper kept too, under the report's Poplar1
   nonce (derived from the token's, privacy.report_vdaf.report_nonce: both aggregators name it alike).

Nothing is verified here beyond the token and the shares' form: a Poplar1 report is proven well
formed level by level, in the walk's jobs (aggregation.heavy_hitters_leader). The helper commits
its part when it answers, idempotently by job id, and the leader's part is written in the ingest
job's transaction: a job retried after a failure is the same request, answered the same.
"""

from __future__ import annotations

from collections import Counter

from aggregation import dap, dap_poplar1, helper_client
from aggregation import heavy_hitters as hh
from aggregation.aggregators import LEADER
from aggregation.models import CollectionRules, PendingReport, Poplar1Report, SpentToken
from aggregation.reports import REPORT_MALFORMED, SHARE_MALFORMED, leader_open, rejections_add, verify_init_of
from pfs_device.tokens import IssuerPublicKey
from pfs_device.wire import Report
from privacy.report_vdaf import report_nonce
from privacy.vdaf.errors import VdafError


def uploads_job(
    rules: CollectionRules,
    issuer: IssuerPublicKey,
    private_key: bytes,
    job: str,
    parsed: list[tuple[PendingReport, Report | None]],
) -> tuple[int, int]:
    """One ingest job of a Poplar1 collection's uploads, both aggregators' checks; the leader's part
    written (inside the caller's transaction). (Reports kept, reports rejected.)"""
    vdaf = hh.vdaf_of(rules)
    rejected: Counter[tuple[str, str]] = Counter()
    reports = [(row, report) for row, report in parsed if report is not None and report.collection_key == rules.key]
    if len(reports) < len(parsed):  # the upload parsed them: only a corrupted row lands here
        rejected["leader", REPORT_MALFORMED] += len(parsed) - len(reports)
    digests = {report.token.digest for _, report in reports}
    # The tokens other jobs spent (a replayed job gets the verdicts it got the first time), then each
    # token once in the chunk: its report's copies after the first are reused.
    taken = set(
        SpentToken.objects.filter(role=LEADER.role, collection_key=rules.key, token_digest__in=digests)
        .exclude(job=job)
        .values_list("token_digest", flat=True)
    )
    opened: list[tuple[PendingReport, Report, bytes]] = []
    for row, report in reports:
        reason, share = leader_open(report, rules, issuer, taken, private_key)
        if reason is None:
            try:
                vdaf.decode_public_share(report.public)
                vdaf.decode_input_share(hh.LEADER, share)
            except VdafError:
                reason = SHARE_MALFORMED
        if reason is not None:
            rejected["leader", reason] += 1
            continue
        taken.add(report.token.digest)
        opened.append((row, report, share))
    kept = _helper_kept(rules, job, opened, rejected) if opened else []
    Poplar1Report.objects.bulk_create(
        Poplar1Report(
            collection_key=rules.key,
            report_id=(nonce := report_nonce(report.token.nonce)).hex(),
            nonce=nonce,
            public_share=report.public,
            input_share=share,
        )
        for report, share in kept
    )
    SpentToken.objects.bulk_create(
        SpentToken(role=LEADER.role, collection_key=rules.key, token_digest=report.token.digest, job=job)
        for report, _ in kept
    )
    if rejected:
        rejections_add(collection_key=rules.key, counts=dict(rejected))
    return len(kept), len(parsed) - len(kept)


def _helper_kept(
    rules: CollectionRules,
    job: str,
    opened: list[tuple[PendingReport, Report, bytes]],
    rejected: Counter[tuple[str, str]],
) -> list[tuple[Report, bytes]]:
    """The helper's verdicts on the reports the leader opened: those it kept too, with the leader's share."""
    uploads = [verify_init_of(report, b"", row.received_at.timestamp()) for row, report, _ in opened]
    request = dap_poplar1.Poplar1UploadsReq(collection=rules.key, uploads=uploads)
    body = helper_client.call(
        "PUT", rules.key, f"/poplar1_uploads/{job}", dap_poplar1.UPLOADS, dap.encode(request), expect=(200,)
    )
    answer = dap_poplar1.Poplar1JobResp.parse(body)
    if [resp.report_id for resp in answer.resps] != [upload.report_id for upload in uploads]:
        raise helper_client.HelperRefused(
            200, "invalid_message", "the helper answered for other reports than the job's"
        )
    kept = []
    for (_, report, share), resp in zip(opened, answer.resps, strict=True):
        if resp.type == dap_poplar1.FINISH:
            kept.append((report, share))
        else:
            rejected["helper", resp.report_error or "rejected"] += 1
    return kept
