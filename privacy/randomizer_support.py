"""What every local randomizer shares: argument checks, the block size that bounds memory, and the
exact sampler of a sum of reports for randomizers whose coordinates are independent."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import numpy.typing as npt

# Devices are privatized in blocks so that memory stays bounded: a block holds at most this many
# coins as float64 (about 32 MiB), whatever the fleet size and domain.
COINS_PER_BLOCK = 1 << 22

# Above this many coins (devices x buckets) in one ``privatize_sum`` call, a randomizer whose report
# coordinates are independent (asymmetric OHE, symmetric RAPPOR) draws the sum of the reports from
# its exact distribution instead of drawing every device's coins. Below it, per-device coins are
# cheap (2^26 coins take well under a second), and the per-device path is kept: the seeded tests
# pin its values, and a benchmarked fleet shard (10,000 devices x 1,024 buckets) stays on it. Above
# it (e.g. 20,000 buckets x 1,000,000 devices = 2e10 coins), per-device coins are far too slow,
# while the sum drawn from its exact distribution is the same distribution at O(n + k) cost: see
# ``exact_report_sum``. Read at call time, so a test or a benchmark may move it.
EXACT_SUM_ABOVE = 1 << 26


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


def exact_sum_wanted(values: npt.NDArray[np.int64], domain_size: int) -> bool:
    """Whether ``privatize_sum`` over these values should draw the sum exactly (``EXACT_SUM_ABOVE``)."""
    return values.size * domain_size > EXACT_SUM_ABOVE


def exact_report_sum(
    values: npt.NDArray[np.int64],
    domain_size: int,
    *,
    p_own: float,
    p_other: float,
    rng: np.random.Generator,
) -> npt.NDArray[np.int64]:
    """The sum of n one-hot-based reports, drawn from its exact distribution in O(n + k).

    Valid for randomizers whose device reports bit d as 1 with probability ``p_own`` if d is the
    device's bucket and ``p_other`` otherwise, every coordinate with its own independent coin. Then
    S_d is a sum of c_d Bernoulli(p_own) and n - c_d Bernoulli(p_other) independent coins, c_d the
    number of devices in bucket d, and S_d depends only on the coins of column d, so
        S_d = Binomial(c_d, p_own) + Binomial(n - c_d, p_other), independently across d,
    which is the same distribution as summing per-device reports (not the same draws).
    """
    counts = np.bincount(values, minlength=domain_size).astype(np.int64)
    own = rng.binomial(counts, p_own)
    other = rng.binomial(values.size - counts, p_other)
    return (own + other).astype(np.int64)


def one_hot_report_sum(
    privatize: Callable[[npt.NDArray[np.int64], int, np.random.Generator], npt.NDArray[np.uint8]],
    values: npt.NDArray[np.int64],
    domain_size: int,
    rng: np.random.Generator,
    *,
    p_own: float,
    p_other: float,
) -> npt.NDArray[np.int64]:
    """``privatize_sum`` of a randomizer that sends every coordinate with its own coin.

    Up to ``EXACT_SUM_ABOVE`` coins each device draws its own (``privatize``, a block of devices at a
    time); above it the sum is drawn from its exact distribution (``exact_report_sum``).
    """
    values = check_values(values, domain_size)
    if exact_sum_wanted(values, domain_size):
        return exact_report_sum(values, domain_size, p_own=p_own, p_other=p_other, rng=rng)
    return sum_in_blocks(
        values,
        length=domain_size,
        coins_per_device=domain_size,
        block_sum=lambda block: privatize(block, domain_size, rng).sum(axis=0, dtype=np.int64),
    )
