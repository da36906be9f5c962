"""What every local randomizer shares: argument checks and the block size that bounds memory."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import numpy.typing as npt

# Devices are privatized in blocks so that memory stays bounded: a block holds at most this many
# coins as float64 (about 32 MiB), whatever the fleet size and domain.
COINS_PER_BLOCK = 1 << 22


def check_epsilon0(epsilon0: float) -> None:
    if not (epsilon0 > 0 and math.isfinite(epsilon0)):
        raise ValueError("epsilon0 must be a positive finite number")


def check_values(values: npt.NDArray[np.int64], domain_size: int) -> npt.NDArray[np.int64]:
    values = np.asarray(values, dtype=np.int64)
    if domain_size < 1:
        raise ValueError("domain_size must be at least 1")
    if values.size and (values.min() < 0 or values.max() >= domain_size):
        raise ValueError("values must be bucket indices in [0, domain_size)")
    return values


def devices_per_block(coins_per_device: int) -> int:
    """How many devices one block privatizes when each draws ``coins_per_device`` coins."""
    return max(1, COINS_PER_BLOCK // max(1, coins_per_device))


def sum_in_blocks(
    values: npt.NDArray[np.int64],
    *,
    length: int,
    coins_per_device: int,
    block_sum: Callable[[npt.NDArray[np.int64]], npt.NDArray[np.int64]],
) -> npt.NDArray[np.int64]:
    """The sum of every device's report, privatizing a block of devices at a time (bounded memory).

    ``block_sum`` privatizes one block of devices, each with its own coins, and sums their reports.
    """
    total = np.zeros(length, dtype=np.int64)
    block = devices_per_block(coins_per_device)
    for start in range(0, values.size, block):
        total += block_sum(values[start : start + block])
    return total
