"""What the client returns: typed, read-only views over the API's JSON (analyses, recipes, dry runs,
budgets, rounds, releases, adaptive runs). Each keeps the JSON it was read from as ``data``."""

from __future__ import annotations

import csv
import io
import json
import os
from dataclasses import dataclass, field
from typing import IO, Any

# The columns of the dashboard's CSV (analyses.pages.analysis.release_csv), in its order.
CSV_COLUMNS = ["cohort", "bucket", "estimate", "standard_error", "ci_low", "ci_high"]
# Release.to_dataframe's columns: the CSV's, and whether the cell's batch was suppressed.
FRAME_COLUMNS = [*CSV_COLUMNS, "suppressed"]
_NUMBERS = ("estimate", "standard_error", "ci_low", "ci_high")

Target = str | os.PathLike[str] | IO[str] | None


@dataclass(frozen=True)
class Analysis:
    """An analysis as ``GET /api/analyses/<identifier>/`` shows it: its approved policy and what it spent."""

    identifier: str
    title: str
    status: str
    fleet: str
    owner: str
    epsilon_allowed: float | None
    reports_allowed: int | None
    delta: float | None
    spent: dict[str, Any]
    data: dict[str, Any] = field(repr=False)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Analysis:
        return cls(
            identifier=data["identifier"],
            title=data.get("title") or "",
            status=data.get("status") or "",
            fleet=data.get("fleet") or "",
            owner=data.get("owner") or "",
            epsilon_allowed=data.get("epsilon_allowed"),
            reports_allowed=data.get("reports_allowed"),
            delta=data.get("delta"),
            spent=data.get("spent") or {},
            data=data,
        )


@dataclass(frozen=True)
class Recipe:
    """A stored recipe as ``GET /api/recipes/<id>/`` shows it; ``content`` is the recipe's JSON."""

    id: int
    analysis: str
    identifier: str
    content: dict[str, Any]
    epsilon: float | None
    delta: float | None
    min_cohort: int | None
    data: dict[str, Any] = field(repr=False)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Recipe:
        return cls(
            id=data["id"],
            analysis=data.get("analysis") or "",
            identifier=data.get("identifier") or "",
            content=data.get("content") or {},
            epsilon=data.get("epsilon"),
            delta=data.get("delta"),
            min_cohort=data.get("min_cohort"),
            data=data,
        )


@dataclass(frozen=True)
class DryRun:
    """What every device would do with a recipe (``POST /api/analyses/<id>/dry-run/``): nothing spent."""

    devices: int
    would_answer: int
    not_sampled: int
    would_refuse: dict[str, int]
    min_cohort: int
    meets_min_cohort: bool
    batches_below: list[str]
    epsilon: float
    delta: float
    too_noisy: bool
    too_noisy_reason: str | None
    data: dict[str, Any] = field(repr=False)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> DryRun:
        return cls(
            devices=data.get("devices", 0),
            would_answer=data.get("would_answer", 0),
            not_sampled=data.get("not_sampled", 0),
            would_refuse=data.get("would_refuse") or {},
            min_cohort=data.get("min_cohort", 0),
            meets_min_cohort=bool(data.get("meets_min_cohort")),
            batches_below=data.get("batches_below") or [],
            epsilon=data.get("epsilon", 0.0),
            delta=data.get("delta", 0.0),
            too_noisy=bool(data.get("too_noisy")),
            too_noisy_reason=data.get("too_noisy_reason"),
            data=data,
        )


@dataclass(frozen=True)
class BudgetScope:
    """One scope of a budget (the analysis, or a field): its allowance and the (epsilon, delta) spent."""

    scope: str
    field: str | None
    epsilon_allowed: float | None
    epsilon_spent: float
    delta_spent: float
    account: str
    reports_used: int
    data: dict[str, Any] = field(repr=False)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> BudgetScope:
        guarantee = data.get("guarantee") or {}
        return cls(
            scope=data["scope"],
            field=data.get("field"),
            epsilon_allowed=data.get("epsilon_allowed"),
            epsilon_spent=guarantee.get("epsilon", 0.0),
            delta_spent=guarantee.get("delta", 0.0),
            account=guarantee.get("account", ""),
            reports_used=data.get("reports_used", 0),
            data=data,
        )


