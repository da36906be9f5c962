"""The aggregators' upload interface: what a device (or a simulated shard) hands over.

A simulated shard hands over one pre-summed pair of shares (share_pair_upload); a real device
uploads a Report of two HPKE-sealed Prio3 input shares, a public share and a token
(pfs_device.wire is its format, with no Django; aggregation.reports verifies it), and once both
aggregators accept it each stores its output share (output_pair_store). With the crypto of pfs_device.hpke and
pfs_device.tokens, this is all of aggregation that devices/ imports. The leader's share goes to
the leader's store and the helper's to the helper's (pfs_base.db_router), under one pair id, the
helper's first; nothing else about the report is kept.
"""

from __future__ import annotations

import secrets

from django.db import IntegrityError, transaction

from aggregation.aggregators import rules_shape
from aggregation.models import FIELD64, FIELD128, Collection, CollectionRules, HelperShare, LeaderShare
from aggregation.reports import PROOF_INVALID, rejections_add
from aggregation.verification import VerifyConfig, output_sum, verify_reports
from pfs_base.db_router import DEFAULT, HELPER, aggregator_store
from pfs_device.wire import Report, SealedShare
from privacy.field import FieldVector
from privacy.vdaf.field import Field128

__all__ = [
    "CollectionClosed",
    "Report",
    "SealedShare",
    "output_pair_store",
    "output_share_store",
    "share_pair_upload",
]


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
    """Store one (leader, helper) pair of shares for the batch ``batch_key`` of a collection.

    Under a fresh pair id: the helper's share first, committed in its own store; then the leader's
    in the caller's transaction (a shard's). A shard retried after its transaction failed stores a
    new pair; the helper's first share is then an orphan the leader never names.
    """
    if leader_share.shape != helper_share.shape or leader_share.ndim != 1:
        raise ValueError("leader and helper shares must be vectors of one length")
    pair = secrets.token_hex(16)
    common = {"collection_key": collection_key, "batch_key": batch_key, "length": leader_share.size, "pair": pair}
    common.update(source=source, reports=reports, min_cohort=min_cohort, field=FIELD64, check_open=True)
    # Each store checks its own copy of the rules (check_open): both are closed together
    # (aggregation.services), so a closed collection gets no helper row, and so no orphan.
    with transaction.atomic(using=HELPER):
        share_store(store=HELPER, vector=helper_share.astype("<u8").tobytes(), **common)
    # No savepoint when the caller's transaction holds this one (a shard's, a report's): a failure
    # here fails the caller's whole transaction anyway.
    with transaction.atomic(savepoint=False):
        share_store(store=DEFAULT, vector=leader_share.astype("<u8").tobytes(), **common)


def share_store(
    *,
    store: str,
    collection_key: str,
    batch_key: str,
    length: int,
    pair: str,
    source: str,
    vector: bytes,
    field: str,
    reports: int,
    min_cohort: int,
    arrivals: bytes = b"",
    check_open: bool,
) -> None:
    """One aggregator's share, in its own store (inside the caller's transaction on that store).

    ``check_open``: raise CollectionClosed when that aggregator's rules of the collection are closed.
    """
    if check_open and CollectionRules.objects.using(store).filter(key=collection_key, closed=True).exists():
        raise CollectionClosed(f"collection {collection_key} is closed")
    collection_id = _collection_id(store, collection_key, batch_key, length)
    model = HelperShare if store == HELPER else LeaderShare
    model.objects.using(store).create(
        collection_id=collection_id,
        source=source,
        pair=pair,
        vector=vector,
        field=field,
        reports=reports,
        min_cohort=min_cohort,
        arrivals=arrivals,
    )


def _collection_id(store: str, key: str, batch_key: str, length: int) -> int:
    """The batch's Collection row in ``store``, created with its first share. One narrow query when
    it exists (a shard of a big round finds it every time but the first), not get_or_create's."""
    collections = Collection.objects.using(store)
    found = collections.filter(key=key, batch_key=batch_key).values_list("pk", "length").first()
    if found is None:
        try:
            with transaction.atomic(using=store):  # a savepoint: a concurrent first share may win
                return collections.create(key=key, batch_key=batch_key, length=length).pk
        except IntegrityError:
            found = collections.filter(key=key, batch_key=batch_key).values_list("pk", "length").get()
    if found[1] != length:
        raise ValueError(f"share length {length} != collection length {found[1]}")
    return found[0]


def output_share_store(
    *,
    role: str,
    rules: CollectionRules,
    batch_key: str,
    source: str,
    pair: str,
    output: bytes,
    reports: int,
    arrivals: bytes = b"",
    check_open: bool = True,
    min_cohort: int | None = None,
) -> None:
    """Store one aggregator's sum of verified reports' output shares, encoded in the VDAF's field, in
    its own store (inside the caller's transaction on that store).

    ``output``: the encoded sum (aggregation.verification.output_sum). ``check_open``: raise
    CollectionClosed for a closed collection (the per-report path; the drain before a release stores
    into a closed one). ``min_cohort``: the one the devices routed with, when larger than the rules'.
    """
    share_store(
        store=aggregator_store(role),
        collection_key=rules.key,
        batch_key=batch_key,
        length=rules.length,
        pair=pair,
        source=source,
        vector=output,
        field=FIELD128 if rules_shape(rules).vdaf().field is Field128 else FIELD64,
        reports=reports,
        min_cohort=max(rules.min_cohort, min_cohort or 0),
        arrivals=arrivals,
        check_open=check_open,
    )


def output_pair_store(*, outputs: dict[str, bytes], pair: str | None = None, **kwargs) -> None:
    """Both aggregators' output_share_store under one pair id (a fresh one when None): the helper's
    committed first in its own store, then the leader's in the caller's transaction."""
    pair = pair or secrets.token_hex(16)
    with transaction.atomic(using=HELPER):
        output_share_store(role="helper", pair=pair, output=outputs["helper"], **kwargs)
    with transaction.atomic(savepoint=False):
        output_share_store(role="leader", pair=pair, output=outputs["leader"], **kwargs)


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
    rules = CollectionRules.objects.get(key=collection_key)
    config = VerifyConfig.of(
        collection_key=collection_key, shape=rules_shape(rules), verify_key=bytes(rules.verify_key)
    )
    helper_rules = CollectionRules.objects.using(HELPER).get(key=collection_key)  # the helper's own copy
    helper_config = VerifyConfig.of(
        collection_key=collection_key, shape=rules_shape(helper_rules), verify_key=bytes(helper_rules.verify_key)
    )
    shares = {"leader": leader_shares, "helper": helper_shares}
    sides = verify_reports(config, nonces, public_shares, shares, helper_config=helper_config)
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
