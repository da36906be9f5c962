"""A device's own budget ledger and decision log, kept in a JSON file on the device.

Per analysis, the columns of pfs_device.budget's ledger for one device (epsilon in integer
nano-epsilon, reports, per field, and the accountant's extra columns). Per task, the decision the
device took, so that it decides once: a device asked again neither samples itself again nor
answers twice. Every change is written to a temporary file, flushed to disk and renamed over
the ledger, so a crash leaves either the old ledger or the new one, never half of one.
"""

from __future__ import annotations

import json
import os
import tempfile
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from pfs_device.budget import ledger_empty
from pfs_device.columns import Columns

VERSION = 1


class LedgerCorrupt(ValueError):
    """The ledger file cannot be read: the device refuses everything rather than start from zero."""


class Ledger:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        if self.path.exists():
            try:
                self.state = json.loads(self.path.read_text())
            except (OSError, ValueError) as error:
                raise LedgerCorrupt(f"{self.path}: {error}") from error
            if not isinstance(self.state, dict) or self.state.get("version") != VERSION:
                raise LedgerCorrupt(f"{self.path}: not a version {VERSION} ledger")
        else:
            self.state = {"version": VERSION, "analyses": {}, "tasks": {}}

    # ------------------------------------------------------------ budget

    def columns(self, analysis: str) -> Columns:
        """The device's ledger for ``analysis`` as pfs_device.budget reads it: one-element columns."""
        columns = ledger_empty(1)
        for name, value in self.state["analyses"].get(analysis, {}).items():
            dtype = np.int64 if isinstance(value, int) else np.float64
            columns[name] = np.array([value], dtype=dtype)
        return columns

    def store(self, analysis: str, columns: Columns) -> None:
        self.state["analyses"][analysis] = {name: column[0].item() for name, column in columns.items()}

    # ------------------------------------------------------------ decisions

    def decision(self, task_key: str) -> dict | None:
        return self.state["tasks"].get(task_key)

    def record(self, task_key: str, **entry: object) -> None:
        """Add to the log entry of a task (created with the time it was first recorded)."""
        log = self.state["tasks"].setdefault(task_key, {"at": datetime.now(UTC).isoformat(timespec="seconds")})
        log.update(entry)

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        descriptor, temporary = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name}.")
        try:
            with os.fdopen(descriptor, "w") as file:
                json.dump(self.state, file, sort_keys=True)
                file.flush()
                os.fsync(file.fileno())
            os.replace(temporary, self.path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
