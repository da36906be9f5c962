"""Device-side services: fleets, policy snapshots, and answering a task shard by shard.

``shard_answer`` is the one chokepoint that spends device budget. For every device of a shard,
vectorised, it: samples participation with the recipe's rate, verifies the query against the
device's policy snapshot, runs checks 1-3, encodes and privatizes the answer with the device's own
coins, secret-shares it to the two aggregators, and charges the ledger — all in one transaction
keyed by (task, shard), so that a retried task changes nothing twice.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections import ChainMap
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
from django.conf import settings
from django.core.cache import cache
from django.db import transaction

from aggregation.heavy_hitters_leader import ShardedReports, sharded_upload, simulated_shard
from aggregation.models import CollectionRules
from aggregation.upload import BatchPair, shard_shares_upload, verified_reports_upload
from devices.models import Enrollment, Fleet, FleetShard, PolicySnapshot, ShardLedger, ShardRun
from pfs_base import metrics
from pfs_device.budget import Accountant, Decision, ledger_empty
from pfs_device.columns import pack, pack_over
from pfs_device.decision import DeviceTask, budget_request, cohort_keys, decide, snapshot_digest
from pfs_device.encode import device_words, encode_devices
from pfs_device.report_client import vector_shard
from pfs_device.streams import retention_changes
from privacy import field as prime_field
from privacy.encoding import content_encoding
from privacy.heavy_hitters import Poplar1WordsType, word_bits
from privacy.mechanisms import mechanism_get
from privacy.report_vdaf import report_shape

# ---------------------------------------------------------------- policy snapshots


def policy_snapshot_create(*, content: dict) -> PolicySnapshot:
    """The immutable snapshot for ``content``; the same content always names the same snapshot."""
    snapshot, _ = PolicySnapshot.objects.get_or_create(digest=snapshot_digest(content), defaults={"content": content})
    return snapshot


def fleet_enroll(*, fleet: Fleet, snapshot: PolicySnapshot) -> Enrollment:
    """Send the devices of ``fleet`` the snapshot of an approved analysis, replacing any earlier one."""
    enrollment, _ = Enrollment.objects.update_or_create(
        fleet=fleet, analysis_identifier=snapshot.content["analysis"], defaults={"snapshot": snapshot}
    )
    return enrollment


# ---------------------------------------------------------------- answering a task


@dataclass(frozen=True)
class ShardOutcome:
    created: bool  # False when the shard had already answered this task
    answered: int
    outcomes: dict[str, int] = field(default_factory=dict)


def shard_answer(*, shard_id: int, task: DeviceTask) -> ShardOutcome:
    """Have every device of one shard decide on, and possibly answer, ``task``. Idempotent."""
    now = time.time()
    prepared = _poplar1_prepared(shard_id, task, now)
    with transaction.atomic():
        # Lock order: the shard row first, then its ledger; every writer takes them in this order.
        shard = FleetShard.objects.select_for_update().select_related("fleet").get(pk=shard_id)
        # Only what a retry answers with: not the audit record's task and decisions.
        done = ShardRun.objects.filter(task_key=task.task_key, shard=shard).values_list("answered", "outcomes").first()
        if done is not None:
            return ShardOutcome(created=False, answered=done[0], outcomes=done[1])

        stored = shard.columns  # as read, before retention rewrites it
        columns = _columns_after_retention(shard, now)
        ledger_row, ledger = _ledger_read(shard, task.analysis)
        decision, accountant = _decide(shard, task, ledger)
        answered = decision == Decision.ANSWERED
        if prepared is not None and not prepared.holds(bytes(stored), answered):
            prepared = None  # the shard or its devices' decisions changed since: shard again, here
        pairs = _answer(shard, task, answered, columns, prepared) if answered.any() else []
        # The helper stores its shares while the rest of the shard is written here; the commit waits
        # for its answer (aggregation.upload).
        with shard_shares_upload(collection_key=task.task_key, source=f"shard:{shard.pk}", batches=pairs):
            if answered.any():
                accountant.charge(ledger, budget_request(task), answered)
                _ledger_write(ledger_row, shard, task.analysis, pack(ledger))

            counts = np.bincount(decision, minlength=len(Decision))
            outcomes = {d.label: int(counts[d]) for d in Decision if d != Decision.ANSWERED and counts[d]}
            ShardRun.objects.create(
                task_key=task.task_key,
                shard=shard,
                answered=int(counts[Decision.ANSWERED]),
                outcomes=outcomes,
                epsilon_spent=task.privacy.epsilon,
                task=task.audit_json(),
                decisions=decision.astype(np.int8).tobytes(),
            )
        metrics.budget_refusals_counted(outcomes)
    return ShardOutcome(created=True, answered=int(counts[Decision.ANSWERED]), outcomes=outcomes)


def _ledger_read(shard: FleetShard, analysis: str) -> tuple[ShardLedger | None, dict]:
    """A shard's ledger for an analysis: its row (None before the first charge) and its state."""
    row = ShardLedger.objects.filter(shard=shard, analysis_identifier=analysis).first()
    return row, row.load_state() if row else ledger_empty(shard.size)


