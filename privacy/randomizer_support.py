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
# its exact distribution instead of every device's report. Below it, per-device reports are cheap:
# only their ones are drawn (``unary_ones``, about 1 + (k - 1) p_other variates a device), and a
# benchmarked fleet shard (25,000 devices x 1,024 buckets) stays on that path. Above it (e.g. 20,000
# buckets x 1,000,000 devices: 3.6e8 ones at p_other = 0.018), even the ones are too many, while the
# sum drawn from its exact distribution is the same distribution at O(n + k) cost: see
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


# A block of the sparse unary sampler draws about this many gaps (int64, 512 KiB): small enough for
# its arrays to stay in cache, large enough that numpy's per-call overhead is small against it.
GAPS_PER_BLOCK = 1 << 16
_UINT32_MAX = np.iinfo(np.uint32).max


def unary_ones(
    values: npt.NDArray[np.int64],
    domain_size: int,
    *,
    p_own: float,
    p_other: float,
    rng: np.random.Generator,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Where the ones of n unary-encoded reports are: (device row, bucket) of every 1, in O(ones + n).

    The report of a device in bucket v has bit v set with probability ``p_own`` and every other bit
    set with probability ``p_other``, each bit by its own coin. The k - 1 other bits of all n
    devices, laid end to end, are n (k - 1) independent Bernoulli(p_other) trials; the gaps between
    consecutive ones of a Bernoulli(p) process are independent Geometric(p) (support 1, 2, ...), so
    the ones sit at the partial sums of Geometric(p_other) draws, minus 1, below n (k - 1)
    (the geometric law as the waiting time between Bernoulli successes, Devroye, "Non-Uniform Random
    Variate Generation", 1986; Batagelj and Brandes, Phys. Rev. E 71, 036113, 2005, skip over the
    absent edges of a G(n, p) random graph the same way). This is
    the same joint distribution as drawing every bit: each device's report has its own coins (a
    stretch of the process that no other device shares), only the ones are drawn, about
    n (1 + (k - 1) p_other) variates instead of n k. numpy's geometric inverts an exponential
    variate below p = 1/3 (exact to double precision, like the comparison ``random() < p``).

    Position j of device i's k - 1 other bits is bucket j if j < v_i, else j + 1 (the own bucket
    skipped). The own bit comes last, one uniform per device, so the row order is (other ones in
    increasing order of position), then the own ones.
    """
    n, others = values.size, domain_size - 1
    trials = n * others
    positions = _bernoulli_process(trials, p_other, rng) if trials else np.zeros(0, dtype=np.int64)
    if trials <= _UINT32_MAX:  # a block's positions nearly always fit: 32-bit division is 6x faster
        rows, slot = np.divmod(positions.astype(np.uint32), np.uint32(max(others, 1)))
    else:
        rows, slot = np.divmod(positions, others)
    buckets = slot + (slot >= values[rows])
    own = np.flatnonzero(rng.random(n) < p_own)
    return (
        np.concatenate([rows.astype(np.int64), own]),
        np.concatenate([buckets.astype(np.int64), values[own]]),
    )


def _bernoulli_process(trials: int, p: float, rng: np.random.Generator) -> npt.NDArray[np.int64]:
    """The indices of the ones among ``trials`` independent Bernoulli(p) coins, in increasing order.

    Gaps are drawn in batches sized to cover the expected count with 6 standard deviations to spare,
    so a second batch is rare; the stopping rule (draw until the partial sums pass ``trials``) does
    not bias the ones kept, which are a function of the infinite i.i.d. gap sequence.
    """
    if p <= 0.0:
        return np.zeros(0, dtype=np.int64)
    chunks: list[npt.NDArray[np.int64]] = []
    last = -1  # index of the last one drawn so far
    while True:
        remaining = trials - 1 - last
        mean = remaining * p
        batch = int(mean + 6.0 * math.sqrt(mean) + 16)
        positions = np.cumsum(rng.geometric(p, size=batch))
        positions += last
        if positions[-1] >= trials:
            chunks.append(positions[: np.searchsorted(positions, trials)])
            return np.concatenate(chunks) if len(chunks) > 1 else chunks[0]
        chunks.append(positions)
        last = int(positions[-1])


def unary_devices_per_block(domain_size: int, p_other: float) -> int:
    """How many devices one block of the sparse unary sampler holds (about ``GAPS_PER_BLOCK`` draws)."""
    expected_draws = 1.0 + (domain_size - 1) * p_other
    return max(1, int(GAPS_PER_BLOCK / expected_draws))


def unary_reports(
    values: npt.NDArray[np.int64],
    domain_size: int,
    *,
    p_own: float,
    p_other: float,
    rng: np.random.Generator,
) -> npt.NDArray[np.uint8]:
    """n dense unary reports (n, domain_size) from ``unary_ones``, block by block as ``unary_report_sum``.

    Same blocks, same draws in the same order: for one seed, the rows sum to ``unary_report_sum``.
    """
    reports = np.zeros((values.size, domain_size), dtype=np.uint8)
    block = unary_devices_per_block(domain_size, p_other)
    for start in range(0, values.size, block):
        rows, buckets = unary_ones(values[start : start + block], domain_size, p_own=p_own, p_other=p_other, rng=rng)
        reports[rows + start, buckets] = 1
    return reports


def unary_report_sum(
    values: npt.NDArray[np.int64],
    domain_size: int,
    *,
    p_own: float,
    p_other: float,
    rng: np.random.Generator,
) -> npt.NDArray[np.int64]:
    """The sum of n unary reports, each device with its own coins, in O(ones + n) time and one block of memory."""
    total = np.zeros(domain_size, dtype=np.int64)
    block = unary_devices_per_block(domain_size, p_other)
    for start in range(0, values.size, block):
        _, buckets = unary_ones(values[start : start + block], domain_size, p_own=p_own, p_other=p_other, rng=rng)
        total += np.bincount(buckets, minlength=domain_size)
    return total


def one_hot_report_sum(
    values: npt.NDArray[np.int64],
    domain_size: int,
    rng: np.random.Generator,
    *,
    p_own: float,
    p_other: float,
) -> npt.NDArray[np.int64]:
    """``privatize_sum`` of a randomizer that sends every coordinate of a one-hot vector with its own coin.

    Up to ``EXACT_SUM_ABOVE`` coins each device draws its own (``unary_report_sum``: only its ones);
    above it the sum is drawn from its exact distribution (``exact_report_sum``).
    """
    values = check_values(values, domain_size)
    if exact_sum_wanted(values, domain_size):
        return exact_report_sum(values, domain_size, p_own=p_own, p_other=p_other, rng=rng)
    return unary_report_sum(values, domain_size, p_own=p_own, p_other=p_other, rng=rng)
