"""Hadamard response: a frequency oracle whose device work and message do not grow with the domain.

Acharya, Sun and Zhang, "Hadamard Response: Estimating Distributions Privately, Efficiently, and
with Little Communication" (AISTATS 2019), in its one-set-per-value form.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import numpy.typing as npt

from privacy.randomizer_support import check_epsilon0, check_values, sum_in_blocks


@dataclass(frozen=True)
class HadamardResponse:
    """Hadamard response over the K x K Sylvester matrix H[i, j] = (-1)^popcount(i & j).

    K is the smallest power of two above the domain size k, and value d uses row d + 1 (row 0 is
    all ones and would carry no information). Row r's set C_r = {j : H[r, j] = +1} holds K/2 of
    the K columns, and any other row splits it in half.

    Client: with probability e^eps0/(e^eps0 + 1) report a column y drawn uniformly from C_{d+1},
    otherwise one drawn uniformly from its complement; so P(y | d) = (2/K) e^eps0/(e^eps0 + 1) or
    (2/K)/(e^eps0 + 1). Replacement model: every ratio is at most e^eps0. A device draws two coins
    and sends log2(K) bits in the clear; for secret-shared summation its report is the one-hot of
    y, of length K (at most 2k), and S_y counts the reports of column y.

    Server: with c = (e^eps0 + 1)/(e^eps0 - 1), E[H[r, y] | d] = (1/c) [r = d + 1] for r != 0,
    because distinct Hadamard rows are orthogonal. So
        f~(d) = c sum_y H[d + 1, y] S_y,
    computed for all d at once by one fast Walsh-Hadamard transform, is unbiased. It is c times a
    sum of n independent signs V_i = H[d + 1, y_i] with E[V_i] = [d_i = d]/c and V_i^2 = 1:
        Var[f~(d)] = c^2 (n - f(d)/c^2) = n (e^eps0 + 1)^2/(e^eps0 - 1)^2 - f(d).
    """

    name: ClassVar[str] = "hadamard_response"
    privacy_model: ClassVar[str] = "replacement"
    epsilon0: float

    def __post_init__(self) -> None:
        check_epsilon0(self.epsilon0)

    @property
    def p_inside(self) -> float:
        """Probability that the reported column lies in the set of the device's value."""
        e = math.exp(self.epsilon0)
        return e / (e + 1.0)

    @property
    def scale(self) -> float:
        """c = (e^eps0 + 1)/(e^eps0 - 1)."""
        e = math.exp(self.epsilon0)
        return (e + 1.0) / (e - 1.0)

    def report_length(self, domain_size: int) -> int:
        """K, the smallest power of two strictly above the domain size."""
        if domain_size < 1:
            raise ValueError("domain_size must be at least 1")
        return 1 << domain_size.bit_length()

    def randomize(
        self, values: npt.NDArray[np.int64], domain_size: int, rng: np.random.Generator
    ) -> npt.NDArray[np.int64]:
        """The column each device reports (the index of the 1 in its report)."""
        values = check_values(values, domain_size)
        order = self.report_length(domain_size)
        rows = values + 1
        column = rng.integers(0, order, size=values.size)
        inside = np.bitwise_count(rows & column) % 2 == 0
        wanted_inside = rng.random(values.size) < self.p_inside
        # Toggling one bit of the row in the column flips H[row, column]: a bijection between the
        # set and its complement, so the column stays uniform on whichever side was wanted.
        lowest_row_bit = rows & -rows
        return np.where(inside == wanted_inside, column, column ^ lowest_row_bit)

    def privatize(
        self, values: npt.NDArray[np.int64], domain_size: int, rng: np.random.Generator
    ) -> npt.NDArray[np.uint8]:
        """One report per device: the (n, K) one-hot of the reported column."""
        column = self.randomize(values, domain_size, rng)
        reports = np.zeros((column.size, self.report_length(domain_size)), dtype=np.uint8)
        reports[np.arange(column.size), column] = 1
        return reports

    def privatize_sum(
        self, values: npt.NDArray[np.int64], domain_size: int, rng: np.random.Generator
    ) -> npt.NDArray[np.int64]:
        """The count of reports of each column (the sum of the one-hot reports), in bounded memory."""
        values = check_values(values, domain_size)
        order = self.report_length(domain_size)
        return sum_in_blocks(
            values,
            length=order,
            coins_per_device=2,
            block_sum=lambda block: np.bincount(self.randomize(block, domain_size, rng), minlength=order),
        )

    def debias(self, report_sum: npt.NDArray[np.int64], n: int, domain_size: int) -> npt.NDArray[np.float64]:
        """f~(d) = c (H S)[d + 1]."""
        counts = np.asarray(report_sum, dtype=np.float64)
        if counts.shape != (self.report_length(domain_size),):
            raise ValueError("report_sum must have report_length(domain_size) entries")
        return self.scale * walsh_hadamard(counts)[1 : domain_size + 1]

    def variance(self, estimates: npt.NDArray[np.float64], n: int, domain_size: int) -> npt.NDArray[np.float64]:
        """Var[f~(d)] = n c^2 - f(d), with f(d) estimated by f~(d) clipped to [0, n]."""
        true_count = np.clip(np.asarray(estimates, dtype=np.float64), 0.0, float(n))
        return n * self.scale**2 - true_count


def walsh_hadamard(vector: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """H v for the Sylvester matrix H[i, j] = (-1)^popcount(i & j), in O(K log K) (K a power of 2)."""
    result = np.array(vector, dtype=np.float64)
    size = result.size
    if size & (size - 1) or size == 0:
        raise ValueError("the length must be a power of two")
    half = 1
    while half < size:
        pairs = result.reshape(-1, 2, half)
        result = np.concatenate([pairs[:, 0] + pairs[:, 1], pairs[:, 0] - pairs[:, 1]], axis=1).reshape(-1)
        half *= 2
    return result
