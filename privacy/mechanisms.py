"""Local randomizers: each carries its privacy cost, its sampler and its estimator together.

The device calls ``privatize`` (one report per device, each with its own coins); the server calls
``debias`` on the sum of reports and ``variance`` for the error bars. Every estimator here is
proven unbiased, and its variance right, by a seeded test in tests/stats, not by its docstring,
and its local privacy by exact enumeration in tests/unit/privacy.

This module holds the protocol, asymmetric OHE and the registry; the other histogram oracles live
in privacy/randomized_response.py (symmetric RAPPOR, binary and k-ary randomized response) and
privacy/hadamard_response.py. The 1-bit mean (privacy/one_bit_mean.py) is not a histogram oracle.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Protocol

import numpy as np
import numpy.typing as npt

from privacy.hadamard_response import HadamardResponse
from privacy.randomized_response import BinaryRandomizedResponse, KaryRandomizedResponse, SymmetricRappor
from privacy.randomizer_support import (
    check_epsilon0,
    check_values,
    one_hot_report_sum,
    unary_reports,
)


class FrequencyOracle(Protocol):
    """A local randomizer for histograms over a domain of ``domain_size`` buckets."""

    name: ClassVar[str]
    # "replacement" or "deletion" local DP. A deletion-model epsilon0 is worth up to 2 epsilon0 in
    # the replacement model that Theorem 3.1 of seed 000 (privacy/amplification.py) expects.
    privacy_model: ClassVar[str]
    epsilon0: float

    def report_length(self, domain_size: int) -> int:
        """Length of one report vector; the aggregators sum vectors of this length."""
        ...

    def privatize(
        self, values: npt.NDArray[np.int64], domain_size: int, rng: np.random.Generator
    ) -> npt.NDArray[np.uint8]:
        """One report per device (n, report_length), each device with its own coins."""
        ...

    def privatize_sum(
        self, values: npt.NDArray[np.int64], domain_size: int, rng: np.random.Generator
    ) -> npt.NDArray[np.int64]:
        """Sum of the reports of ``privatize``, computed in bounded memory."""
        ...

    def debias(self, report_sum: npt.NDArray[np.int64], n: int, domain_size: int) -> npt.NDArray[np.float64]:
        """Unbiased per-bucket counts from the sum of n reports."""
        ...

    def variance(self, estimates: npt.NDArray[np.float64], n: int, domain_size: int) -> npt.NDArray[np.float64]:
        """Variance of each debiased count (true counts estimated by ``estimates``)."""
        ...


@dataclass(frozen=True)
class AsymmetricOHE:
    """Asymmetric private one-hot encoding (seed 000, Appendix A; RAPPOR's unary encoding).

    Client: encode the value as a one-hot vector, then send each coordinate as
    Bernoulli(1/2) if it is the device's bucket and Bernoulli(p0) otherwise, p0 = 1/(e^eps0 + 1).
    It is eps0-DP in the replacement model: changing the value changes two coordinates, whose
    likelihood ratio is at most ((1/2)/p0) * ((1 - p0)/(1/2)) = (1 - p0)/p0 = e^eps0.

    Server: with S_d the number of reports with bit d set among n reports,
    E[S_d] = n p0 + (1/2 - p0) f(d), so the unbiased estimate is
        f~(d) = (S_d - n p0) / (1/2 - p0) = 2(e^eps0 + 1)/(e^eps0 - 1) S_d - 2n/(e^eps0 - 1).
    (Algorithm 2 of seed 000 prints the offset as n/(e^eps0 - 1): a factor of 2 is missing.)
    Var[f~(d)] = 4 e^eps0 / (e^eps0 - 1)^2 * (n - f(d)) + (e^eps0 + 1)^2/(e^eps0 - 1)^2 * f(d)
               = n 4 e^eps0/(e^eps0 - 1)^2 + f(d)       (Theorem A.2 of seed 000).
    """

    name: ClassVar[str] = "asymmetric_ohe"
    privacy_model: ClassVar[str] = "replacement"
    epsilon0: float

    def __post_init__(self) -> None:
        check_epsilon0(self.epsilon0)

    @property
    def p_other(self) -> float:
        """Probability that a coordinate other than the device's bucket is reported as 1."""
        return 1.0 / (math.exp(self.epsilon0) + 1.0)

    p_own: ClassVar[float] = 0.5

    def report_length(self, domain_size: int) -> int:
        return domain_size

    def privatize(
        self, values: npt.NDArray[np.int64], domain_size: int, rng: np.random.Generator
    ) -> npt.NDArray[np.uint8]:
        """One report per device: an (n, domain_size) array of bits.

        Only the ones are drawn (``unary_ones``: about 1 + (k - 1) p0 variates a device, not k).
        """
        values = check_values(values, domain_size)
        return unary_reports(values, domain_size, p_own=self.p_own, p_other=self.p_other, rng=rng)

    def privatize_sum(
        self, values: npt.NDArray[np.int64], domain_size: int, rng: np.random.Generator
    ) -> npt.NDArray[np.int64]:
        """The sum of one report per device, in bounded memory.

        Up to ``EXACT_SUM_ABOVE`` coins (n x domain_size), each device draws its own coins (only its
        ones, as ``privatize``, and the same draws: the sum of ``privatize``'s rows). Above it
        the sum is drawn from its exact distribution, S_d = Binomial(c_d, 1/2) + Binomial(n - c_d, p0)
        independently across d (c_d devices in bucket d): every coordinate has its own coin, so this
        is the same distribution as the sum of n ``privatize`` reports, at O(n + k) cost.
        """
        return one_hot_report_sum(values, domain_size, rng, p_own=self.p_own, p_other=self.p_other)

    def debias(self, report_sum: npt.NDArray[np.int64], n: int, domain_size: int) -> npt.NDArray[np.float64]:
        """Unbiased counts f~(d) from the per-bucket sums of n reports."""
        p = self.p_other
        return (np.asarray(report_sum, dtype=np.float64) - n * p) / (self.p_own - p)

    def variance(self, estimates: npt.NDArray[np.float64], n: int, domain_size: int) -> npt.NDArray[np.float64]:
        """Var[f~(d)] = n 4e^eps0/(e^eps0 - 1)^2 + f(d), with f(d) estimated by f~(d) clipped to [0, n]."""
        e = math.exp(self.epsilon0)
        true_count = np.clip(np.asarray(estimates, dtype=np.float64), 0.0, float(n))
        return n * 4.0 * e / (e - 1.0) ** 2 + true_count


# The histogram mechanisms a recipe may name under "privacy.mechanism". The 1-bit mean of
# privacy/one_bit_mean.py estimates a mean, not a histogram, and is not one of them.
MECHANISMS: dict[str, type[FrequencyOracle]] = {
    cls.name: cls
    for cls in (
        AsymmetricOHE,
        SymmetricRappor,
        BinaryRandomizedResponse,
        KaryRandomizedResponse,
        HadamardResponse,
    )
}


def mechanism_get(name: str, epsilon0: float) -> FrequencyOracle:
    """The mechanism called ``name`` at local privacy epsilon0; KeyError names the unknown one."""
    try:
        cls = MECHANISMS[name]
    except KeyError:
        raise KeyError(f"unknown mechanism {name!r}; known: {', '.join(sorted(MECHANISMS))}") from None
    return cls(epsilon0=epsilon0)


def replacement_epsilon0(oracle: FrequencyOracle) -> float:
    """The oracle's local epsilon in the replacement model, the unit of every bound and cap here.

    Theorem 3.1 of seed 000 and the per-field local caps are stated for replacement-model
    randomizers; an eps0-DP deletion-model randomizer is at most 2 eps0-DP in the replacement
    model (seed 000, Appendix C), so it is charged 2 eps0 (fail closed).
    """
    if oracle.privacy_model == "replacement":
        return oracle.epsilon0
    if oracle.privacy_model == "deletion":
        return 2.0 * oracle.epsilon0
    raise ValueError(f"unknown privacy model {oracle.privacy_model!r}")


def report_weight_bound(oracle: FrequencyOracle, domain_size: int, false_rejection: float) -> int:
    """Most ones an honest report may carry, failing an honest device with probability <= false_rejection.

    Seed 001, Section 6.1.1: a randomized one-hot report holds at most its own bit plus
    C ~ Binomial(d - 1, p0) other ones, p0 the probability a 0 is reported as 1. The bound m is the
    smallest with P(1 + C > m) = P(C >= m) <= false_rejection (counting the own bit as always set
    only makes m larger). k-ary RR, Hadamard response and binary RR reports hold exactly one 1 or
    at most one, so their bound is 1. The binomial tail comes from scipy's regularized incomplete
    beta (accurate far into the tail), and m is found by bisection.
    """
    if not 0 < false_rejection < 1:
        raise ValueError("false_rejection must lie in (0, 1)")
    p_zero_to_one = {AsymmetricOHE: "p_other", SymmetricRappor: "p_flip"}.get(type(oracle))
    if p_zero_to_one is None:
        return 1
    from scipy.stats import binom  # scipy is slow to import; only aggregators need it

    others, p0 = oracle.report_length(domain_size) - 1, getattr(oracle, p_zero_to_one)
    low, high = 0, others  # P(C >= others + 1) = 0, so m = others + 1 always passes
    while low < high:  # smallest c in [0, others] with P(C > c) <= false_rejection
        middle = (low + high) // 2
        if binom.sf(middle, others, p0) <= false_rejection:
            high = middle
        else:
            low = middle + 1
    return low + 1
