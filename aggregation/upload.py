"""The aggregators' upload interface: what a device (or a simulated shard) hands over.

A simulated shard hands over one pre-summed pair of shares per batch (shard_shares_upload); a real
device uploads a Report of two HPKE-sealed Prio3 input shares, a public share and a token
(pfs_device.wire is its format, with no Django; aggregation.reports verifies it), and once both
aggregators accept it each stores its output share. With the crypto of pfs_device.hpke and
pfs_device.tokens, this is all of aggregation that devices/ imports. The helper's shares go to the
helper's service (aggregation.helper_client: never to its store), the leader's to the leader's
store, under one pair id, the helper's first; nothing else about the report is kept.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from django.db import IntegrityError, connections, transaction

from aggregation import dap, helper_client
from aggregation.aggregators import rules_shape
from aggregation.models import FIELD64, FIELD128, Collection, CollectionRules, HelperShare, LeaderShare
from aggregation.reports import PROOF_INVALID, rejections_add
from aggregation.verification import AggregatorVerification, VerifyConfig, output_sum
from pfs_base.db_router import DEFAULT, HELPER, aggregator_store
from pfs_device.wire import Report, SealedShare
from privacy.field import FieldVector
from privacy.vdaf.field import Field128

__all__ = [
    "BatchPair",
    "CollectionClosed",
    "Report",
    "SealedShare",
    "output_share_store",
    "shard_shares_upload",
]


class CollectionClosed(RuntimeError):
    """Shares arrived for a collection already aggregated or discarded: they would never be read."""


@dataclass(frozen=True)
class BatchPair:
    """A simulated shard's two shares of one batch: its answering devices' shares, summed."""

    batch_key: str
    leader_share: FieldVector
    helper_share: FieldVector
    reports: int
    min_cohort: int


@contextmanager
def shard_shares_upload(*, collection_key: str, source: str, batches: list[BatchPair]) -> Iterator[None]:
    """Store a simulated shard's pairs of shares, every batch at once, each pair under a fresh id: the
    helper's in one request to its service, and the leader's in the caller's transaction (a shard's)
    while that request is out, as are the caller's writes in the ``with`` block. The block ends once
    the helper has answered, so the caller's commit comes after the helper's; a request that fails
    raises there and the caller's transaction rolls back.

    A shard retried after its transaction failed stores new pairs; the helper's first shares are
    then orphans the leader never names. A closed collection: CollectionClosed, before any request.
    """
    if not batches:
        yield
        return
    for batch in batches:
        if batch.leader_share.shape != batch.helper_share.shape or batch.leader_share.ndim != 1:
            raise ValueError("leader and helper shares must be vectors of one length")
    pairs = [secrets.token_hex(16) for _ in batches]
    request = dap.SimulatedSharesReq(
        collection=collection_key,
        source=source,
        shares=[
            dap.SimulatedShare(
                batch=batch.batch_key,
                pair=pair,
                vector=dap.b64(batch.helper_share.astype("<u8").tobytes()),
                reports=batch.reports,
                min_cohort=batch.min_cohort,
            )
            for batch, pair in zip(batches, pairs, strict=True)
        ],
    )
    # No savepoint when the caller's transaction holds this one (a shard's): a failure here fails
    # the caller's whole transaction anyway. The helper's answer is awaited inside the transaction,
    # so that even as the outermost one it commits after the helper's. The collection is found open
    # in that transaction, before the request, and the leader's shares are stored in it with no
    # second look (one query less per shard).
    with transaction.atomic(savepoint=False):
        if _closed(DEFAULT, collection_key):
            raise CollectionClosed(f"collection {collection_key} is closed")
        with helper_client.simulated_put_beside(request):
            for batch, pair in zip(batches, pairs, strict=True):
                share_store(
                    store=DEFAULT,
                    collection_key=collection_key,
                    batch_key=batch.batch_key,
                    length=batch.leader_share.size,
                    pair=pair,
                    source=source,
                    vector=batch.leader_share.astype("<u8").tobytes(),
                    field=FIELD64,
                    reports=batch.reports,
                    min_cohort=batch.min_cohort,
                    check_open=False,  # found open above, in this transaction
                )
            yield


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
    if check_open and _closed(store, collection_key):
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


def _closed(store: str, key: str) -> bool:
    return CollectionRules.objects.using(store).filter(key=key, closed=True).exists()


def _collection_id(store: str, key: str, batch_key: str, length: int) -> int:
    """The batch's Collection row in ``store``, created with its first share. One narrow query when
    it exists (a shard of a big round finds it every time but the first), not get_or_create's."""
    collections = Collection.objects.using(store)
    found = _collection_found(store, key, batch_key)
    if found is None:
        try:
            with transaction.atomic(using=store):  # a savepoint: a concurrent first share may win
                return collections.create(key=key, batch_key=batch_key, length=length).pk
        except IntegrityError:
            found = collections.filter(key=key, batch_key=batch_key).values_list("pk", "length").get()
    if found[1] != length:
        raise ValueError(f"share length {length} != collection length {found[1]}")
    return found[0]


