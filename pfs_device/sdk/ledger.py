"""A device's own budget ledger and decision log, kept in a JSON file on the device.

Per analysis, the columns of pfs_device.budget's ledger for one device (epsilon in integer
nano-epsilon, reports, per field, and the accountant's extra columns). Per task, the decision the
device took, so that it decides once: a device asked again neither samples itself again nor
answers twice. Every change is written to a temporary file, flushed to disk and renamed over
the ledger, so a crash leaves either the old ledger or the new one, never half of one.

A task being answered keeps its progress in its log entry, under "pending" (pfs_device.sdk.device):
the plan and the report vector, written with the charge; then the sealed report, not yet signed;
then the blinding of its token request (which names that report), written before the request is
sent; then the report with its token, written before the upload. A device stopped at any step resumes there the next time it is offered the task; the entry
is removed once the report is sent.
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

    def forget(self, task_key: str, *names: str) -> None:
        """Remove entries of a task's log (its pending report, once it is sent)."""
        log = self.state["tasks"].get(task_key, {})
        for name in names:
            log.pop(name, None)

    def save(self) -> None:
        atomic_write(self.path, json.dumps(self.state, sort_keys=True).encode())


def atomic_write(path: Path, content: bytes) -> None:
    """Write ``content`` to ``path`` so that a crash leaves the old file or the new one: a temporary
    file in the same folder, flushed to disk, renamed over ``path``, then the folder flushed too (the
    rename itself is durable once the folder's entry is on disk)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(descriptor, "wb") as file:
            file.write(content)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    if hasattr(os, "O_DIRECTORY"):  # POSIX; elsewhere a folder cannot be opened to flush it
        folder = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(folder)
        finally:
            os.close(folder)
