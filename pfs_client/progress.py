"""A progress bar over a wait, drawn by tqdm.auto: a terminal's bar, or a notebook's widget.

It shows what the client polls anyway: a round's shards done of its shards (devices answered beside
them), or, for a round on real devices (no shards), the devices answered so far; an adaptive run's
rounds finished of its plan's.
"""

from __future__ import annotations

from typing import IO, Any

from tqdm import tqdm as text_bar
from tqdm.auto import tqdm as auto_bar

from pfs_client.models import AdaptiveRun, Round

# progress=True draws tqdm.auto's bar (a notebook's widget, else text on stderr); an open text file
# draws a text bar there (a terminal, a log, a test's buffer); False draws nothing.
Progress = bool | IO[str]


class ProgressBar:
    """Drawn on the first update; ``close()`` leaves the last state on screen."""

    def __init__(self, progress: Progress) -> None:
        self.file = None if isinstance(progress, bool) else progress
        self.enabled = progress is not False
        self.bar: Any = None

    def update(self, item: Round | AdaptiveRun) -> None:
        if not self.enabled:
            return
        if isinstance(item, AdaptiveRun):
            done, total = len(item.levels), len(item.data.get("plan") or []) or None
            label, unit, note = f"adaptive run {item.id}", "round", item.status
        else:
            done, total = item.steps
            answered = item.progress.get("devices_answered")
            unit = "shard" if total is not None else "device"
            label = f"round {item.id}"
            note = item.status if answered is None or unit == "device" else f"{item.status}, {answered:,} answered"
        if self.bar is None:
            kind = auto_bar if self.file is None else text_bar
            self.bar = kind(total=total, desc=label, unit=unit, file=self.file, dynamic_ncols=True, leave=True)
        if total is not None and self.bar.total != total:
            self.bar.total = total
        self.bar.n = done
        self.bar.set_postfix_str(note, refresh=False)
        self.bar.refresh()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
