"""Columnar arrays of a shard (or a ledger) packed into one database value.

``pack`` writes a small format of its own (below): a fixed prefix, a JSON list of the columns (name,
dtype, shape, where its bytes lie, their CRC-32) and each column's raw bytes. It replaced .npz
(np.savez) because a round rewrites every shard's ledger: np.savez's zip members and np.load's
header parsing (ast.literal_eval per column) cost about 3.5 ms a shard of 10,000 devices, the new
format about 1. Bytes written before it (.npz, which begin with a zip's ``PK\\x03\\x04``) are still
read; they are rewritten in the new format the next time they are written.
"""

from __future__ import annotations

import io
import json
import struct
import zipfile
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

Columns = dict[str, npt.NDArray]


class CorruptColumns(ValueError):
    """Packed bytes that do not hold what their own header says (bad CRC-32, truncated, malformed)."""


def pack(columns: Mapping[str, npt.ArrayLike]) -> bytes:
    return _write([_Stored.of(name, column) for name, column in columns.items()])


def pack_over(blob: bytes | memoryview, changed: Mapping[str, npt.NDArray]) -> bytes:
    """The packed bytes of ``blob``'s columns with ``changed`` in place of theirs (a new name goes
    last), as ``pack`` would write them: the other columns' stored bytes are copied as they are (their
    CRC-32 checked), neither read into arrays nor encoded again (retention rewrites 4 columns of a
    shard's 8, and ``pack`` of the whole shard cost as much as the rest of the rewrite).
    """
    source = _members(blob)
    stored = [_Stored.of(name, changed[name]) if name in changed else source.stored(name) for name in source.names]
    stored += [_Stored.of(name, column) for name, column in changed.items() if name not in source.names]
    return _write(stored)


def unpack(blob: bytes | memoryview) -> Columns:
    """Every column of ``blob``, each a writable array of its own."""
    members = _members(blob)
    return {name: members.read(name).copy() for name in members.names}


class PackedColumns(Mapping[str, npt.NDArray]):
    """A shard's columns, each read from the packed bytes the first time it is asked for.

    A round reads two or three of a shard's columns (the encoded field, the cohort fields, the
    phrase times for retention), while the typed text takes most of the bytes: reading only what is
    used costs about 1 ms a shard of 10,000 devices instead of 5 (``unpack`` reads every column).
    The arrays are read-only views of the packed bytes (a narrowed column: a copy at its own
    width): a round reads a shard's data and never changes it in place (retention writes new columns).
    """

    def __init__(self, blob: bytes | memoryview) -> None:
        self._members = _members(blob)
        self._read: dict[str, npt.NDArray] = {}

    def __getitem__(self, name: str) -> npt.NDArray:
        if name not in self._read:
            self._read[name] = self._members.read(name)  # KeyError for a column the shard lacks
        return self._read[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._members.names)

    def __len__(self) -> int:
        return len(self._members.names)


# ---------------------------------------------------------------- the format pack writes
#
# prefix: MAGIC (8 bytes), the header's length and its CRC-32 (two little-endian uint32);
# header: UTF-8 JSON, one [name, dtype, shape, offset, length, CRC-32] per column, in order, the dtype
#   as numpy spells it with its byte order ("<i8", "|b1", "<U5"), the offset from the data's start;
#   an integer column whose values all fit a narrower integer type is stored in it, named as a
#   seventh item ("|u1", "<u2", "<i4"...), and read back as its own dtype: a shard's phrase offsets,
#   times and token ids, and a ledger's spent units, take half their bytes or less, which every
#   round reads and retention and a charge rewrite (at 10^6 devices the first round took 17% less
#   CPU, the next 5%: bench/results/fleet_round_target.md); the dtypes a reader sees do not change;
# data: from the first multiple of ALIGN after the header, each column's bytes in C order, each
#   starting at a multiple of ALIGN (so that the read-only views PackedColumns gives are aligned).

MAGIC = b"PFSCOL\x00\x01"
_PREFIX = struct.Struct("<8sII")
ALIGN = 16
_NPZ_MAGIC = b"PK\x03\x04"


