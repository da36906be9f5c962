"""`fleet create` streams shards: its memory is a few shards' worth, whatever the fleet size.

tracemalloc follows every Python and numpy allocation. A fleet four times the size (four times the
shards) must not take more memory to create; building every shard first, as fleet creation once
did, takes memory in proportion to the shards.
"""

from __future__ import annotations

import tracemalloc

import numpy as np
from django.core.management import call_command

from devices.columns import pack
from devices.fleet_io import SHARDS_PER_INSERT
from devices.models import Fleet
from devices.synthetic import generate_shard

SHARD_SIZE = 1_000


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
    one_shard = len(pack(generate_shard(SHARD_SIZE, np.random.default_rng([7, 0]), now=1_800_000_000)))
    small = creation_peak_bytes("small", shards=3 * SHARDS_PER_INSERT)
    large = creation_peak_bytes("large", shards=12 * SHARDS_PER_INSERT)
    assert Fleet.objects.get(name="large").shards.count() == 12 * SHARDS_PER_INSERT
    # The large fleet's shards alone are 96 shards' bytes; its creation holds a batch of them.
    assert large < 1.25 * small, (small, large)
    assert large < 3 * SHARDS_PER_INSERT * one_shard, (large, one_shard)


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
