"""Individually uploaded reports: the protocol the leader and the helper run on each one.

A report carries the device's batch (its non-sensitive cohort), an anonymous single-use token,
and its two shares, each sealed with HPKE to one aggregator. The leader receives the upload and
passes the helper its sealed share; each aggregator then, on its own:

1. checks the token: the issuer's signature over this collection, not used before here;
2. opens its own share (its Prio3 input share, bound to the collection, batch, token and public
   share) and checks its length;
3. verifies the report's Prio3 validity proof with the other aggregator (aggregation.verification,
   privacy.report_vdaf): each computes a verifier share from its own input share, the leader
   combines both and decides, and each keeps its output share only if the proof holds. The proof
   establishes that the report is of the collection's form — a 0/1 vector with at most the weight
   bound's ones (multi-hot), exactly one (one-hot), or a single bit — and neither aggregator learns
   more about the report than that. It cannot establish that the device randomized honestly.

A report is stored only if both accept: in an aggregation job (aggregation.ingest runs the
protocol on a chunk of reports), the helper's output share and spent token first, in one
transaction on its own store (a replay of a job it has stored writes nothing), then the leader's
in one on the default store; a rejection
changes nothing but the rejecting aggregators' counters (none for a collection that does not
exist: an anonymous sender must not be able to create counters at will), and never fails a round:
a rejected report is simply not in any sum.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from django.db import transaction
from django.db.models import F

from aggregation.aggregators import AGGREGATORS, rules_shape
from aggregation.aggregators import HELPER as HELPER_AGGREGATOR
from aggregation.models import CollectionRules, HelperJob, ReportRejection
from aggregation.verification import VerifyConfig, verify_reports
from pfs_base import metrics
from pfs_base.db_router import DEFAULT, HELPER, aggregator_store
from pfs_device import hpke, wire
from pfs_device.tokens import IssuerPublicKey, verify
from pfs_device.wire import Report
from privacy.report_vdaf import input_share_sizes, report_nonce

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


@dataclass(frozen=True)
class ReportCheck:
    """Both aggregators' verdicts on one report: each one's output share (encoded), or why each rejected it."""

    outputs: dict[str, bytes]
    reasons: dict[str, str]  # role -> reason; empty when both accept

    @property
    def accepted(self) -> bool:
        return not self.reasons


def reports_check(
    reports: Sequence[Report],
    *,
    rules: CollectionRules,
    issuer: IssuerPublicKey,
    spent_at: Sequence[set[str]],
    private_keys: dict[str, bytes] | None = None,
) -> list[ReportCheck]:
    """Every check the aggregators run on reports of one collection, with nothing read or written.

    ``spent_at[i]``: the roles that have accepted report i's token before; ``private_keys``: each
    aggregator's HPKE key by role, when the caller has read them (else each open reads its own).
    Each aggregator checks the token and opens its own share, report by report; then the reports
    both opened go through Prio3's verification together (aggregation.verification), the leader's
    side and the helper's side each with its own state.
    """
    config = VerifyConfig.of(collection_key=rules.key, shape=rules_shape(rules), verify_key=bytes(rules.verify_key))
    # The helper verifies with its own copy of the rules (its verification key), from its own store.
    helper_rules = HELPER_AGGREGATOR.rules(rules.key)
    if helper_rules is None:  # not configured for the collection: the helper takes none of its reports
        return [ReportCheck(outputs={}, reasons={"helper": UNKNOWN_COLLECTION}) for _ in reports]
    helper_config = VerifyConfig.of(
        collection_key=rules.key, shape=rules_shape(helper_rules), verify_key=bytes(helper_rules.verify_key)
    )
    opened: dict[str, list[bytes]] = {a.role: [] for a in AGGREGATORS}
    candidates: list[int] = []
    reasons: list[dict[str, str]] = []
    for i, report in enumerate(reports):
        reasons.append(_open_shares(report, rules, issuer, spent_at[i], private_keys, opened))
        if not reasons[i]:
            candidates.append(i)
    outputs: dict[int, dict[str, bytes]] = {}
    if candidates:
        chosen = [reports[i] for i in candidates]
        nonces = [report_nonce(r.token.nonce) for r in chosen]
        sides = verify_reports(config, nonces, [r.public for r in chosen], opened, helper_config=helper_config)
        for k, i in enumerate(candidates):
            refused = {role: PROOF_INVALID for role, side in sides.items() if not side.accepted[k]}
            if refused:
                reasons[i] = refused
            else:
                outputs[i] = {role: side.output_share(k) for role, side in sides.items()}
    return [ReportCheck(outputs=outputs.get(i, {}), reasons=reasons[i]) for i in range(len(reports))]


def _open_shares(
    report: Report,
    rules: CollectionRules,
    issuer: IssuerPublicKey,
    spent_at: set[str],
    private_keys: dict[str, bytes] | None,
    opened: dict[str, list[bytes]],
) -> dict[str, str]:
    """Each aggregator's token check and the opening of its own share; why each refuses, if one does.

    Appends each opened share to ``opened[role]`` only when both aggregators opened theirs.
    """
    signed = verify(issuer, report.collection_key, report.token)
    shares: dict[str, bytes] = {}
    reasons: dict[str, str] = {}
    for aggregator in AGGREGATORS:
        if not signed:
            reasons[aggregator.role] = TOKEN_INVALID
        elif aggregator.role in spent_at:
            reasons[aggregator.role] = TOKEN_REUSED
        else:
            sealed = report.share_for(aggregator.role)
            key = private_keys.get(aggregator.role) if private_keys else None
            try:
                shares[aggregator.role] = aggregator.open_share(
                    rules,
                    sealed.enc,
                    sealed.ciphertext,
                    batch_key=report.batch_key,
                    token_digest=report.token.digest,
                    public_share=report.public,
                    private_key=key,
                    version=report.version,
                )
            except hpke.OpenFailed:
                reasons[aggregator.role] = SHARE_UNOPENED
            except ValueError:
                reasons[aggregator.role] = SHARE_MALFORMED
    if not reasons:
        for role, share in shares.items():
            opened[role].append(share)
    return reasons


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
    return wire.body_limit(*input_share_sizes(rules_shape(rules).vdaf()))


def collection_close(*, collection_key: str) -> None:
    """Stop accepting reports now, at both aggregators; the shares already stored wait for aggregation.

    The update waits for the uploads holding the rules row (aggregation.intake), so no report is stored
    after this returns. The helper's first: a report it stores meanwhile the leader then refuses,
    and the helper's share is never named.
    """
    for store in (HELPER, DEFAULT):
        CollectionRules.objects.using(store).filter(key=collection_key).update(closed=True)


def helper_job_begin(collection_key: str, job: str) -> bool:
    """Inside the helper's transaction: record that it stores ``job``; False when it has already."""
    if HelperJob.objects.using(HELPER).filter(collection_key=collection_key, job=job).exists():
        return False
    HelperJob.objects.using(HELPER).create(collection_key=collection_key, job=job)
    return True


def rejections_add(*, collection_key: str, counts: dict[tuple[str, str], int]) -> None:
    """Add to the rejection counters: ``counts`` maps (role, reason) to how many more. Each
    aggregator's counters are in its own store (the helper's first)."""
    for store in (HELPER, DEFAULT):
        mine = {key: count for key, count in counts.items() if aggregator_store(key[0]) == store}
        if not mine:
            continue
        with transaction.atomic(using=store):
            counters = ReportRejection.objects.using(store)
            for (role, reason), count in sorted(mine.items()):  # a fixed order: no deadlock between callers
                counter, _ = counters.get_or_create(role=role, collection_key=collection_key, reason=reason)
                counters.filter(pk=counter.pk).update(count=F("count") + count)
    metrics.reports_counted(rejected=counts)


def rejections(collection_key: str) -> dict[str, dict[str, int]]:
    """Per aggregator, how many reports it rejected in the collection and why."""
    counts: dict[str, dict[str, int]] = {}
    for aggregator in AGGREGATORS:
        rows = ReportRejection.objects.using(aggregator.store).filter(
            role=aggregator.role, collection_key=collection_key
        )
        for row in rows.order_by("reason"):
            counts.setdefault(row.role, {})[row.reason] = row.count
    return counts
