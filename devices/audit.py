"""The device's audit log: every task a device received, what it decided, and what it spent.

Read from the shards' ShardRun records (one int8 decision per device), so the log is written in the
same transaction as the answer and the budget charge: it cannot disagree with the ledger.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import numpy as np

from devices.models import Fleet, FleetShard, ShardRun
from pfs_device.budget import Decision


class DeviceNotFound(LookupError):
    pass


@dataclass(frozen=True)
class AuditEntry:
    at: datetime
    task_key: str
    analysis: str
    query: str
    mechanism: str
    epsilon0: float
    epsilon: float
    delta: float
    decision: str
    epsilon_spent: float

    def as_json(self) -> dict:
        return {**self.__dict__, "at": self.at.isoformat()}


def device_locate(*, fleet: Fleet, device_id: str) -> tuple[FleetShard, int]:
    """The shard holding ``device_id`` and the device's position in it.

    Fleets store a `device_id` column; older shards without one use the synthetic scheme
    d<global index>.
    """
    offset = 0
    for shard in fleet.shards.order_by("index"):
        ids = shard.load_columns().get("device_id")
        if ids is None:
            ids = np.array([f"d{offset + i}" for i in range(shard.size)])
        hits = np.flatnonzero(ids == device_id)
        if hits.size:
            return shard, int(hits[0])
        offset += shard.size
    raise DeviceNotFound(f"no device {device_id!r} in fleet {fleet.name}")


def device_audit(*, fleet: Fleet, device_id: str) -> list[AuditEntry]:
    """Oldest first: each task the device's shard answered, and this device's decision on it."""
    shard, position = device_locate(fleet=fleet, device_id=device_id)
    entries = []
    for run in ShardRun.objects.filter(shard=shard).order_by("created_at", "pk"):
        decisions = np.frombuffer(bytes(run.decisions), dtype=np.int8)
        decision = Decision(int(decisions[position])) if decisions.size else None
        task = run.task
        entries.append(
            AuditEntry(
                at=run.created_at,
                task_key=run.task_key,
                analysis=task.get("analysis", ""),
                query=task.get("query", ""),
                mechanism=task.get("mechanism", ""),
                epsilon0=task.get("epsilon0", 0.0),
                epsilon=task.get("epsilon", 0.0),
                delta=task.get("delta", 0.0),
                decision=decision.label if decision is not None else "unknown",
                epsilon_spent=run.epsilon_spent if decision == Decision.ANSWERED else 0.0,
            )
        )
    return entries
