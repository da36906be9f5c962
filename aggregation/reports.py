"""Individually uploaded reports: the protocol the leader and the helper run on each one.

A report carries the device's batch (its non-sensitive cohort), an anonymous single-use token,
and its two shares, each sealed with HPKE to one aggregator. The leader receives the upload and
passes the helper its sealed share; each aggregator then, on its own:

1. checks the token: the issuer's signature over this collection, not used before here;
2. opens its own share and checks its form (length, residues below p);
3. computes its share of the report's weight (the sum of the vector, a linear function) and the
   two exchange these weight shares: each learns the weight and nothing else. For an honest
   report the weight depends only on the randomizer's coins, never on the value, so revealing
   it reveals nothing about the device (seed 001, Section 6.1.1); a report over the weight bound
   is rejected. (One-hot mechanisms always weigh 1; binary RR's one bit is never exchanged.)

A report is stored only if both accept, in one transaction with both spent tokens; a rejection
changes nothing but the rejecting aggregators' counters (none for a collection that does not
exist: an anonymous sender must not be able to create counters at will). What is not checked: that every entry is
0 or 1. That needs a zero-knowledge validity proof (Prio3's FLP), which is not built; the weight
bound limits what a malicious device can do through a report of small non-binary entries only
partly, and the docs say so.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import IntegrityError, connection, transaction
from django.db.models import F

from aggregation import hpke, wire
from aggregation.aggregators import AGGREGATORS, REPORT_SOURCE
from aggregation.issuer import issuer_public_key
from aggregation.models import CollectionRules, ReportRejection, SpentToken
from aggregation.tokens import IssuerPublicKey, verify
from aggregation.upload import CollectionClosed, Report, share_pair_upload
from pfs_base import metrics
from privacy import field as prime_field
from privacy.field import FieldVector

# Why a report is rejected; each aggregator counts its own.
UNKNOWN_COLLECTION = "unknown_collection"
COLLECTION_CLOSED = "collection_closed"
TOKEN_INVALID = "token_invalid"  # noqa: S105 (a reason, not a secret)
TOKEN_REUSED = "token_reused"  # noqa: S105
SHARE_UNOPENED = "share_unopened"
SHARE_MALFORMED = "share_malformed"
OVER_WEIGHT = "over_weight"
# Rejected by the leader before any aggregator's check: the upload is not a report (bad JSON or
# base64, wrong sizes) or is larger than any honest report of the collection.
REPORT_MALFORMED = "report_malformed"
REPORT_TOO_LARGE = "report_too_large"


@dataclass(frozen=True)
class ReportOutcome:
    accepted: bool
    reason: str = ""  # the first aggregator's reason when rejected


@dataclass(frozen=True)
class ReportCheck:
    """Both aggregators' verdicts on one report: each one's opened share, or why each rejected it."""

    shares: dict[str, FieldVector]
    reasons: dict[str, str]  # role -> reason; empty when both accept

    @property
    def accepted(self) -> bool:
        return not self.reasons


def report_check(
    report: Report,
    *,
    rules: CollectionRules,
    issuer: IssuerPublicKey,
    spent_at: set[str],
    private_keys: dict[str, bytes] | None = None,
) -> ReportCheck:
    """Every check the aggregators run on one report, with nothing read or written (the one copy).

    ``spent_at``: the roles that have accepted the report's token before; ``private_keys``: each
    aggregator's HPKE key by role, when the caller has read them (else each open reads its own).
    Used one report at a time by report_submit and in bulk by aggregation.ingest.
    """
    signed = verify(issuer, report.collection_key, report.token)
    shares: dict[str, FieldVector] = {}
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
                    private_key=key,
                )
            except hpke.OpenFailed:
                reasons[aggregator.role] = SHARE_UNOPENED
            except ValueError:
                reasons[aggregator.role] = SHARE_MALFORMED
    if reasons:
        return ReportCheck(shares={}, reasons=reasons)

    # The weight-share exchange: each aggregator sums its own share; the two sums add to the weight.
    # Skipped when no 0/1 vector can exceed the bound (binary RR's single bit: its weight would be
    # the report itself).
    if rules.weight_bound < rules.length:
        weight = sum(prime_field.total(shares[a.role]) for a in AGGREGATORS) % prime_field.MODULUS
        if weight > rules.weight_bound:
            return ReportCheck(shares={}, reasons={a.role: OVER_WEIGHT for a in AGGREGATORS})
    return ReportCheck(shares=shares, reasons={})


def report_submit(report: Report, *, rules: CollectionRules | None = None) -> ReportOutcome:
    """Run both aggregators' checks on one report and store its shares if both accept.

    The per-report path (tests, and a reference for aggregation.ingest, which verifies uploads in
    bulk). ``rules``: the collection's rules when the caller has read them already (saves a query).
    """
    if rules is None or rules.key != report.collection_key:
        rules = collection_rules_get(collection_key=report.collection_key)
    if rules is None:
        return ReportOutcome(accepted=False, reason=UNKNOWN_COLLECTION)
    if rules.closed:
        return _rejected(report.collection_key, {a.role: COLLECTION_CLOSED for a in AGGREGATORS})
    issuer = issuer_public_key(report.collection_key)
    check = report_check(report, rules=rules, issuer=issuer, spent_at=_spent_at(report))
    if not check.accepted:
        return _rejected(report.collection_key, check.reasons)
    try:
        with transaction.atomic():
            _hold_open(report.collection_key)
            SpentToken.objects.bulk_create(
                SpentToken(role=a.role, collection_key=report.collection_key, token_digest=report.token.digest)
                for a in AGGREGATORS
            )
            share_pair_upload(
                collection_key=report.collection_key,
                batch_key=report.batch_key,
                source=f"{REPORT_SOURCE}{report.token.digest}",
                leader_share=check.shares["leader"],
                helper_share=check.shares["helper"],
                reports=1,
                min_cohort=rules.min_cohort,
            )
    except IntegrityError:  # the same token raced in concurrently: it was spent meanwhile
        return _rejected(report.collection_key, {a.role: TOKEN_REUSED for a in AGGREGATORS})
    except CollectionClosed:  # closed while the report was being checked
        return _rejected(report.collection_key, {a.role: COLLECTION_CLOSED for a in AGGREGATORS})
    metrics.reports_counted(accepted=1)
    return ReportOutcome(accepted=True)


def report_refuse(*, collection_key: str, reason: str) -> bool:
    """Count an upload the leader refused before the protocol (REPORT_MALFORMED, REPORT_TOO_LARGE).

    Counted only in a collection that exists; True when it was counted.
    """
    if not CollectionRules.objects.filter(key=collection_key).exists():
        return False
    _rejected(collection_key, {"leader": reason})
    return True


def collection_rules_get(*, collection_key: str) -> CollectionRules | None:
    return CollectionRules.objects.filter(key=collection_key).first()


def upload_body_limit(rules: CollectionRules) -> int:
    """The largest upload an honest device sends to the collection."""
    return wire.body_limit(rules.length)


def collection_close(*, collection_key: str) -> None:
    """Stop accepting reports now; the shares already stored wait for aggregation.

    The update waits for the uploads holding the rules row (``_hold_open``), so no report is stored
    after this returns.
    """
    CollectionRules.objects.filter(key=collection_key).update(closed=True)


def _hold_open(collection_key: str) -> None:
    """Inside the storing transaction: keep the collection from closing until it commits.

    PostgreSQL: a FOR SHARE row lock, which uploads share with each other but an UPDATE that
    closes the collection waits for (share_pair_upload then checks ``closed`` again). SQLite takes
    the database's write lock when the transaction starts, which serialises the same way.
    """
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT 1 FROM {CollectionRules._meta.db_table} WHERE key = %s FOR SHARE",  # noqa: S608 (a model's table)
                [collection_key],
            )


def _spent_at(report: Report) -> set[str]:
    """The aggregators that have accepted the report's token before (each keeps its own record;
    one query reads both, as one database holds both here)."""
    return set(
        SpentToken.objects.filter(collection_key=report.collection_key, token_digest=report.token.digest).values_list(
            "role", flat=True
        )
    )


def _rejected(collection_key: str, reasons: dict[str, str]) -> ReportOutcome:
    rejections_add(collection_key=collection_key, counts={(role, reason): 1 for role, reason in reasons.items()})
    return ReportOutcome(accepted=False, reason=next(iter(reasons.values())))


def rejections_add(*, collection_key: str, counts: dict[tuple[str, str], int]) -> None:
    """Add to the rejection counters: ``counts`` maps (role, reason) to how many more."""
    with transaction.atomic():
        for (role, reason), count in sorted(counts.items()):  # a fixed order: no deadlock between callers
            counter, _ = ReportRejection.objects.get_or_create(role=role, collection_key=collection_key, reason=reason)
            ReportRejection.objects.filter(pk=counter.pk).update(count=F("count") + count)
        metrics.reports_counted(rejected=counts)


def rejections(collection_key: str) -> dict[str, dict[str, int]]:
    """Per aggregator, how many reports it rejected in the collection and why."""
    counts: dict[str, dict[str, int]] = {}
    for row in ReportRejection.objects.filter(collection_key=collection_key).order_by("role", "reason"):
        counts.setdefault(row.role, {})[row.reason] = row.count
    return counts
