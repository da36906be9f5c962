"""The minimum cohort a device enforces (check 3), by the tightest amplification bound proven for its randomizer.

A device refuses a recipe unless m reports, each eps0-DP, are (epsilon, delta)-DP once summed. The
numerical bounds of privacy/shuffling.py give far smaller m than seed 000's closed form (1,670
against 19,485 for eps0 = 2, epsilon = 0.3, delta = 1e-6), but they are not proven for the same
randomizers:

- "clones-2020" (Feldman, McMillan, Talwar, "Hiding among the clones", FOCS 2021,
  arXiv:2012.12803, Section 3): every eps0-DP randomizer, because any R(x) is at least
  e^-eps0 (R(x0) + R(x1)) / 2, so each other report is a "clone" of x0's or x1's with probability e^-eps0.
- "stronger-2022" (FMT, "Stronger privacy amplification by shuffling", SODA 2023,
  arXiv:2208.04591, Theorems 3.1-3.2): the errata restricts them to a class of randomizers. The
  decomposition their bound counts (each other report a clone with probability 2 / (e^eps0 + 1),
  half of x0's and half of x1's; x0's and x1's own reports split e^eps0 : 1 between the two
  clone kinds) exists exactly when, for all inputs x, x0, x1 and every output y,

      R(x)(y) >= (R(x0)(y) + R(x1)(y)) / (e^eps0 + 1).                                      (*)

  For x in {x0, x1} that is eps0-DP itself, so a randomizer of two inputs always satisfies it.

Per mechanism, with eps0 the replacement-model epsilon0 the device charges (tests/unit/privacy/
test_enforced_cohort.py checks (*) or its failure by exact enumeration):

- binary_rr: two inputs, so (*) holds.
- kary_rr: R(x)(y) >= q = 1 / (e^eps0 + k - 1) and R(x0)(y) + R(x1)(y) <= (e^eps0 + 1) q, so (*) holds,
  with equality at y = x0.
- asymmetric_ohe and symmetric_rappor: every bit is sent with its own coin, and neighbours x0, x1
  change only bits x0 and x1, so the other bits of the sum are independent of those two and equal
  in law under both: the sum's hockey-stick divergence is that of bits (x0, x1) alone. That
  two-bit randomizer satisfies (*) (equality at y = (1, 1) for asymmetric OHE). Symmetric RAPPOR is
  eps0-DP in the deletion model; the devices charge it 2 eps0 in the replacement model (seed 000,
  Appendix C), and it is that 2 eps0 that this module takes and that (*) holds for.
- symmetric_rappor, tighter ("stronger-2022-per-coordinate", privacy/rappor_shuffling.py): its bits
  x0 and x1 are two independent sums of binary randomized responses at the DELETION epsilon0
  eps0 / 2, each dominated by FMT 2022's clone pair at eps0 / 2 (binary RR meets (*)); so the pair
  of them is dominated by the product of two such clone pairs, whose divergence is computed
  exactly (rounded up). The cohort is the smaller of that bound's and FMT 2022's at eps0, each
  proven. At eps0 = 4 (deletion 2), epsilon = 0.3, delta = 1e-6: 3,322 reports instead of 17,745.
- one_bit_mean (privacy/one_bit_mean.py, not a recipe mechanism): its report is binary randomized
  response applied to a Bernoulli(x/m) bit, so by joint convexity of the hockey-stick divergence
  (coupling the two inputs' bits) the sum is no less private than binary RR's.
- hadamard_response: (*) holds while the domain has at most 3 values (K <= 4): rows 1-3 of the
  4 x 4 Sylvester matrix share only column 0, which is in every set, so an output in the sets of
  two inputs is in the third one's too; the worst output is in x0's set alone, with
  R(x)(y) = (R(x0)(y) + R(x1)(y)) / (e^eps0 + 1) exactly (and with 2 values, x is x0 or x1). (*)
  fails once the domain has 4 values (K = 8): an output in the sets of x0 and x1 but not of x has
  ratio e^-eps0 / 2 < 1 / (e^eps0 + 1), and there is no independence to reduce it. So the 2022
  bound applies when the caller passes a ``domain_size`` of at most HADAMARD_STRONGER_DOMAIN, the
  2020 bound otherwise, and when the domain size is not given (fail closed: the looser bound).

The closed form (seed 000 Theorem 3.1, "due to [31]", FMT 2022) is never chosen. It rests on the
same stronger clone reduction (its validity condition is n 2 / (e^eps0 + 1) >= 16 log(2/delta)), so
the errata restricts it as much as the numerical 2022 bound; and it is never tighter than the bound
chosen (tested over the demo range), so where the numerical search finds no cohort of up to
MAX_COHORT reports, neither would it: UnreachableEpsilon is raised instead.
"""

