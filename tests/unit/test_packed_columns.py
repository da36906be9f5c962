"""A shard's columns read from their packed bytes one at a time (pfs_device.columns.PackedColumns)."""

from __future__ import annotations

import io
import json
import struct
import zipfile
import zlib
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
    column = np.arange(1_000, dtype=np.int64) + 2**40  # too wide for a narrower type: stored as it is
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


def _header(blob: bytes) -> list:
    length = struct.unpack_from("<I", blob, len(MAGIC))[0]
    return json.loads(blob[len(MAGIC) + 8 : len(MAGIC) + 8 + length])


@pytest.mark.parametrize(
    ("dtype", "values", "stored"),
    [
        (np.int64, [0, 255], "|u1"),
        (np.int64, [-128, 127], "|i1"),
        (np.int64, [0, 256], "<u2"),
        (np.int64, [-129, 0], "<i2"),
        (np.int64, [0, 65_535], "<u2"),
        (np.int64, [-1, 65_535], "<i4"),
        (np.int64, [0, 2**32 - 1], "<u4"),
        (np.int64, [-(2**31), 2**31 - 1], "<i4"),
        (np.int64, [-1, 2**32 - 1], None),  # no narrower type holds both
        (np.int64, [0, 2**63 - 1], None),
        (np.uint64, [0, 2**64 - 1], None),
        (np.int32, [0, 40_000], "<u2"),
        (np.int16, [-5, 5], "|i1"),
        (np.uint8, [0, 255], None),  # nothing is narrower
        (np.float64, [0.0, 1.0], None),  # floats are stored as they are
        ("<U5", ["d0001", "d9999"], None),  # text is stored as it is
    ],
)
def test_an_integer_column_is_stored_in_the_narrowest_type_and_read_back_as_its_own(dtype, values, stored) -> None:
    column = np.array(values * 50, dtype=dtype)
    blob = pack({"c": column})
    entry = _header(blob)[0]
    assert (entry[6] if len(entry) > 6 else None) == stored
    width = np.dtype(stored or dtype).itemsize
    assert entry[4] == column.size * width  # the bytes stored are the narrow ones
    for read in (PackedColumns(blob)["c"], unpack(blob)["c"]):
        assert read.dtype == column.dtype
        np.testing.assert_array_equal(read, column)
    assert not PackedColumns(blob)["c"].flags.writeable and unpack(blob)["c"].flags.writeable


def test_a_shard_and_a_ledger_pack_into_half_their_bytes_or_less() -> None:
    shard = generate_shard(2_000, np.random.default_rng(5), now=NOW)
    raw = sum(column.nbytes for column in shard.values())
    text = sum(column.nbytes for column in shard.values() if column.dtype.kind in "fU")  # kept as they are
    assert len(pack(shard)) < text + (raw - text) / 2
    ledger = ledger_empty(2_000)
    ledger["epsilon_used"][::3] = 2_000_000_000  # 2.0 in nano units: fits a uint32
    assert len(pack(ledger)) < sum(column.nbytes for column in ledger.values()) / 2


def test_pack_over_keeps_the_copied_columns_narrow_and_narrows_the_changed() -> None:
    shard = generate_shard(300, np.random.default_rng(6), now=NOW)
    blob = pack(shard)
    changed = {"tokens": shard["tokens"][:10].copy(), "extra": np.arange(5, dtype=np.int64)}
    over = pack_over(blob, changed)
    assert {e[0]: e[6:] for e in _header(over)} == {
        **{e[0]: e[6:] for e in _header(blob)},
        "tokens": ["|u1"] if changed["tokens"].max() < 256 else ["<u2"],
        "extra": ["|u1"],
    }
    read = unpack(over)
    for name, column in {**shard, **changed}.items():
        np.testing.assert_array_equal(read[name], column)
        assert read[name].dtype == column.dtype


@pytest.mark.parametrize(
    ("column", "stored"),
    [
        (np.arange(10, dtype=np.int64), "<f4"),
        (np.arange(10, dtype=np.int64), "<i8"),
        (np.arange(10, dtype=np.int64), "|S8"),
        (np.array(["d01", "d02"]), "|S3"),
        (np.array(["d01", "d02"]), "<u4"),
    ],
)
def test_a_header_naming_another_stored_type_is_refused(column, stored) -> None:
    blob = pack({"c": column})
    entries = _header(blob)
    entries[0][6:] = [stored]
    header = json.dumps(entries, separators=(",", ":")).encode()
    length = struct.unpack_from("<I", blob, len(MAGIC))[0]
    start = len(MAGIC) + 8
    data = blob[-(entries[0][4]) :]  # the one column's bytes, at the end
    padding = -(start + len(header)) % 16
    forged = MAGIC + struct.pack("<II", len(header), zlib.crc32(header)) + header + bytes(padding) + data
    assert len(blob) > start + length  # the original had a header and data too
    with pytest.raises(CorruptColumns):
        PackedColumns(forged)["c"]
