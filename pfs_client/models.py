"""Small read-only views over the API's JSON: a round, a release, an adaptive run."""

from __future__ import annotations

import csv
import io
import json
import os
from dataclasses import dataclass, field
from typing import IO, Any

# The columns of the dashboard's CSV (analyses.pages.analysis.release_csv), in its order.
CSV_COLUMNS = ["cohort", "bucket", "estimate", "standard_error", "ci_low", "ci_high"]

Target = str | os.PathLike[str] | IO[str] | None


@dataclass(frozen=True)
class Round:
    """A round as ``GET /api/rounds/<id>/`` shows it."""

    id: int
    status: str
    progress: dict[str, Any]
    error: str
    recipe: int | None
    data: dict[str, Any] = field(repr=False)

    TERMINAL = frozenset({"released", "withheld", "failed", "cancelled"})

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Round:
        return cls(
            id=data["id"],
            status=data["status"],
            progress=data.get("progress") or {},
            error=data.get("error") or "",
            recipe=data.get("recipe"),
            data=data,
        )

    @property
    def finished(self) -> bool:
        return self.status in self.TERMINAL

    def describe(self) -> str:
        """One line: status, shards done, devices answered."""
        progress = self.progress
        parts = [f"round {self.id} {self.status}"]
        if "shards_total" in progress:
            parts.append(f"{progress.get('shards_done', 0)}/{progress['shards_total']} shards")
        if "devices_answered" in progress:
            parts.append(f"{progress['devices_answered']:,} devices answered")
        line = ", ".join(parts)
        return f"{line}: {self.error}" if self.error else line


@dataclass(frozen=True)
class Release:
    """A round's release as ``GET /api/rounds/<id>/release/`` returns it (docs/formats.md).

    ``release["epsilon_spent"]`` reads any key of the JSON; ``batches`` has one entry per cohort.
    """

    round_id: int
    data: dict[str, Any] = field(repr=False)

    def __getitem__(self, key: str) -> Any:
        return self.data[key]

    @property
    def batches(self) -> list[dict[str, Any]]:
        return self.data.get("batches", [])

    def to_rows(self) -> list[dict[str, Any]]:
        """One row per bucket of each released batch, with the dashboard CSV's columns.
        Suppressed batches have no rows, as in the dashboard's CSV."""
        rows = []
        for batch in self.batches:
            if batch.get("suppressed"):
                continue
            for bucket in batch["buckets"]:
                low, high = bucket["ci95"]
                rows.append(
                    {
                        "cohort": batch["cohort"],
                        "bucket": bucket["label"],
                        "estimate": bucket["estimate"],
                        "standard_error": bucket["standard_error"],
                        "ci_low": low,
                        "ci_high": high,
                    }
                )
        return rows

    def to_csv(self, target: Target = None) -> str:
        """The rows as CSV, written as the dashboard writes them (same header, quoting and CRLF line
        ends), to a path or an open text file if given. Returns the CSV text."""
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        writer.writerows(self.to_rows())
        return write_text(buffer.getvalue(), target)

    def to_json(self, target: Target = None) -> str:
        """The release's JSON, indented, to a path or an open text file if given. Returns the text."""
        return write_text(json.dumps(self.data, indent=2) + "\n", target)

    def to_dataframe(self) -> Any:
        """The rows as a pandas DataFrame. Needs pandas, which the client does not depend on."""
        try:
            import pandas
        except ImportError as missing:
            raise ImportError("Release.to_dataframe needs pandas (pip install pandas); to_rows() does not") from missing
        return pandas.DataFrame(self.to_rows(), columns=CSV_COLUMNS)


@dataclass(frozen=True)
class AdaptiveRun:
    """An adaptive run as ``GET /api/adaptive-runs/<id>/`` shows it (docs/adaptive.md)."""

    id: int
    status: str
    stop_reason: str
    levels: list[dict[str, Any]]
    data: dict[str, Any] = field(repr=False)

    WAITING_FOR_NOBODY = frozenset({"finished", "failed"})

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> AdaptiveRun:
        return cls(
            id=data["id"],
            status=data["status"],
            stop_reason=data.get("stop_reason") or "",
            levels=data.get("levels") or [],
            data=data,
        )

    def __getitem__(self, key: str) -> Any:
        return self.data[key]

    @property
    def current_round(self) -> Round | None:
        current = self.data.get("current_round")
        return Round.from_json(current) if current else None

    def describe(self) -> str:
        line = f"adaptive run {self.id} {self.status}, {len(self.levels)} levels"
        current = self.current_round
        if current is not None and not current.finished:
            line += f"; {current.describe()}"
        return f"{line}: {self.stop_reason}" if self.stop_reason else line


def write_text(text: str, target: Target) -> str:
    """Write to a path (newline="" keeps the CSV's CRLF as written) or an open file; return the text."""
    if target is None:
        return text
    if isinstance(target, str | os.PathLike):
        with open(target, "w", encoding="utf-8", newline="") as file:
            file.write(text)
    else:
        target.write(text)
    return text
