"""Columnar arrays of a shard (or a ledger) packed into one database value as .npz bytes."""

from __future__ import annotations

import io

import numpy as np
import numpy.typing as npt

Columns = dict[str, npt.NDArray]


def pack(columns: Columns) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **columns)
    return buffer.getvalue()


def unpack(blob: bytes | memoryview) -> Columns:
    with np.load(io.BytesIO(bytes(blob)), allow_pickle=False) as archive:
        return {name: archive[name] for name in archive.files}