def _ledger_write(row: ShardLedger | None, shard: FleetShard, analysis: str, state: bytes) -> None:
    """Store a shard's charged ledger: a new row, or the existing one's state (the only column a
    charge changes, and its time; not every column, as a plain save would)."""
    if row is None:
        ShardLedger.objects.create(shard=shard, analysis_identifier=analysis, state=state)
        return
    row.state = state
    row.save(update_fields=["state", "updated_at"])


def shard_dry_run(*, shard_id: int, task: DeviceTask) -> tuple[dict[str, int], dict[str, int]]:
    """What the devices of one shard would decide on ``task``, by reason, and how many would answer
    in each batch (cohort); nothing is read of their data or spent.

    The same decision as ``shard_answer`` (sampling, snapshot, query class, checks 1-3 against the
    device's ledger), none of its effects: no data is encoded, no share sent, no ledger charged.
    Only the cohort fields (approved as non-sensitive) are read, and only when the task has any.
    """
    shard = FleetShard.objects.select_related("fleet").defer("columns").get(pk=shard_id)
    _, ledger = _ledger_read(shard, task.analysis)
    decision, _ = _decide(shard, task, ledger)
    counts = np.bincount(decision, minlength=len(Decision))
    answering = decision == Decision.ANSWERED
    if task.cohorts:
        keys = cohort_keys(task.cohorts, shard.load_columns(), shard.fleet.vocabularies)[answering]
        values, sizes = np.unique(keys.astype(str), return_counts=True)
        by_batch = {str(k): int(n) for k, n in zip(values, sizes, strict=True)}
    else:
        by_batch = {"": int(answering.sum())} if answering.any() else {}
    return {d.label: int(counts[d]) for d in Decision if counts[d]}, by_batch


def fleet_batch_sizes(*, fleet: Fleet, cohorts: tuple[str, ...]) -> dict[str, int]:
    """How many devices of a simulated fleet fall in each batch of ``cohorts`` (its enrollment), read
    from the cohort columns alone (approved as non-sensitive). Cached: a fleet's devices do not move."""
    key = f"pfs:fleet-batches:{fleet.pk}:{fleet.size}:{','.join(cohorts)}"
    cached = cache.get(key)
    if cached is not None:
        return cached
    sizes: dict[str, int] = {}
    for shard in FleetShard.objects.filter(fleet=fleet).select_related("fleet"):
        keys = cohort_keys(cohorts, shard.load_columns(), fleet.vocabularies)
        values, counts = np.unique(keys.astype(str), return_counts=True)
        for value, count in zip(values, counts, strict=True):
            sizes[str(value)] = sizes.get(str(value), 0) + int(count)
    cache.set(key, sizes, timeout=3600)
    return sizes


def _columns_after_retention(shard: FleetShard, now: float) -> Mapping[str, np.ndarray]:
    """Retention first: events older than their stream's policy at ``now`` are deleted before any
    query runs.

    The shard is rewritten in the transaction that answers the query, so the deletion is durable
    before the answer leaves; only the rewritten columns are encoded again (pack_over), and the
    columns the query reads come from them or, read when first used, from the stored bytes.
    """
    stored = shard.load_columns()
    changed, dropped = retention_changes(stored, now=now)
    if not dropped:
        return stored
    shard.columns = pack_over(shard.columns, changed)
    shard.save(update_fields=["columns"])
    return ChainMap(changed, stored)


