"""Fleets from outside the dashboard: seeded synthetic fleets and fleets imported from JSONL.

Both validate everything before they write, then create the fleet and all its shards in one
transaction: a bad request or a bad file leaves nothing behind. Shards are generated (or sliced)
and written a few at a time, so a synthetic fleet of any size takes the memory of a few shards.
The format and the columns are described in docs/fleets.md.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np
from django.db import IntegrityError, transaction

from devices.models import Fleet, FleetShard
from devices.synthetic import LOCALES, TOKENS, generate_shard
from pfs_device.columns import pack
from pfs_device.records import MAX_LOCALES, Parsed, columns_slice, parse_line, parsed_columns, unix_seconds

__all__ = ["MAX_SEED", "FleetInvalid", "fleet_create", "fleet_import", "unix_seconds"]

NAME_PATTERN = re.compile(r"^[-a-zA-Z0-9_]{1,64}$")  # Fleet.name is a 64-character slug
MAX_SEED = 2**63 - 1  # Fleet.seed is a signed 64-bit integer; numpy seeds must be non-negative
MAX_DEVICES = 2**31 - 1  # Fleet.size and FleetShard.size are positive 32-bit integers
# A fleet with prio3_reports shards and verifies every device's report inside its shard's
# transaction, about 10 ms a device: 1,000 devices hold the shard's lock (SQLite's, for every
# writer) about 10 s, under the 30 s other writers wait. Its default, where no size is asked for.
PRIO3_SHARD_SIZE = 1_000


class FleetInvalid(Exception):
    """The request or the file cannot make a fleet; ``errors`` holds one message per problem."""

    def __init__(self, errors: list[str]) -> None:
        super().__init__("; ".join(errors))
        self.errors = errors


# ---------------------------------------------------------------- synthetic fleets


def fleet_create(
    *, name: str, size: int, seed: int, shard_size: int, now: float | None = None, prio3_reports: bool = False
) -> Fleet:
    """Create a seeded synthetic fleet of ``size`` devices, ``shard_size`` per shard.

    Shard i draws from ``default_rng([seed, i])``; device j of the fleet is ``d<j>``. Phrase times
    lie in the 60 days before ``now`` (default: the current time): the same seed and ``now`` give
    the same columns, and another ``now`` only shifts ``phrase_time``.
    """
    errors = _name_errors(name)
    if not _is_integer(size) or not 1 <= size <= MAX_DEVICES:
        errors.append(f"size: must be an integer from 1 to {MAX_DEVICES:,}")
    if not _is_integer(seed) or not 0 <= seed <= MAX_SEED:
        errors.append(f"seed: must be an integer from 0 to {MAX_SEED}")
    errors += _shard_size_errors(shard_size)
    if errors:
        raise FleetInvalid(errors)
    reference = time.time() if now is None else now
    return _fleet_write(
        name=name,
        size=size,
        seed=seed,
        vocabularies={"locale": list(LOCALES), "tokens": list(TOKENS)},
        shards=_synthetic_shards(size=size, seed=seed, shard_size=shard_size, now=reference),
        prio3_reports=prio3_reports,
    )


def _synthetic_shards(*, size: int, seed: int, shard_size: int, now: float) -> Iterator[tuple[int, bytes]]:
    """(devices, packed columns) of each shard in order, generated only when asked for."""
    for index, start in enumerate(range(0, size, shard_size)):
        devices = min(shard_size, size - start)
        columns = generate_shard(devices, np.random.default_rng([seed, index]), first_index=start, now=now)
        yield devices, pack(columns)


# ---------------------------------------------------------------- imported fleets


def fleet_import(
    *, name: str, path: str | Path, shard_size: int, now: float | None = None, prio3_reports: bool = False
) -> Fleet:
    """Create a fleet from a JSONL file, one device per line (format: docs/fleets.md).

    Every line is validated before anything is written; any problem raises ``FleetInvalid`` with
    one message per problem (``line 3: profile.age: must be a number``) and creates nothing.
    Phrases without a time get ``now`` (default: the current time). Locales and tokens become the
    fleet's vocabularies: locales sorted by name, tokens (lowercased, split on whitespace) by
    descending count, ties by name.
    """
    errors = _name_errors(name) + _shard_size_errors(shard_size)
    reference = time.time() if now is None else now
    parsed = Parsed()
    try:
        with Path(path).open("rb") as file:
            for number, raw in enumerate(file, start=1):
                parse_line(number, raw, reference, parsed)
    except OSError as error:
        errors.append(f"{path}: cannot read: {error.strerror}")
    else:
        if not parsed.ids and not parsed.errors:
            parsed.error(f"{path}: the file has no devices")
    errors += parsed.errors
    if parsed.more_errors:
        errors.append(f"… and {parsed.more_errors:,} more problems")
    locales = set(parsed.locales)
    if len(locales) > MAX_LOCALES:
        errors.append(f"profile.locale: {len(locales):,} distinct locales, at most {MAX_LOCALES:,} are supported")
    if errors:
        raise FleetInvalid(errors)

    fleet_columns, vocabularies = parsed_columns(parsed)
    size = len(parsed.ids)
    shards = (
        (min(shard_size, size - start), pack(columns_slice(fleet_columns, start, min(start + shard_size, size))))
        for start in range(0, size, shard_size)
    )
    return _fleet_write(
        name=name, size=size, seed=None, vocabularies=vocabularies, shards=shards, prio3_reports=prio3_reports
    )


# ---------------------------------------------------------------- both


def _batches_of_bytes(
    numbered: Iterable[tuple[int, tuple[int, bytes]]],
) -> Iterator[list[tuple[int, tuple[int, bytes]]]]:
    """Consecutive (index, (devices, blob)) shards, each batch ending once it holds BYTES_PER_INSERT."""
    batch, held = [], 0
    for item in numbered:
        batch.append(item)
        held += len(item[1][1])
        if held >= BYTES_PER_INSERT:
            yield batch
            batch, held = [], 0
    if batch:
        yield batch


def _name_errors(name: object) -> list[str]:
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        return ["name: must be 1 to 64 letters, digits, hyphens or underscores"]
    if Fleet.objects.filter(name=name).exists():
        return [f"name: a fleet named {name!r} already exists"]
    return []


def _shard_size_errors(shard_size: object) -> list[str]:
    if not _is_integer(shard_size) or not 1 <= shard_size <= MAX_DEVICES:
        return [f"shard_size: must be an integer from 1 to {MAX_DEVICES:,}"]
    return []


def _is_integer(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


# Packed shard bytes inserted per statement (at least one shard). A shard of the default 25,000
# synthetic devices packs to about 2.2 MB, so a statement carries about 7 shards: what fleet
# creation holds in memory, with the database driver's copies of the statement's parameters,
# whatever the fleet's size or shard size, and few statements enough that each one's round trip is
# small beside its bytes.
BYTES_PER_INSERT = 16 << 20


def _fleet_write(
    *,
    name: str,
    size: int,
    seed: int | None,
    vocabularies: dict[str, list[str]],
    shards: Iterable[tuple[int, bytes]],
    prio3_reports: bool = False,
) -> Fleet:
    """The fleet row and all its shard rows, in one transaction, drawing ``shards`` a batch at a time.

    ``shards`` is consumed lazily (bulk_create would make a list of all of them): only about
    ``BYTES_PER_INSERT`` of packed shards are held at once.
    """
    try:
        with transaction.atomic():
            fleet = Fleet.objects.create(
                name=name, size=size, seed=seed, vocabularies=vocabularies, prio3_reports=prio3_reports
            )
            for batch in _batches_of_bytes(enumerate(shards)):
                FleetShard.objects.bulk_create(
                    FleetShard(fleet=fleet, index=index, size=devices, columns=blob) for index, (devices, blob) in batch
                )
    except IntegrityError as error:
        # Another process created the name between the check and the insert.
        raise FleetInvalid([f"name: a fleet named {name!r} already exists"]) from error
    return fleet
