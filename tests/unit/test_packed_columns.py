"""A shard's columns read from their packed bytes one at a time (pfs_device.columns.PackedColumns)."""

from __future__ import annotations

import io
import zipfile
from collections.abc import Iterator, Mapping

import numpy as np
import pytest

from devices.synthetic import generate_shard
from pfs_device.budget import ledger_empty
from pfs_device.columns import MAGIC, CorruptColumns, PackedColumns, pack, pack_over, unpack
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


LAYOUTS = {
    "empty": np.zeros(0, dtype=np.int64),
    "scalar": np.array(3.5),
    "fortran": np.asfortranarray(np.arange(12, dtype=np.int32).reshape(3, 4)),
    "text": np.array(["a", "bcd"]),
    "missing": np.array([np.nan, 1.0], dtype=np.float32),
    "flags": np.array([True, False]),
    "matrix": np.arange(6, dtype=np.int16).reshape(2, 3),
}


def assert_same_columns(got: dict, expected: dict) -> None:
    assert list(got) == list(expected)
    for name, column in expected.items():
        assert got[name].dtype == column.dtype and got[name].shape == column.shape, name
        np.testing.assert_array_equal(got[name], column)


def test_packed_columns_and_unpack_read_every_layout_pack_writes() -> None:
    blob = pack(LAYOUTS)
    packed = PackedColumns(blob)
    assert_same_columns({name: packed[name] for name in packed}, LAYOUTS)
    assert_same_columns(unpack(blob), LAYOUTS)


def test_unpack_gives_writable_arrays_and_packed_columns_read_only_views() -> None:
    # A ledger is unpacked to be charged in place; a shard's data is only read.
    blob = pack(LAYOUTS)
    assert all(column.flags.writeable for column in unpack(blob).values())
    packed = PackedColumns(blob)
    with pytest.raises(ValueError, match="read-only"):
        packed["flags"][0] = False


def npz(columns: dict) -> bytes:
    """The bytes pack() wrote before its own format (np.savez), as existing databases hold them."""
    buffer = io.BytesIO()
    np.savez(buffer, **columns)
    return buffer.getvalue()


def test_packed_columns_refuse_bytes_whose_crc_does_not_match() -> None:
    column = np.arange(1_000, dtype=np.int64)
    blob = bytearray(pack({"values": column}))
    blob[bytes(blob).index(column.tobytes()) + 100] ^= 1
    with pytest.raises(CorruptColumns, match="CRC"):
        PackedColumns(bytes(blob))["values"]
    with pytest.raises(CorruptColumns, match="CRC"):
        unpack(bytes(blob))
    with pytest.raises(CorruptColumns, match="CRC"):
        pack_over(bytes(blob), {})  # a copied column is checked too


def test_npz_bytes_whose_crc_does_not_match_still_raise() -> None:
    column = np.arange(1_000, dtype=np.int64)
    blob = bytearray(npz({"values": column}))
    blob[bytes(blob).index(column.tobytes()) + 100] ^= 1
    with pytest.raises(zipfile.BadZipFile, match="CRC"):
        PackedColumns(bytes(blob))["values"]
    with pytest.raises(zipfile.BadZipFile, match="CRC"):
        unpack(bytes(blob))


@pytest.mark.parametrize("where", ["magic", "header", "truncated", "extended"])
def test_packed_columns_refuse_a_damaged_header_or_length(where: str) -> None:
    blob = bytearray(pack(LAYOUTS))
    if where == "magic":
        blob[0] ^= 1
    elif where == "header":
        blob[blob.index(b"fortran")] ^= 1
    elif where == "truncated":
        del blob[-1]
    else:
        blob += b"\0"
    with pytest.raises(CorruptColumns):
        unpack(bytes(blob))
    with pytest.raises(CorruptColumns):
        PackedColumns(bytes(blob))