from __future__ import annotations

import functools
import math
import numbers
from dataclasses import dataclass
from typing import Final, Literal

from privacy.hadamard_response import HadamardResponse
from privacy.mechanisms import AsymmetricOHE
from privacy.randomized_response import BinaryRandomizedResponse, KaryRandomizedResponse, SymmetricRappor
from privacy.rappor_shuffling import symmetric_rappor_min_cohort
from privacy.shuffling import Method, min_cohort

# A bound of privacy.shuffling (a curve in eps0 and n for any randomizer its proof covers), or
# symmetric RAPPOR's own (privacy.rappor_shuffling).
Bound = Method | Literal["stronger-2022-per-coordinate"]
RAPPOR_PER_COORDINATE: Final = "stronger-2022-per-coordinate"

# The 1-bit mean is not a recipe mechanism (privacy.mechanisms.MECHANISMS); this is its name here.
ONE_BIT_MEAN: Final = "one_bit_mean"

# Mechanism name -> (bound, why it applies) on a domain of any size, as the module docstring derives
# (bound_for: a smaller domain may allow a tighter one).
BOUNDS: Final[dict[str, tuple[Bound, str]]] = {
    BinaryRandomizedResponse.name: (
        "stronger-2022",
        "binary randomized response has two inputs, so FMT 2022's errata condition holds",
    ),
    KaryRandomizedResponse.name: (
        "stronger-2022",
        "k-ary randomized response meets FMT 2022's errata condition, with equality",
    ),
    AsymmetricOHE.name: (
        "stronger-2022",
        "independent bits: neighbours differ in two bits, whose randomizer meets FMT 2022's errata condition",
    ),
    SymmetricRappor.name: (
        RAPPOR_PER_COORDINATE,
        "independent bits: neighbours change two coordinates of the sum, each a sum of binary randomized "
        "responses at the deletion epsilon0 (half the replacement epsilon0) that FMT 2022 covers; the two "
        "composed exactly (never more than FMT 2022 at the replacement epsilon0)",
    ),
    ONE_BIT_MEAN: (
        "stronger-2022",
        "binary randomized response of a Bernoulli(x/m) bit: by joint convexity no less private than binary RR",
    ),
    HadamardResponse.name: (
        "clones-2020",
        "Hadamard response fails FMT 2022's errata condition on domains of 4 or more values (and the domain size "
        "was not given, or is one); FMT 2020 holds for every eps0-DP randomizer",
    ),
}


# How the interfaces name each bound (the editor's curve and its table).
BOUND_LABELS: Final[dict[Bound, str]] = {
    "stronger-2022": "FMT 2022 numerical bound",
    "clones-2020": "FMT 2020 numerical bound",
    RAPPOR_PER_COORDINATE: "FMT 2022 per coordinate, composed exactly",
}


# Hadamard response meets (*) on domains of at most this many values (module docstring).
HADAMARD_STRONGER_DOMAIN: Final = 3
_HADAMARD_SMALL_DOMAIN: Final[tuple[Bound, str]] = (
    "stronger-2022",
    f"Hadamard response on a domain of at most {HADAMARD_STRONGER_DOMAIN} values meets FMT 2022's errata "
    "condition, with equality",
)


def bound_for(mechanism: str, domain_size: int | None = None) -> tuple[Bound, str]:
    """(bound, why it applies) for ``mechanism`` on a domain of ``domain_size`` values (None: unknown).

    BOUNDS[mechanism], except Hadamard response on a domain of at most HADAMARD_STRONGER_DOMAIN values,
    which meets FMT 2022's condition (module docstring). ValueError for an unknown mechanism or a
    domain_size that is not an integer of at least 1.
    """
    try:
        bound = BOUNDS[mechanism]
    except (KeyError, TypeError):
        raise ValueError(f"mechanism must be one of {', '.join(sorted(BOUNDS))}, not {mechanism!r}") from None
    if domain_size is None:
        return bound
    if isinstance(domain_size, bool) or not isinstance(domain_size, numbers.Integral) or domain_size < 1:
        raise ValueError(f"domain_size must be an integer of at least 1 or None, not {domain_size!r}")
    if mechanism == HadamardResponse.name and domain_size <= HADAMARD_STRONGER_DOMAIN:
        return _HADAMARD_SMALL_DOMAIN
    return bound


