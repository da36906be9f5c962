"""The aggregators' upload interface: what a device (or a simulated shard) hands over.

A simulated shard hands over one pre-summed pair of shares (share_pair_upload); a real device
uploads a Report of two HPKE-sealed Prio3 input shares, a public share and a token
(aggregation.wire is its format, with no Django; aggregation.reports verifies it), and once both
aggregators accept it each stores its output share (output_pair_store). With the crypto of aggregation.hpke and
aggregation.tokens, this is all of aggregation that devices/ imports. The leader's share goes to
the leader's storage and the helper's to the helper's; nothing else about the report is kept.
"""

from __future__ import annotations

from django.db import transaction

from aggregation.aggregators import rules_shape
from aggregation.models import FIELD64, FIELD128, Collection, CollectionRules, HelperShare, LeaderShare
from aggregation.verification import VerifyConfig, output_sum, verify_reports
from aggregation.wire import Report, SealedShare
from privacy.field import FieldVector
from privacy.vdaf.field import Field128

__all__ = ["CollectionClosed", "Report", "SealedShare", "output_pair_store", "share_pair_upload"]


class CollectionClosed(RuntimeError):
    """Shares arrived for a collection already aggregated or discarded: they would never be read."""


def share_pair_upload(
    *,
    collection_key: str,
    batch_key: str,
    source: str,
    leader_share: FieldVector,
    helper_share: FieldVector,
    reports: int,
    min_cohort: int,
) -> None:
    """Store one (leader, helper) pair of shares for the batch ``batch_key`` of a collection."""
    if leader_share.shape != helper_share.shape or leader_share.ndim != 1:
        raise ValueError("leader and helper shares must be vectors of one length")
    # No savepoint when the caller's transaction holds this one (a shard's, a report's): a failure
    # here fails the caller's whole transaction anyway.
    with transaction.atomic(savepoint=False):
        if CollectionRules.objects.filter(key=collection_key, closed=True).exists():
            raise CollectionClosed(f"collection {collection_key} is closed")
        collection, _ = Collection.objects.get_or_create(
            key=collection_key, batch_key=batch_key, defaults={"length": leader_share.size}
        )
        if collection.length != leader_share.size:
            raise ValueError(f"share length {leader_share.size} != collection length {collection.length}")
        for model, share in ((LeaderShare, leader_share), (HelperShare, helper_share)):
            model.objects.create(
                collection=collection,
                source=source,
                vector=share.astype("<u8").tobytes(),
                reports=reports,
                min_cohort=min_cohort,
            )


def output_pair_store(
    *,
    rules: CollectionRules,
    batch_key: str,
    source: str,
    outputs: dict[str, bytes],
    reports: int,
    arrivals: bytes = b"",
    check_open: bool = True,
    min_cohort: int | None = None,
) -> None:
    """Store verified reports' output shares: each aggregator its own, summed and encoded in the VDAF's field.

    ``outputs`` maps each role to its encoded sum of the reports' output shares
    (aggregation.verification.output_sum). ``check_open``: raise CollectionClosed for a closed
    collection (the per-report path; the drain before a release stores into a closed one).
    ``min_cohort``: the one the devices routed with, when larger than the rules'.
    """
    field = FIELD128 if rules_shape(rules).vdaf().field is Field128 else FIELD64
    with transaction.atomic(savepoint=False):
        if check_open and CollectionRules.objects.filter(pk=rules.pk, closed=True).exists():
            raise CollectionClosed(f"collection {rules.key} is closed")
        collection, _ = Collection.objects.get_or_create(
            key=rules.key, batch_key=batch_key, defaults={"length": rules.length}
        )
        if collection.length != rules.length:
            raise ValueError(f"collection {collection} holds vectors of {collection.length}, not {rules.length}")
        for model, role in ((LeaderShare, "leader"), (HelperShare, "helper")):
            model.objects.create(
                collection=collection,
                source=source,
                vector=outputs[role],
                field=field,
                reports=reports,
                min_cohort=max(rules.min_cohort, min_cohort or 0),
                arrivals=arrivals,
            )


def verified_reports_upload(
    *,
    collection_key: str,
    batch_key: str,
    source: str,
    nonces: list[bytes],
    public_shares: list[bytes],
    leader_shares: list[bytes],
    helper_shares: list[bytes],
    min_cohort: int,
) -> int:
    """Per-device Prio3 reports of a simulated shard (a fleet with ``prio3_reports``): both aggregators
    verify every report as they verify a real device's (aggregation.verification, each side with its
    own state), count the rejected ones (``proof_invalid``), and store the accepted ones' output shares
    summed. No token or HPKE: the simulator's devices hand their shares over directly. Returns how many
    were accepted.
    """
    from aggregation.reports import PROOF_INVALID, rejections_add  # here: aggregation.reports imports this module

    rules = CollectionRules.objects.get(key=collection_key)
    config = VerifyConfig.of(
        collection_key=collection_key, shape=rules_shape(rules), verify_key=bytes(rules.verify_key)
    )
    sides = verify_reports(config, nonces, public_shares, {"leader": leader_shares, "helper": helper_shares})
    kept = [k for k in range(len(nonces)) if all(side.accepted[k] for side in sides.values())]
    refused = {
        (role, PROOF_INVALID): side.accepted.count(False) for role, side in sides.items() if not all(side.accepted)
    }
    if refused:
        rejections_add(collection_key=collection_key, counts=refused)
    if kept:
        outputs = {role: output_sum(config, [side.output_share(k) for k in kept]) for role, side in sides.items()}
        output_pair_store(
            rules=rules, batch_key=batch_key, source=source, outputs=outputs, reports=len(kept), min_cohort=min_cohort
        )
    return len(kept)
