"""Individually uploaded reports: the protocol the leader and the helper run on each one.

A report carries the device's batch (its non-sensitive cohort), an anonymous single-use token,
and its two shares, each sealed with HPKE to one aggregator. The leader receives the upload; the
reports of a job (aggregation.ingest takes a chunk of pending reports) then go through DAP's
aggregation interaction (aggregation.dap), each aggregator on its own:

1. the leader checks the token (the issuer's signature over this collection and this very report —
   its batch, public share and both sealed shares, pfs_device.wire.report_digest —, not spent here),
   opens its own share (its Prio3 input share, bound to the collection, batch, token and public
   share), checks its length and runs Prio3's verify_init on it; a report it refuses goes no further;
2. the others go to the helper in one aggregation job (aggregation.helper_client): each with the
   helper's sealed share, the digest of the leader's (so the helper recomputes the report's digest
   the token signs) and the leader's verifier share. The helper does the same checks with its
   own key, its own spent tokens and its own rules, decides each proof from both verifier shares,
   commits its output shares, and answers each report with the verifier message or why it refused;
3. the leader runs verify_next on each message and keeps its output share.

The proof establishes that the report is of the collection's form — a 0/1 vector with at most the
weight bound's ones (multi-hot), exactly one (one-hot), or a single bit — and neither aggregator
learns more about the report than that. It cannot establish that the device randomized honestly.

A rejection changes nothing but the rejection counters (the leader keeps its own and the helper's
as the helper answered them; none for a collection that does not exist: an anonymous sender must not
be able to create counters at will), and never fails a round: a rejected report is simply not in any sum.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from django.db import transaction
from django.db.models import F

from aggregation import dap, helper_client
from aggregation.aggregators import LEADER, rules_shape, share_sizes_of, token_valid
from aggregation.models import CollectionRules, ReportRejection
from aggregation.verification import AggregatorVerification, VerifyConfig
from pfs_base import metrics
from pfs_device import hpke, wire
from pfs_device.tokens import IssuerPublicKey
from pfs_device.wire import Report
from privacy.report_vdaf import report_nonce

# Why a report is rejected; each aggregator counts its own.
UNKNOWN_COLLECTION = "unknown_collection"
COLLECTION_CLOSED = "collection_closed"
TOKEN_INVALID = "token_invalid"  # noqa: S105 (a reason, not a secret)
TOKEN_REUSED = "token_reused"  # noqa: S105
SHARE_UNOPENED = "share_unopened"
SHARE_MALFORMED = "share_malformed"
# The Prio3 proof did not verify: not a valid report of the collection's form (an entry not 0/1, too
# many ones, shares spliced from other reports), or the joint randomness did not match.
PROOF_INVALID = "proof_invalid"
# Rejected by the leader before any aggregator's check: the upload is not a report (bad JSON or
# base64, wrong sizes) or is larger than any honest report of the collection.
REPORT_MALFORMED = "report_malformed"
REPORT_TOO_LARGE = "report_too_large"
# The helper answered a report with something the protocol does not allow (a message the leader's
# verify_next refuses after the helper committed): never from an honest helper.
HELPER_DISAGREED = "helper_disagreed"


@dataclass(frozen=True)
class ReportCheck:
    """Both aggregators' verdicts on one report: the leader's output share (encoded) when both
    accept it (the helper has committed its own), or why each that refused it did."""

    output: bytes | None
    reasons: dict[str, str]  # role -> reason; empty when both accept

    @property
    def accepted(self) -> bool:
        return not self.reasons


def reports_check(
    reports: Sequence[Report],
    *,
    rules: CollectionRules,
    issuer: IssuerPublicKey,
    spent: set[str],
    job: str,
    times: Sequence[float],
    private_key: bytes | None = None,
) -> list[ReportCheck]:
    """Run one aggregation job on reports of one collection: the leader's checks here, the helper's
    at the helper (which commits its part before it answers). Nothing of the leader's is written.

    ``spent``: the token digests the leader has accepted before (in other jobs); ``times``: when each
    report arrived (coarse); ``job``: the job's id — the same reports under the same id are the same
    request, which the helper answers as it did the first time. Tokens must be distinct.
    """
    config = VerifyConfig.of(collection_key=rules.key, shape=rules_shape(rules), verify_key=bytes(rules.verify_key))
    if private_key is None:
        private_key = LEADER.private_key()
    reasons: list[dict[str, str]] = [{} for _ in reports]
    opened: dict[int, bytes] = {}
    for i, report in enumerate(reports):
        reason, share = leader_open(report, rules, issuer, spent, private_key)
        if reason is None:
            opened[i] = share
        else:
            reasons[i] = {"leader": reason}
    outputs: dict[int, bytes] = {}
    candidates = sorted(opened)
    if candidates:
        side = AggregatorVerification("leader", config)
        chosen = [reports[i] for i in candidates]
        verifier_shares = side.start(
            [report_nonce(r.token.nonce) for r in chosen], [r.public for r in chosen], [opened[i] for i in candidates]
        )
        sent = [k for k, share in enumerate(verifier_shares) if share is not None]
        for k, share in enumerate(verifier_shares):
            if share is None:  # refused by the leader's verify_init: not sent (DAP)
                reasons[candidates[k]] = {"leader": PROOF_INVALID}
        messages: list[bytes | None] = [None] * len(candidates)
        if sent:
            request = dap.AggregationJobInitReq(
                collection=rules.key,
                min_cohort=rules.min_cohort,
                verify_inits=[verify_init_of(chosen[k], verifier_shares[k], times[candidates[k]]) for k in sent],
            )
            answer = helper_client.job_run(job, request)
            for k, resp in zip(sent, answer.verify_resps, strict=True):
                if resp.type == dap.REJECT:
                    reasons[candidates[k]] = {"helper": resp.report_error or "rejected"}
                else:
                    messages[k] = dap.unb64(resp.payload, "payload")
        accepted = side.finish(messages)
        for k, i in enumerate(candidates):
            if accepted[k]:
                outputs[i] = side.output_share(k)
            elif messages[k] is not None:
                reasons[i] = {"leader": HELPER_DISAGREED}
    return [ReportCheck(output=outputs.get(i), reasons=reasons[i]) for i in range(len(reports))]


def verify_init_of(report: Report, verifier_share: bytes, time: float) -> dap.VerifyInit:
    sealed = report.helper
    return dap.VerifyInit(
        report_id=report.token.digest,
        batch=report.batch_key,
        time=time,
        version=report.version,
        public_share=dap.b64(report.public),
        token={"nonce": dap.b64(report.token.nonce), "signature": dap.b64(report.token.signature)},
        encrypted_input_share={"enc": dap.b64(sealed.enc), "payload": dap.b64(sealed.ciphertext)},
        input_share=None,
        payload=dap.b64(verifier_share),
        # With its own share, the public share and the batch, the helper recomputes the digest the
        # token signs (pfs_device.wire.report_digest) without seeing the leader's share.
        leader_share_digest=dap.b64(wire.share_digest(report.leader)),
    )


def leader_open(
    report: Report, rules: CollectionRules, issuer: IssuerPublicKey, spent: set[str], private_key: bytes
) -> tuple[str | None, bytes]:
    """The leader's token check and the opening of its own share: (why it refuses, or None; the share)."""
    # The signature first: a token on a report it was not issued for is refused before its spent
    # record is read, so a thief's report neither spends the token nor is told whether it was spent.
    digest = wire.report_digest_of(report)
    if not token_valid(issuer, report.collection_key, report.token, version=report.version, report_digest=digest):
        return TOKEN_INVALID, b""
    if report.token.digest in spent:
        return TOKEN_REUSED, b""
    try:
        return None, LEADER.open_report(rules, report, private_key=private_key)
    except hpke.OpenFailed:
        return SHARE_UNOPENED, b""
    except ValueError:
        return SHARE_MALFORMED, b""


