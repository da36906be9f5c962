"""What a real device may read: the collection windows open to its fleet."""

from __future__ import annotations

from dataclasses import dataclass

from aggregation.models import CollectionRules
from devices.models import CollectionWindow, Fleet


@dataclass(frozen=True)
class OpenWindow:
    window: CollectionWindow
    report_length: int  # what each aggregator expects (CollectionRules.length)


def windows_open(*, fleet: Fleet) -> list[OpenWindow]:
    """The fleet's windows that are open, and whose collection the aggregators still accept reports in."""
    windows = list(
        CollectionWindow.objects.filter(fleet=fleet, closed_at__isnull=True).select_related("snapshot").order_by("pk")
    )
    lengths = dict(
        CollectionRules.objects.filter(key__in=[w.task_key for w in windows], closed=False).values_list("key", "length")
    )
    return [OpenWindow(w, lengths[w.task_key]) for w in windows if w.task_key in lengths]


def window_open_get(*, fleet: Fleet, collection_key: str) -> OpenWindow | None:
    """The open window of ``fleet`` for ``collection_key``; None if there is none (or it is another fleet's)."""
    window = (
        CollectionWindow.objects.filter(fleet=fleet, task_key=collection_key, closed_at__isnull=True)
        .select_related("snapshot")
        .first()
    )
    if window is None:
        return None
    length = CollectionRules.objects.filter(key=collection_key, closed=False).values_list("length", flat=True).first()
    return OpenWindow(window, length) if length is not None else None


def window_exists(*, fleet: Fleet, collection_key: str) -> bool:
    return CollectionWindow.objects.filter(fleet=fleet, task_key=collection_key).exists()