@dataclass(frozen=True)
class Budget:
    """What an analysis has spent (``GET /api/analyses/<id>/budget/``): one statement per scope."""

    analysis: str
    accountant: str
    delta: float
    delta_total: float | None
    scopes: list[BudgetScope]
    data: dict[str, Any] = field(repr=False)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Budget:
        return cls(
            analysis=data["analysis"],
            accountant=data.get("accountant") or "",
            delta=data.get("delta", 0.0),
            delta_total=data.get("delta_total"),
            scopes=[BudgetScope.from_json(scope) for scope in data.get("scopes") or []],
            data=data,
        )


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

    @property
    def steps(self) -> tuple[int, int | None]:
        """How far the round is, as (done, total) for a progress bar: shards done of the shards, or,
        for a round on real devices (no shards), devices answered of an unknown total."""
        progress = self.progress
        if progress.get("shards_total"):
            return int(progress.get("shards_done") or 0), int(progress["shards_total"])
        return int(progress.get("devices_answered") or 0), None

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

    The metadata as attributes (``epsilon_spent``, ``min_cohort``, ``accountant``, …); ``batches`` has
    one entry per cohort, as the JSON has it; ``release["key"]`` reads any key of the JSON.
    """

    round_id: int
    data: dict[str, Any] = field(repr=False)

    def __getitem__(self, key: str) -> Any:
        return self.data[key]

    @property
    def batches(self) -> list[dict[str, Any]]:
        return self.data.get("batches", [])

    @property
    def analysis(self) -> str:
        return self.data.get("analysis", "")

    @property
    def recipe(self) -> str:
        return self.data.get("recipe", "")

    @property
    def mechanism(self) -> str:
        return self.data.get("mechanism", "")

    @property
    def reports(self) -> int:
        return self.data.get("reports", 0)

    @property
    def min_cohort(self) -> int | None:
        return self.data.get("min_cohort")

    @property
    def epsilon_spent(self) -> float:
        return self.data.get("epsilon_spent", 0.0)

    @property
    def delta_spent(self) -> float:
        """The round's delta, spent when any device answered (``epsilon_spent`` > 0), else 0."""
        return self.data.get("delta", 0.0) if self.epsilon_spent else 0.0

    @property
    def analysis_spent(self) -> dict[str, Any] | None:
        """The analysis's whole spend once this round started, as one (epsilon, delta) statement with its
        accountant; None for a release stored before the statement existed."""
        return self.data.get("analysis_spent")

    @property
    def accountant(self) -> str | None:
        return (self.analysis_spent or {}).get("accountant")

    @property
    def bucket_labels(self) -> list[str]:
        """The buckets in the release's order (its histogram's), from its first released batch."""
        for batch in self.batches:
            if not batch.get("suppressed"):
                return [bucket["label"] for bucket in batch.get("buckets", [])]
        return []

    @property
    def metadata(self) -> dict[str, Any]:
        """What to_dataframe puts in ``DataFrame.attrs``: the round, what it spent, under which rules."""
        return {
            "round_id": self.round_id,
            "analysis": self.analysis,
            "recipe": self.recipe,
            "mechanism": self.mechanism,
            "epsilon_spent": self.epsilon_spent,
            "delta_spent": self.delta_spent,
            "analysis_spent": self.analysis_spent,
            "min_cohort": self.min_cohort,
            "accountant": self.accountant,
            "intervals": self.data.get("intervals"),
            "view": self.data.get("view"),
        }

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
        """A pandas DataFrame: one row per bucket of every batch, suppressed ones included with NA cells.

        ``bucket`` is an ordered Categorical in the release's bucket order; a missing cohort (no cohorts)
        and a suppressed batch's cells are ``pd.NA`` (nullable ``string`` and ``Float64`` columns);
        ``suppressed`` says which. ``DataFrame.attrs`` holds ``metadata``. Needs pandas (the extra)."""
        try:
            import pandas
        except ImportError as missing:
            raise ImportError(
                'Release.to_dataframe needs pandas (pip install pandas, or "pfs-client[pandas]"); to_rows() does not'
            ) from missing
        labels = self.bucket_labels
        rows = []
        for batch in self.batches:
            cohort = batch.get("cohort") or pandas.NA
            if batch.get("suppressed"):
                rows += [{"cohort": cohort, "bucket": label, "suppressed": True} for label in labels]
                continue
            for bucket in batch["buckets"]:
                low, high = bucket["ci95"]
                rows.append(
                    {
                        "cohort": cohort,
                        "bucket": bucket["label"],
                        "estimate": bucket["estimate"],
                        "standard_error": bucket["standard_error"],
                        "ci_low": low,
                        "ci_high": high,
                        "suppressed": False,
                    }
                )
        frame = pandas.DataFrame(rows, columns=FRAME_COLUMNS)
        frame["cohort"] = frame["cohort"].astype("string")
        frame["bucket"] = pandas.Categorical(frame["bucket"], categories=labels, ordered=True)
        for column in _NUMBERS:
            frame[column] = pandas.array([pandas.NA if pandas.isna(x) else x for x in frame[column]], dtype="Float64")
        frame["suppressed"] = frame["suppressed"].astype(bool)
        frame.attrs.update(self.metadata)
        return frame


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
