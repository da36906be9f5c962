"""`fleet create` streams shards: its memory is a batch of shards' worth, whatever the fleet size.

tracemalloc follows every Python and numpy allocation. A fleet four times the size (four times the
shards) must not take more memory to create; building every shard first, as fleet creation once
did, takes memory in proportion to the shards. The batch is set to 8 shards' bytes here, so that
small fleets span several batches.
"""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
from django.core.management import call_command

from devices import fleet_io
from devices.models import Fleet
from devices.synthetic import generate_shard
from pfs_device.columns import pack

SHARD_SIZE = 1_000
SHARDS_PER_INSERT = 8
ONE_SHARD_BYTES = len(pack(generate_shard(SHARD_SIZE, np.random.default_rng([7, 0]), now=1_800_000_000)))


@pytest.fixture(autouse=True)
def batches_of_eight_shards(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fleet_io, "BYTES_PER_INSERT", SHARDS_PER_INSERT * ONE_SHARD_BYTES)


def creation_peak_bytes(name: str, shards: int) -> int:
    tracemalloc.start()
    try:
        call_command(
            "fleet",
            "create",
            "--name",
            name,
            "--size",
            str(shards * SHARD_SIZE),
            "--seed",
            "7",
            "--shard-size",
            str(SHARD_SIZE),
            "--now",
            "1800000000",
        )
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_creating_a_fleet_four_times_larger_takes_no_more_memory(db) -> None:
    small = creation_peak_bytes("small", shards=3 * SHARDS_PER_INSERT)
    large = creation_peak_bytes("large", shards=12 * SHARDS_PER_INSERT)
    assert Fleet.objects.get(name="large").shards.count() == 12 * SHARDS_PER_INSERT
    # The large fleet's shards alone are 96 shards' bytes; its creation holds a batch of them. The
    # first line is the proof: four times the fleet, the same peak. The second bounds what a batch
    # costs: on PostgreSQL the driver also holds a batch's insert as text (bytea escaped to hex,
    # then the query), about six batches' worth measured, well under the 12 batches of the fleet.
    assert large < 1.25 * small, (small, large)
    assert large < 0.75 * 12 * SHARDS_PER_INSERT * ONE_SHARD_BYTES, (large, ONE_SHARD_BYTES)


def test_a_streamed_fleet_holds_the_same_devices_as_shards_generated_one_by_one(db) -> None:
    call_command(
        "fleet",
        "create",
        "--name",
        "twin",
        "--size",
        str(2 * SHARDS_PER_INSERT * SHARD_SIZE + 17),
        "--seed",
        "7",
        "--shard-size",
        str(SHARD_SIZE),
        "--now",
        "1800000000",
    )
    fleet = Fleet.objects.get(name="twin")
    shards = list(fleet.shards.order_by("index"))
    assert [s.index for s in shards] == list(range(2 * SHARDS_PER_INSERT + 1))
    assert shards[-1].size == 17
    for shard in (shards[0], shards[SHARDS_PER_INSERT], shards[-1]):
        expected = generate_shard(
            shard.size, np.random.default_rng([7, shard.index]), first_index=shard.index * SHARD_SIZE, now=1_800_000_000
        )
        columns = shard.load_columns()
        for name, column in expected.items():
            np.testing.assert_array_equal(columns[name], column)