@dataclass(frozen=True)
class _Prepared:
    """A Poplar1 shard's reports, sharded before the shard's lock for the devices that would answer
    then. Each device spends milliseconds sharding its word, so a shard of thousands would hold the
    database's write lock (SQLite's, for every writer) for tens of seconds; drawn from the shard's
    keyed coins, they are the reports the locked answer would draw, as long as it finds the same
    stored columns and the same devices answering."""

    columns: bytes
    answered: np.ndarray
    reports: ShardedReports

    def holds(self, columns: bytes, answered: np.ndarray) -> bool:
        return self.columns == columns and np.array_equal(self.answered, answered)


def _poplar1_prepared(shard_id: int, task: DeviceTask, now: float) -> _Prepared | None:
    """``shard_answer``'s Poplar1 reports, sharded without a lock (see _Prepared); None for any other
    query, and where nothing would be sent. Reads, never writes: the locked answer decides again."""
    parsed = task.parsed_content
    if parsed is None or not isinstance(parsed[1], Poplar1WordsType):
        return None
    if ShardRun.objects.filter(task_key=task.task_key, shard_id=shard_id).exists():
        return None
    shard = FleetShard.objects.select_related("fleet").get(pk=shard_id)
    stored = shard.load_columns()
    changed, _ = retention_changes(stored, now=now)
    decision, _ = _decide(shard, task, _ledger_read(shard, task.analysis)[1])
    answered = decision == Decision.ANSWERED
    if not answered.any():
        return None
    reports = _poplar1_sharded(shard, task, parsed[1], answered, ChainMap(changed, stored))
    return _Prepared(columns=bytes(shard.columns), answered=answered, reports=reports)


def _coins(task: DeviceTask, shard: FleetShard, stream: int) -> np.random.Generator:
    """A simulated shard's coins for one purpose (0 sampling, 1 privatizing, 2 shares, 3 encoding).

    The round's seed alone does not fix them: it is keyed with a server secret (PFS_COIN_SECRET,
    SECRET_KEY by default). A seed read from a dump or a log, with one aggregator's shares, would
    otherwise give the other aggregator's mask, and so a batch's exact sum.
    """
    keyed = hmac.new(settings.PFS_COIN_SECRET.encode(), str(task.seed).encode(), hashlib.sha256).digest()
    return np.random.default_rng([int.from_bytes(keyed[:16], "big"), shard.index, stream])


def _decide(shard: FleetShard, task: DeviceTask, ledger: dict) -> tuple[np.ndarray, Accountant | None]:
    """Per device: sample, verify, check the budget; and the policy's accountant, if it got that far.

    Nothing here reads the devices' data.
    """
    rng = _coins(task, shard, 0)
    sampled = rng.random(shard.size) < task.privacy.sampling_rate
    # Devices enforce only the snapshot they were enrolled with for this analysis.
    enrollment = (
        Enrollment.objects.filter(fleet_id=shard.fleet_id, analysis_identifier=task.analysis)
        .values_list("snapshot__digest", "snapshot__content")
        .first()
    )
    held = enrollment is not None and enrollment[0] == task.snapshot_digest
    return decide(
        task=task,
        policy=enrollment[1] if held else None,
        fleet_name=shard.fleet.name,
        ledger=ledger,
        sampled=sampled,
    )


def _answer(
    shard: FleetShard,
    task: DeviceTask,
    answered: np.ndarray,
    columns: Mapping[str, np.ndarray],
    prepared: _Prepared | None = None,
) -> list[BatchPair]:
    """Encode, privatize and secret-share the answers of the answering devices, one batch per cohort:
    each batch's pair of shares, for shard_shares_upload (none for a fleet with ``prio3_reports``,
    whose devices' reports are verified and stored here, nor for a Poplar1 walk, whose reports are
    sharded per device, ``prepared`` when it holds, and sent here)."""
    parsed = task.parsed_content or content_encoding(task.data_types)  # unparseable: raises here
    _, encoding = parsed
    if isinstance(encoding, Poplar1WordsType):
        reports = prepared.reports if prepared else _poplar1_sharded(shard, task, encoding, answered, columns)
        sharded_upload(CollectionRules.objects.get(key=task.task_key), reports)
        return []
    encode_rng = _coins(task, shard, 3)
    values = encode_devices(task.data_types, columns, shard.fleet.vocabularies, encode_rng, parsed)
    privacy = task.privacy
    oracle = None if privacy.aggregator_noise else mechanism_get(privacy.mechanism, privacy.epsilon0)
    privatize_rng = _coins(task, shard, 1)
    share_rng = _coins(task, shard, 2)

    batch_keys = cohort_keys(task.cohorts, columns, shard.fleet.vocabularies)
    pairs: list[BatchPair] = []
    for batch_key in sorted(set(batch_keys[answered].tolist())):
        members = answered & (batch_keys == batch_key)
        if shard.fleet.prio3_reports:
            _prio3_reports_upload(
                shard, task, batch_key, values[members], oracle, encoding.size, privatize_rng, share_rng
            )
            continue
        if oracle is None:  # aggregator noise: the one-hot values themselves, noise comes later
            report_sum = np.bincount(values[members], minlength=encoding.size)
        else:
            report_sum = oracle.privatize_sum(values[members], encoding.size, privatize_rng)
        # The devices of a simulated shard hand over their shares pre-summed. A sum of independent
        # uniform leader shares is itself uniform, so one uniform mask has the same distribution.
        leader, helper = prime_field.split(prime_field.to_field(report_sum), share_rng)
        pairs.append(
            BatchPair(
                batch_key=batch_key,
                leader_share=leader,
                helper_share=helper,
                reports=int(members.sum()),
                min_cohort=privacy.min_cohort,
            )
        )
    return pairs