# The privacy.shuffling curve the editor draws for a bound that has none of its own (symmetric
# RAPPOR's takes seconds per point at large n): FMT 2022 at the replacement epsilon0, above it.
CURVE_METHODS: Final[dict[Bound, Method]] = {
    "stronger-2022": "stronger-2022",
    "clones-2020": "clones-2020",
    RAPPOR_PER_COORDINATE: "stronger-2022",
}
CURVE_LABELS: Final[dict[Bound, str]] = {
    **BOUND_LABELS,
    RAPPOR_PER_COORDINATE: "FMT 2022 numerical bound at the replacement ε0, above the per-coordinate bound enforced",
}


@dataclass(frozen=True)
class EnforcedCohort:
    """The smallest cohort that makes eps0-DP reports (epsilon, delta)-DP, and the bound that proves it."""

    min_cohort: int
    method: Bound
    reason: str


def min_cohort_enforced(
    *, mechanism: str, epsilon0: float, epsilon: float, delta: float, domain_size: int | None = None
) -> EnforcedCohort:
    """Smallest m such that the sum of m ``mechanism`` reports, each eps0-DP, is (epsilon, delta)-DP.

    ``epsilon0`` is the replacement-model local epsilon the device charges: for symmetric RAPPOR,
    twice its deletion-model epsilon0 (privacy.mechanisms.replacement_epsilon0). The bound is the
    tightest proven for the mechanism (BOUNDS, module docstring): FMT 2022 numerically, or FMT 2020
    numerically, through privacy.shuffling.min_cohort, which rounds up: the bound's epsilon at m
    is at most ``epsilon`` and at m - 1 above it; for symmetric RAPPOR, FMT 2022 per coordinate
    (privacy.rappor_shuffling.symmetric_rappor_min_cohort, rounded up the same way).

    ``domain_size`` is the number of values the recipe encodes (privacy.encoding.Encoding.size), or
    None when the caller does not know it: then a bound proven for every domain size is used. Only
    Hadamard response depends on it today (FMT 2022 up to 3 values: bound_for). Devices and the
    server must pass the same value, or a device computes a larger cohort than the server claimed and
    refuses the task: pfs_device.budget.min_cohort_needed and analyses.services.recipes._client_min_cohort
    pass it together or not at all.

    Raises ValueError for an unknown mechanism; epsilon0 not in (0, 350] (above it e^(2 epsilon0)
    overflows a double); epsilon not positive and finite; delta not in [1e-300, 1) (smaller deltas
    lose precision as doubles); any of them NaN, infinite or not a real number; domain_size neither
    None nor an integer of at least 1. Raises
    UnreachableEpsilon (a ValueError) when no cohort of up to 10^12 reports is enough. Results are
    memoized by the exact arguments; an uncached call takes 4-27 ms over the demo range, a memoized one
    1.5 us (bench/results/min_cohort.md).
    """
    method, reason = bound_for(mechanism, domain_size)
    arguments = (_real("epsilon0", epsilon0), _real("epsilon", epsilon), _real("delta", delta))
    return EnforcedCohort(_min_cohort(*arguments, method), method, reason)


@functools.lru_cache(maxsize=1024)
def _min_cohort(epsilon0: float, epsilon: float, delta: float, method: Bound) -> int:
    """Memoized: devices check the same few recipes again and again. privacy.shuffling.min_cohort
    refuses the out-of-range values, and a refusal is not cached."""
    if method == RAPPOR_PER_COORDINATE:
        # epsilon0 is the replacement epsilon0 the device charges, twice symmetric RAPPOR's own.
        return symmetric_rappor_min_cohort(epsilon0 / 2.0, epsilon, delta)
    return min_cohort(epsilon0, epsilon, delta, method=method)


def _real(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite real number, not {value!r}")
    return float(value)
