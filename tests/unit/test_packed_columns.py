"""A shard's columns read from their packed bytes one at a time (pfs_device.columns.PackedColumns)."""

from __future__ import annotations

import numpy as np
import pytest

from devices.synthetic import generate_shard
from pfs_device.columns import PackedColumns, pack, unpack
from pfs_device.streams import apply_retention

NOW = 1_800_000_000.0


def test_packed_columns_hold_what_unpack_reads_column_by_column() -> None:
    columns = generate_shard(500, np.random.default_rng(3), now=NOW)
    packed = PackedColumns(pack(columns))
    everything = unpack(pack(columns))
    assert list(packed) == list(everything) and len(packed) == len(everything)
    for name, column in everything.items():
        np.testing.assert_array_equal(packed[name], column)
        assert packed[name].dtype == column.dtype
    assert packed.get("no such column") is None
    with pytest.raises(KeyError):
        packed["no such column"]


def test_retention_over_packed_columns_equals_retention_over_a_dict() -> None:
    columns = generate_shard(500, np.random.default_rng(4), now=NOW)
    for now in (NOW - 30 * 86_400, NOW):  # nothing expired (the fleet holds 60 days); about half expired
        kept, dropped = apply_retention(PackedColumns(pack(columns)), now=now)
        expected, expected_dropped = apply_retention(columns, now=now)
        assert dropped == expected_dropped
        assert set(kept) == set(expected)
        for name in expected:
            np.testing.assert_array_equal(kept[name], expected[name])
        assert (dropped == 0) == (now < NOW)
