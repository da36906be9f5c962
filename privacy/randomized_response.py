"""Randomized-response histogram oracles: symmetric RAPPOR, binary and k-ary randomized response.

Each is a ``FrequencyOracle`` (privacy/mechanisms.py): one report per device, each device with its
own coins, reports summed in bounded memory, debiased on the server with an exact variance. The
formulas below are derived in the docstrings and proven by tests/stats/test_mechanism_estimators.py;
their privacy by exact enumeration in tests/unit/privacy/test_ldp_exact.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import numpy.typing as npt

from privacy.randomizer_support import (
    check_epsilon0,
    check_values,
    one_hot_report_sum,
    sum_in_blocks,
    unary_reports,
)


@dataclass(frozen=True)
class SymmetricRappor:
    """Symmetric private one-hot encoding (seed 000, Appendix C.1; seed 001, Section 4.3).

    Client: encode the value as a one-hot vector and flip every coordinate independently with
    probability p = 1/(e^eps0 + 1).

    Privacy, in the DELETION model: ``epsilon0`` here is a deletion-model epsilon. Against the
    reference distribution R (the all-zero vector with every bit flipped with probability p), the
    report of value d differs only in coordinate d, so every likelihood ratio is
    (1 - p)/p = e^eps0 or its inverse (Theorem C.1 of seed 000). Two values differ in two
    coordinates, so in the replacement model the same randomizer is only 2 eps0-LDP
    (``replacement_epsilon0``), and that bound is attained.

    Server: with S_d the number of the n reports with bit d set, E[S_d] = n p + (1 - 2p) f(d), so
        f~(d) = (S_d - n p)/(1 - 2p) = (e^eps0 + 1)/(e^eps0 - 1) S_d - n/(e^eps0 - 1)
    (Algorithm 4 of seed 000, the debias of seed 001). Every coordinate has variance p(1 - p)
    whatever its input bit, so
        Var[f~(d)] = n p(1 - p)/(1 - 2p)^2 = n e^eps0/(e^eps0 - 1)^2   (Theorem C.2 of seed 000),
    the same in every bucket and independent of f(d).
    """

    name: ClassVar[str] = "symmetric_rappor"
    privacy_model: ClassVar[str] = "deletion"
    epsilon0: float

    def __post_init__(self) -> None:
        check_epsilon0(self.epsilon0)

    @property
    def p_flip(self) -> float:
        """Probability that any one coordinate of the one-hot vector is flipped."""
        return 1.0 / (math.exp(self.epsilon0) + 1.0)

    @property
    def replacement_epsilon0(self) -> float:
        """The tight replacement-model epsilon of the same randomizer: 2 eps0."""
        return 2.0 * self.epsilon0

    def report_length(self, domain_size: int) -> int:
        return domain_size

    def privatize(
        self, values: npt.NDArray[np.int64], domain_size: int, rng: np.random.Generator
    ) -> npt.NDArray[np.uint8]:
        """One report per device: an (n, domain_size) array of bits.

        Only the ones are drawn (``unary_ones``): the own bit is 1 unless flipped (1 - p), every
        other bit is 1 if flipped (p).
        """
        values = check_values(values, domain_size)
        p = self.p_flip
        return unary_reports(values, domain_size, p_own=1.0 - p, p_other=p, rng=rng)

    def privatize_sum(
        self, values: npt.NDArray[np.int64], domain_size: int, rng: np.random.Generator
    ) -> npt.NDArray[np.int64]:
        """The sum of one report per device, in bounded memory.

        Up to ``EXACT_SUM_ABOVE`` coins (n x domain_size), each device draws its own coins. Above it
        the sum is drawn from its exact distribution, S_d = Binomial(c_d, 1 - p) + Binomial(n - c_d, p)
        independently across d (c_d devices in bucket d, p = ``p_flip``): every coordinate is flipped
        by its own coin, so this is the same distribution as the sum of n ``privatize`` reports, at
        O(n + k) cost.
        """
        p = self.p_flip
        return one_hot_report_sum(values, domain_size, rng, p_own=1.0 - p, p_other=p)

    def debias(self, report_sum: npt.NDArray[np.int64], n: int, domain_size: int) -> npt.NDArray[np.float64]:
        """f~(d) = (S_d - n p)/(1 - 2p)."""
        p = self.p_flip
        return (np.asarray(report_sum, dtype=np.float64) - n * p) / (1.0 - 2.0 * p)

    def variance(self, estimates: npt.NDArray[np.float64], n: int, domain_size: int) -> npt.NDArray[np.float64]:
        """Var[f~(d)] = n e^eps0/(e^eps0 - 1)^2 in every bucket."""
        e = math.exp(self.epsilon0)
        return np.full(domain_size, n * e / (e - 1.0) ** 2)


@dataclass(frozen=True)
class BinaryRandomizedResponse:
    """Warner's randomized response on a domain of two buckets (seed 004, first section).

    Client: report the bucket (0 or 1) as one bit, flipped with probability p = 1/(e^eps0 + 1).
    Replacement model: the two values give the bit the probabilities (1 - p, p) and (p, 1 - p), so
    the likelihood ratio is (1 - p)/p = e^eps0. The report vector has length 1 (the bit), so the
    aggregators sum S = the number of reports that say 1.

    Server: E[S] = n p + (1 - 2p) f(1), so
        f~(1) = (S - n p)/(1 - 2p),    f~(0) = n - f~(1),
    and, each bit having variance p(1 - p) whatever the value,
        Var[f~(0)] = Var[f~(1)] = n p(1 - p)/(1 - 2p)^2 = n e^eps0/(e^eps0 - 1)^2.
    (It is k-ary randomized response at k = 2 sent as one bit instead of a one-hot pair.)
    """

    name: ClassVar[str] = "binary_rr"
    privacy_model: ClassVar[str] = "replacement"
    epsilon0: float

    def __post_init__(self) -> None:
        check_epsilon0(self.epsilon0)

    @property
    def p_flip(self) -> float:
        """Probability that the reported bit differs from the device's bucket."""
        return 1.0 / (math.exp(self.epsilon0) + 1.0)

    def report_length(self, domain_size: int) -> int:
        _check_binary(domain_size)
        return 1

    def privatize(
        self, values: npt.NDArray[np.int64], domain_size: int, rng: np.random.Generator
    ) -> npt.NDArray[np.uint8]:
        """One report per device: an (n, 1) array holding the randomized bit."""
        _check_binary(domain_size)
        values = check_values(values, domain_size)
        flipped = rng.random(values.size) < self.p_flip
        return (values.astype(bool) ^ flipped).astype(np.uint8).reshape(-1, 1)

    def privatize_sum(
        self, values: npt.NDArray[np.int64], domain_size: int, rng: np.random.Generator
    ) -> npt.NDArray[np.int64]:
        """The number of reports saying 1, as a length-1 vector, in bounded memory."""
        _check_binary(domain_size)
        values = check_values(values, domain_size)
        return sum_in_blocks(
            values,
            length=1,
            coins_per_device=1,
            block_sum=lambda block: self.privatize(block, domain_size, rng).sum(axis=0, dtype=np.int64),
        )

    def debias(self, report_sum: npt.NDArray[np.int64], n: int, domain_size: int) -> npt.NDArray[np.float64]:
        """[n - f~(1), f~(1)] with f~(1) = (S - n p)/(1 - 2p)."""
        _check_binary(domain_size)
        ones_reported = np.asarray(report_sum, dtype=np.float64)
        if ones_reported.shape != (1,):
            raise ValueError("report_sum must have report_length(2) = 1 entry")
        p = self.p_flip
        ones = (ones_reported[0] - n * p) / (1.0 - 2.0 * p)
        return np.array([n - ones, ones])

    def variance(self, estimates: npt.NDArray[np.float64], n: int, domain_size: int) -> npt.NDArray[np.float64]:
        """Var[f~(0)] = Var[f~(1)] = n e^eps0/(e^eps0 - 1)^2."""
        _check_binary(domain_size)
        e = math.exp(self.epsilon0)
        return np.full(2, n * e / (e - 1.0) ** 2)