def test_pack_writes_its_own_format_and_reads_the_npz_it_wrote_before() -> None:
    blob = pack(LAYOUTS)
    assert blob.startswith(MAGIC) and not blob.startswith(b"PK\x03\x04")
    old = npz(LAYOUTS)
    assert old.startswith(b"PK\x03\x04")
    packed = PackedColumns(old)
    assert_same_columns({name: packed[name] for name in packed}, LAYOUTS)
    assert_same_columns(unpack(old), LAYOUTS)
    assert_same_columns(unpack(memoryview(old)), LAYOUTS)  # PostgreSQL's bytea reads as a memoryview
    # Rewriting old bytes writes the new format, the unchanged columns' values as they were.
    repacked = pack_over(old, {"flags": np.array([False, True, True])})
    assert repacked.startswith(MAGIC)
    assert_same_columns(unpack(repacked), {**LAYOUTS, "flags": np.array([False, True, True])})


def every_dtype_stored() -> dict[str, np.ndarray]:
    """A column of every dtype the product packs: a synthetic shard's, a ledger's (every accountant's
    columns are int64, int32 or float64), and a few more of the plain ones."""
    rng = np.random.default_rng(8)
    columns = {f"shard:{name}": column for name, column in generate_shard(50, rng, now=NOW).items()}
    columns |= {f"ledger:{name}": column + 7 for name, column in ledger_empty(50).items()}
    columns["ledger:rdp_0"] = rng.random(50)
    for dtype in ("<i1", "<u1", "<i2", "<u2", "<u4", "<u8", "<f2", "<f4", ">i4", "<c16", "|b1", "<U7", "|S3", "<M8[s]"):
        columns[dtype] = rng.integers(0, 100, 5).astype(dtype)
    return columns


def test_every_dtype_used_packs_and_reads_back_as_it_was() -> None:
    columns = every_dtype_stored()
    assert {column.dtype.str for column in columns.values()} >= {"<f4", "<i2", "<i8", "<i4", "<f8", "<U7"}
    blob = pack(columns)
    assert_same_columns(unpack(blob), columns)
    packed = PackedColumns(blob)
    assert_same_columns({name: packed[name] for name in packed}, columns)
    # Every view lies at an aligned address: numpy reads aligned values at full speed.
    assert all(packed[name].ctypes.data % 16 == 0 for name in packed if packed[name].size)


@pytest.mark.parametrize("column", [np.array([{}], dtype=object), np.zeros(2, dtype=[("a", "<i4"), ("b", "<f8")])])
def test_pack_refuses_objects_and_structured_dtypes(column: np.ndarray) -> None:
    with pytest.raises(ValueError, match="cannot be packed"):
        pack({"column": column})


def test_pack_over_replaces_the_changed_columns_and_copies_the_others() -> None:
    columns = generate_shard(300, np.random.default_rng(5), now=NOW)
    blob = pack(columns)
    changed = {"tokens": np.array([7, 8], dtype=np.int32), "added": np.ones(3)}
    repacked = pack_over(blob, changed)
    # The order pack would give: the stored columns where they were, a new one last.
    assert_same_columns(unpack(repacked), {**columns, **changed})
    assert_same_columns(unpack(pack_over(blob, {})), columns)


def test_retention_reads_only_the_phrase_columns() -> None:
    columns = generate_shard(300, np.random.default_rng(6), now=NOW)
    read: list[str] = []

    class Recording(Mapping):  # a shard's stored columns, as PackedColumns reads them: on demand
        def __getitem__(self, name: str) -> np.ndarray:
            read.append(name)
            return columns[name]

        def __iter__(self) -> Iterator[str]:
            return iter(columns)

        def __len__(self) -> int:
            return len(columns)

    kept, dropped = apply_retention(Recording(), now=NOW)
    assert dropped > 0
    assert set(read) == {"phrase_start", "phrase_time", "token_start", "tokens"}
    np.testing.assert_array_equal(kept["age"], columns["age"])  # the rest, read when asked for
    assert list(kept) == list(columns)