def report_refuse(*, collection_key: str, reason: str) -> bool:
    """Count an upload the leader refused before the protocol (REPORT_MALFORMED, REPORT_TOO_LARGE).

    Counted only in a collection that exists; True when it was counted.
    """
    if not CollectionRules.objects.filter(key=collection_key).exists():
        return False
    rejections_add(collection_key=collection_key, counts={("leader", reason): 1})
    return True


def collection_rules_get(*, collection_key: str) -> CollectionRules | None:
    return CollectionRules.objects.filter(key=collection_key).first()


def upload_body_limit(rules: CollectionRules) -> int:
    """The largest upload an honest device sends to the collection."""
    return wire.body_limit(*share_sizes_of(rules))


def collection_close(*, collection_key: str) -> None:
    """Stop accepting reports now, at the leader; the ones already received are verified and the
    shares stored wait for aggregation. The helper closes the collection when the leader asks its
    aggregate shares (aggregation.services), after the last job.

    The update waits for the uploads holding the rules row (aggregation.intake), so no report is
    received after this returns.
    """
    CollectionRules.objects.filter(key=collection_key).update(closed=True)


def rejections_add(*, collection_key: str, counts: dict[tuple[str, str], int]) -> None:
    """Add to the leader's rejection counters: ``counts`` maps (role, reason) to how many more — the
    leader's own, and the helper's as the helper answered them (the helper keeps its own too)."""
    with transaction.atomic():
        counters = ReportRejection.objects.all()
        for (role, reason), count in sorted(counts.items()):  # a fixed order: no deadlock between callers
            counter, _ = counters.get_or_create(role=role, collection_key=collection_key, reason=reason)
            counters.filter(pk=counter.pk).update(count=F("count") + count)
    metrics.reports_counted(rejected=counts)


def rejections(collection_key: str) -> dict[str, dict[str, int]]:
    """Per aggregator, how many reports it rejected in the collection and why (the helper's as it answered)."""
    counts: dict[str, dict[str, int]] = {}
    for row in ReportRejection.objects.filter(collection_key=collection_key).order_by("role", "reason"):
        counts.setdefault(row.role, {})[row.reason] = row.count
    return counts