@dataclass(frozen=True)
class KaryRandomizedResponse:
    """k-ary randomized response, or direct encoding (Warner 1965; Wang et al. 2017, "DE").

    Client: keep the value with probability p = e^eps0/(e^eps0 + k - 1), otherwise report one of
    the k - 1 other values uniformly, each with probability q = 1/(e^eps0 + k - 1). The report is
    the one-hot vector of the reported value, so the sum of reports is the noisy histogram.
    Replacement model: every output has probability p or q under any value, ratio p/q = e^eps0.

    Server: with S_d the number of reports of value d, E[S_d] = n q + (p - q) f(d), so
        f~(d) = (S_d - n q)/(p - q),   p - q = (e^eps0 - 1)/(e^eps0 + k - 1).
    S_d is a sum of independent Bernoulli(p) (devices holding d) and Bernoulli(q) (the others):
        Var[f~(d)] = (f(d) p(1 - p) + (n - f(d)) q(1 - q))/(p - q)^2
                   = n (e^eps0 + k - 2)/(e^eps0 - 1)^2 + f(d) (k - 2)/(e^eps0 - 1).
    """

    name: ClassVar[str] = "kary_rr"
    privacy_model: ClassVar[str] = "replacement"
    epsilon0: float

    def __post_init__(self) -> None:
        check_epsilon0(self.epsilon0)

    def p_keep(self, domain_size: int) -> float:
        """Probability that the reported value is the device's own."""
        e = math.exp(self.epsilon0)
        return e / (e + domain_size - 1)

    def p_other(self, domain_size: int) -> float:
        """Probability of reporting one given value other than the device's own."""
        return 1.0 / (math.exp(self.epsilon0) + domain_size - 1)

    def report_length(self, domain_size: int) -> int:
        _check_at_least_two(domain_size)
        return domain_size

    def randomize(
        self, values: npt.NDArray[np.int64], domain_size: int, rng: np.random.Generator
    ) -> npt.NDArray[np.int64]:
        """The reported value of each device (the index of the 1 in its report)."""
        _check_at_least_two(domain_size)
        values = check_values(values, domain_size)
        keep = rng.random(values.size) < self.p_keep(domain_size)
        # A shift in 1..k-1 modulo k is uniform over the k - 1 other values.
        shift = rng.integers(1, domain_size, size=values.size)
        return np.where(keep, values, (values + shift) % domain_size)

    def privatize(
        self, values: npt.NDArray[np.int64], domain_size: int, rng: np.random.Generator
    ) -> npt.NDArray[np.uint8]:
        """One report per device: the (n, domain_size) one-hot of the reported value."""
        reported = self.randomize(values, domain_size, rng)
        reports = np.zeros((reported.size, domain_size), dtype=np.uint8)
        reports[np.arange(reported.size), reported] = 1
        return reports

    def privatize_sum(
        self, values: npt.NDArray[np.int64], domain_size: int, rng: np.random.Generator
    ) -> npt.NDArray[np.int64]:
        """The histogram of reported values (the sum of the one-hot reports), in bounded memory."""
        values = check_values(values, domain_size)
        return sum_in_blocks(
            values,
            length=domain_size,
            coins_per_device=2,
            block_sum=lambda block: np.bincount(self.randomize(block, domain_size, rng), minlength=domain_size),
        )

    def debias(self, report_sum: npt.NDArray[np.int64], n: int, domain_size: int) -> npt.NDArray[np.float64]:
        """f~(d) = (S_d - n q)/(p - q)."""
        p, q = self.p_keep(domain_size), self.p_other(domain_size)
        return (np.asarray(report_sum, dtype=np.float64) - n * q) / (p - q)

    def variance(self, estimates: npt.NDArray[np.float64], n: int, domain_size: int) -> npt.NDArray[np.float64]:
        """n (e^eps0 + k - 2)/(e^eps0 - 1)^2 + f(d)(k - 2)/(e^eps0 - 1), f(d) from f~(d) clipped to [0, n]."""
        e = math.exp(self.epsilon0)
        k = domain_size
        true_count = np.clip(np.asarray(estimates, dtype=np.float64), 0.0, float(n))
        return n * (e + k - 2) / (e - 1.0) ** 2 + true_count * (k - 2) / (e - 1.0)


def _check_binary(domain_size: int) -> None:
    if domain_size != 2:
        raise ValueError("binary randomized response needs a domain of exactly 2 buckets")


def _check_at_least_two(domain_size: int) -> None:
    if domain_size < 2:
        raise ValueError("k-ary randomized response needs a domain of at least 2 buckets")