def _poplar1_sharded(
    shard: FleetShard,
    task: DeviceTask,
    encoding: Poplar1WordsType,
    answered: np.ndarray,
    columns: Mapping[str, np.ndarray],
) -> ShardedReports:
    """A Poplar1 walk: each answering device picks one of its words by its own coins and shards it into
    one Poplar1 report (privacy.vdaf.poplar1, as a real device does); nothing is sent yet.
    The coins are the shard's, keyed: a retried shard sends the same reports, which the helper takes once."""
    words = device_words(columns, shard.fleet.vocabularies["tokens"], _coins(task, shard, 3))
    measurements = [word_bits(word, encoding.bits) for word, chosen in zip(words, answered, strict=True) if chosen]
    rules = CollectionRules.objects.get(key=task.task_key)
    return simulated_shard(rules, measurements, coins=_coins(task, shard, 2).bytes)


def _prio3_reports_upload(
    shard: FleetShard,
    task: DeviceTask,
    batch_key: str,
    values: np.ndarray,
    oracle,
    domain_size: int,
    privatize_rng: np.random.Generator,
    share_rng: np.random.Generator,
) -> None:
    """A fleet with ``prio3_reports``: each answering device privatizes and shards its own report with
    its validity proof (pfs_device.report_client, as a real device does), and both aggregators verify
    every report (aggregation.upload.verified_reports_upload). The coins are the shard's, keyed."""
    privacy = task.privacy
    shape = report_shape(
        mechanism=None if oracle is None else privacy.mechanism, epsilon0=privacy.epsilon0, domain_size=domain_size
    )
    if oracle is None:
        vectors = np.eye(domain_size, dtype=np.int64)[values]
    else:
        vectors = oracle.privatize(values, domain_size, privatize_rng).astype(np.int64)
    rand_size = shape.vdaf().RAND_SIZE
    nonces, publics, leaders, helpers = [], [], [], []
    for vector in vectors:  # sharding is per device: each proves its own report
        nonce = share_rng.bytes(16)
        public, leader, helper = vector_shard(
            collection_key=task.task_key, vector=vector, shape=shape, nonce=nonce, rand=share_rng.bytes(rand_size)
        )
        nonces.append(nonce)
        publics.append(public)
        leaders.append(leader)
        helpers.append(helper)
    verified_reports_upload(
        collection_key=task.task_key,
        batch_key=batch_key,
        source=f"shard:{shard.pk}",
        nonces=nonces,
        public_shares=publics,
        leader_shares=leaders,
        helper_shares=helpers,
        min_cohort=privacy.min_cohort,
    )


def ledger_totals(*, fleet: Fleet, analysis_identifier: str) -> dict[str, float]:
    """Fleet-wide budget spent on an analysis (for operators and tests): max and total per column."""
    totals: dict[str, float] = {}
    for row in ShardLedger.objects.filter(shard__fleet=fleet, analysis_identifier=analysis_identifier):
        for name, column in row.load_state().items():
            totals[f"max:{name}"] = max(totals.get(f"max:{name}", 0), float(column.max(initial=0)))
            totals[f"sum:{name}"] = totals.get(f"sum:{name}", 0) + float(column.sum())
    return totals