def _collection_found(store: str, key: str, batch_key: str) -> tuple[int, int] | None:
    """(pk, length) of the batch's Collection row in ``store``, if there is one.

    In SQL of its own: every share a shard stores asks it, and the ORM's building of the query took
    about 1.3 ms of CPU a shard (the statement itself, on its unique index, 0.03).
    """
    connection = connections[store]
    quote = connection.ops.quote_name
    meta = Collection._meta
    columns = [quote(meta.get_field(name).column) for name in ("id", "length", "key", "batch_key")]
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {columns[0]}, {columns[1]} FROM {quote(meta.db_table)} "  # noqa: S608 (the model's table)
            f"WHERE {columns[2]} = %s AND {columns[3]} = %s",
            [key, batch_key],
        )
        row = cursor.fetchone()
    return None if row is None else (row[0], row[1])


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
    """Per-device Prio3 reports of a simulated shard (a fleet with ``prio3_reports``): verified as a
    real device's are, in one aggregation job at the helper (its shares in the clear: the simulator's
    devices hand them over directly, with no token or HPKE, which the helper takes only in a
    simulated fleet's collection). Rejected reports are counted (``proof_invalid``); the leader
    stores its accepted output shares summed. Returns how many were accepted.
    """
    rules = CollectionRules.objects.get(key=collection_key)
    config = VerifyConfig.of(
        collection_key=collection_key, shape=rules_shape(rules), verify_key=bytes(rules.verify_key)
    )
    side = AggregatorVerification("leader", config)
    verifier_shares = side.start(nonces, public_shares, leader_shares)
    sent = [k for k, share in enumerate(verifier_shares) if share is not None]
    messages: list[bytes | None] = [None] * len(nonces)
    pair = secrets.token_hex(16)
    refused: dict[tuple[str, str], int] = {}
    if len(sent) < len(nonces):
        refused["leader", PROOF_INVALID] = len(nonces) - len(sent)
    if sent:
        answer = helper_client.job_run(
            pair,
            dap.AggregationJobInitReq(
                collection=collection_key,
                min_cohort=min_cohort,
                verify_inits=[
                    dap.VerifyInit(
                        report_id=nonces[k].hex(),
                        batch=batch_key,
                        time=0.0,
                        version=1,
                        public_share=dap.b64(public_shares[k]),
                        token=None,
                        encrypted_input_share=None,
                        input_share=dap.b64(helper_shares[k]),
                        payload=dap.b64(verifier_shares[k]),  # type: ignore[arg-type]
                    )
                    for k in sent
                ],
            ),
        )
        for k, resp in zip(sent, answer.verify_resps, strict=True):
            if resp.type == dap.CONTINUE:
                messages[k] = dap.unb64(resp.payload, "payload")
            else:
                key = ("helper", resp.report_error or PROOF_INVALID)
                refused[key] = refused.get(key, 0) + 1
    accepted = side.finish(messages)
    kept = [k for k in range(len(nonces)) if accepted[k]]
    if refused:
        rejections_add(collection_key=collection_key, counts=refused)
    if kept:
        output_share_store(
            role="leader",
            rules=rules,
            batch_key=batch_key,
            source=source,
            pair=pair,
            output=output_sum(config, [side.output_share(k) for k in kept]),
            reports=len(kept),
            min_cohort=min_cohort,
        )
    return len(kept)