def _aligned(offset: int) -> int:
    return -(-offset // ALIGN) * ALIGN


@dataclass(frozen=True)
class _Stored:
    """One column as the format stores it: its description and its bytes (a view, not a copy)."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    data: memoryview
    crc: int
    stored_dtype: str | None = None  # the narrower integer type its bytes hold, if any

    @classmethod
    def of(cls, name: str, column: npt.ArrayLike) -> _Stored:
        array = np.asanyarray(column)
        dtype = array.dtype
        # Only plain dtypes: their one-string spelling (dtype.str) reads back as the same dtype.
        if dtype.hasobject or dtype.fields is not None or dtype.subdtype is not None or np.dtype(dtype.str) != dtype:
            raise ValueError(f"column {name}: dtype {dtype} cannot be packed (plain numbers, booleans or text only)")
        narrow = _narrowest(array)
        if narrow is not None:
            array = array.astype(narrow, order="C")
        elif not array.flags.c_contiguous:  # Fortran order or a strided view: its values in C order
            array = array.copy(order="C")
        data = memoryview(array.reshape(-1).view(np.uint8))
        stored = None if narrow is None else narrow.str
        return cls(name, dtype.str, tuple(array.shape), data, zlib.crc32(data), stored)


# Integer types a column may be stored in, narrowest first.
_NARROW = [np.dtype(t) for t in ("|u1", "|i1", "<u2", "<i2", "<u4", "<i4")]


def _narrows(dtype: np.dtype, stored: np.dtype) -> bool:
    """Whether a header may say that a column of ``dtype`` is stored as ``stored``."""
    return dtype.kind in "iu" and stored in _NARROW and stored.itemsize < dtype.itemsize


def _narrowest(array: npt.NDArray) -> np.dtype | None:
    """The narrowest integer type that holds every value of an integer column, if narrower than its own."""
    if array.dtype.kind not in "iu" or array.size == 0:
        return None
    low, high = int(array.min()), int(array.max())
    for narrow in _NARROW:
        if narrow.itemsize >= array.dtype.itemsize:
            return None
        info = np.iinfo(narrow)
        if info.min <= low and high <= info.max:
            return narrow
    return None


def _write(columns: list[_Stored]) -> bytes:
    offsets, end = [], 0
    for column in columns:
        offsets.append(_aligned(end))
        end = offsets[-1] + column.data.nbytes
    header = json.dumps(
        [
            [
                c.name,
                c.dtype,
                list(c.shape),
                offset,
                c.data.nbytes,
                c.crc,
                *([c.stored_dtype] if c.stored_dtype else []),
            ]
            for c, offset in zip(columns, offsets, strict=True)
        ],
        separators=(",", ":"),
    ).encode()
    parts = [_PREFIX.pack(MAGIC, len(header), zlib.crc32(header)), header]
    position = _PREFIX.size + len(header)
    start = _aligned(position)
    for column, offset in zip(columns, offsets, strict=True):
        parts.append(bytes(start + offset - position))  # padding to the column's aligned start
        parts.append(column.data)
        position = start + offset + column.data.nbytes
    return b"".join(parts)


def _members(blob: bytes | memoryview) -> _Columns | _NpzMembers:
    """The columns of packed bytes, as pack writes them now or as .npz (before it)."""
    data = blob if isinstance(blob, bytes) else bytes(blob)
    return _NpzMembers(data) if data[:4] == _NPZ_MAGIC else _Columns(data)


class _Columns:
    """The columns of bytes in pack's format, each read as a view of the bytes where it is stored,
    its CRC-32 checked when it is read (a round reads few of a shard's columns)."""

    def __init__(self, blob: bytes) -> None:
        self._blob = blob
        if len(blob) < _PREFIX.size:
            raise CorruptColumns(f"packed columns too short: {len(blob)} bytes")
        magic, length, crc = _PREFIX.unpack_from(blob)
        if magic != MAGIC:
            raise CorruptColumns("not packed columns: unknown magic")
        header = blob[_PREFIX.size : _PREFIX.size + length]
        if len(header) != length or zlib.crc32(header) != crc:
            raise CorruptColumns("packed columns: bad CRC-32 of the header")
        self._stored = {}
        start, end = _aligned(_PREFIX.size + length), _PREFIX.size + length
        for name, dtype, shape, offset, size, column_crc, *narrow in json.loads(header):
            view = memoryview(blob)[start + offset : start + offset + size]
            if offset < 0 or len(view) != size:
                raise CorruptColumns(f"column {name}: truncated")
            stored_dtype = narrow[0] if narrow else None
            if stored_dtype is not None and not _narrows(np.dtype(dtype), np.dtype(stored_dtype)):
                raise CorruptColumns(f"column {name}: {dtype} stored as {stored_dtype}")
            self._stored[name] = _Stored(name, dtype, tuple(shape), view, column_crc, stored_dtype)
            end = start + offset + size
        if end != len(blob):
            raise CorruptColumns(f"packed columns: {len(blob)} bytes where the header says {end}")
        self.names = list(self._stored)

    def stored(self, name: str) -> _Stored:
        stored = self._stored[name]
        if zlib.crc32(stored.data) != stored.crc:
            raise CorruptColumns(f"column {name}: bad CRC-32")
        return stored

    def read(self, name: str) -> npt.NDArray:
        stored = self.stored(name)
        dtype = np.dtype(stored.dtype)
        held = dtype if stored.stored_dtype is None else np.dtype(stored.stored_dtype)
        count = int(np.prod(stored.shape, dtype=np.int64))
        if count * held.itemsize != stored.data.nbytes:
            raise CorruptColumns(f"column {name}: {stored.data.nbytes} bytes for {count} values of {held}")
        values = np.frombuffer(stored.data, dtype=held, count=count).reshape(stored.shape)
        if held != dtype:  # a narrow integer type, checked when the header was read
            values = values.astype(dtype)  # widening: every value is exact
            values.flags.writeable = False  # as the views of columns stored at their width
        return values


class _NpzMembers:
    """The .npy members of .npz bytes (what ``pack`` wrote before its own format), each read as a
    view of the bytes where it is stored.

    np.savez stored each member uncompressed, so a column's values lie in the blob as they are:
    np.frombuffer over that span replaces np.load's copy through zipfile and its per-member
    overhead. The member's CRC-32 is checked as zipfile would, so corrupted bytes still raise.
    """

    def __init__(self, blob: bytes) -> None:
        self._blob = blob
        with zipfile.ZipFile(io.BytesIO(self._blob)) as archive:
            self._infos = {info.filename.removesuffix(".npy"): info for info in archive.infolist()}
        self.names = list(self._infos)

    def stored(self, name: str) -> _Stored:
        return _Stored.of(name, self.read(name))

    def read(self, name: str) -> npt.NDArray:
        info = self._infos[name]
        if info.compress_type != zipfile.ZIP_STORED:
            raise ValueError(f"column {name} is compressed; pack() stores columns uncompressed")
        # A local file header: 30 bytes, then the name and an extra field of the lengths it gives.
        header = self._blob[info.header_offset : info.header_offset + _LOCAL_HEADER.size]
        signature, *_, name_length, extra_length = _LOCAL_HEADER.unpack(header)
        if signature != _LOCAL_HEADER_SIGNATURE:
            raise zipfile.BadZipFile(f"column {name}: no local file header where the directory says")
        start = info.header_offset + _LOCAL_HEADER.size + name_length + extra_length
        member = memoryview(self._blob)[start : start + info.file_size]
        if zlib.crc32(member) != info.CRC:
            raise zipfile.BadZipFile(f"column {name}: bad CRC-32")
        stream = io.BytesIO(member)
        version = np.lib.format.read_magic(stream)
        if version == (1, 0):
            shape, fortran_order, dtype = np.lib.format.read_array_header_1_0(stream)
        elif version == (2, 0):
            shape, fortran_order, dtype = np.lib.format.read_array_header_2_0(stream)
        else:  # 3.0 only for dtypes with non-Latin-1 field names, which no column has
            raise ValueError(f"column {name}: .npy format {version} is not read here")
        if dtype.hasobject:
            raise ValueError(f"column {name} holds Python objects; packed columns never do")
        count = int(np.prod(shape, dtype=np.int64))
        flat = np.frombuffer(member, dtype=dtype, count=count, offset=stream.tell())
        return flat.reshape(shape[::-1]).transpose() if fortran_order else flat.reshape(shape)


# struct layout of a ZIP local file header (APPNOTE.TXT 4.3.7), as zipfile reads it.
_LOCAL_HEADER = struct.Struct("<4s2B4HL2L2H")
_LOCAL_HEADER_SIGNATURE = b"PK\x03\x04"
