"""Heavy hitters with Poplar1: what a device's string becomes, and the noise each aggregator adds per level.

A device's word (or n-gram) is its UTF-8 bytes, cut to ``bits // 8`` bytes and padded with zero
bytes, read most significant bit first: Poplar1's measurement (privacy.vdaf.poplar1). A prefix of
``8 k`` bits is a word's first k bytes, so the tree is walked a byte at a time and every level's
candidates read as text.

The release of one level is a histogram of the candidate prefixes: one device's string lies under
at most one of them. Under replacement (one device's string changed) two counts move by 1, so
each aggregator adds N_Z(0, sigma^2) to every count and its noise alone carries the guarantee: the
level's privacy loss distribution is the discrete Gaussian's with shift 1 composed twice (as
privacy.aggregator_noise argues for a histogram), and the L levels of a walk compose adaptively
(privacy.pld). ``level_sigma`` is the smallest sigma whose L levels compose within the collection's
(epsilon, delta): what every aggregator must add, whatever the other one does.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from privacy import pld
from privacy.ngrams import SchemaError
from privacy.vdaf.poplar1 import Poplar1

# The walk goes a byte a step: every level it releases ends on a byte, so its candidates are text.
BITS_PER_STEP = 8


def word_bits(word: str, bits: int) -> tuple[bool, ...]:
    """The word's Poplar1 measurement: its UTF-8 bytes (at most bits // 8, cut), zero-padded, MSB first."""
    if bits <= 0 or bits % 8:
        raise ValueError("bits must be a positive multiple of 8")
    data = word.encode()[: bits // 8].ljust(bits // 8, b"\0")
    value = int.from_bytes(data, "big")
    return tuple(bool(value >> (bits - 1 - i) & 1) for i in range(bits))


def prefix_text(prefix: tuple[bool, ...]) -> str:
    """A prefix's text: its whole bytes, up to the padding (an undecodable byte reads as U+FFFD)."""
    whole = len(prefix) - len(prefix) % 8
    value = 0
    for bit in prefix[:whole]:
        value = value << 1 | int(bit)
    return value.to_bytes(whole // 8, "big").split(b"\0")[0].decode(errors="replace")


def prefix_extend(prefix: tuple[bool, ...], byte: int) -> tuple[bool, ...]:
    """``prefix`` followed by the 8 bits of ``byte``."""
    return prefix + tuple(bool(byte >> (7 - i) & 1) for i in range(8))


def walk_epsilon(sigma: float, levels: int, delta: float) -> float:
    """Epsilon at ``delta`` of ``levels`` released levels, each aggregator adding N_Z(0, sigma^2) to each count."""
    return pld.composed_epsilon([(pld.discrete_gaussian(sigma, 1), 2 * levels)], delta)


@functools.lru_cache(maxsize=256)
def level_sigma(epsilon: float, delta: float, levels: int) -> float:
    """The smallest sigma (to a relative 1e-3, rounded up) whose ``levels`` compose within (epsilon, delta)."""
    if not (epsilon > 0 and 0 < delta < 1 and levels >= 1):
        raise ValueError("epsilon must be positive, delta in (0, 1) and levels at least 1")
    low, high = 0.25, 0.5
    while walk_epsilon(high, levels, delta) > epsilon:
        low, high = high, 2 * high
    while high / low > 1.001:
        middle = math.sqrt(low * high)
        low, high = (middle, high) if walk_epsilon(middle, levels, delta) > epsilon else (low, middle)
    return high


# ------------------------------------------------------------------ the walk: which prefixes to ask next

END = 0  # the padding byte: a prefix that ends in it is a whole word


@dataclass(frozen=True)
class WalkPlan:
    """How a walk chooses its questions: a byte a level, ``bits // 8`` levels at most.

    ``alphabet``: the bytes a word may hold, tried after every kept prefix (with END, which closes a
    word); ``z``: a prefix is kept when its noisy count is at least z standard deviations of the two
    aggregators' noise (sigma sqrt 2) and at least the minimum cohort; ``max_per_level``: the most
    prefixes kept at a level, the largest counts first.
    """

    bits: int
    alphabet: bytes
    z: float = 4.0
    max_per_level: int = 32

    def __post_init__(self) -> None:
        if self.bits <= 0 or self.bits % BITS_PER_STEP:
            raise ValueError("bits must be a positive multiple of 8")
        if not self.alphabet or END in self.alphabet:
            raise ValueError("the alphabet is the non-empty set of a word's bytes, without the end byte")
        if self.z <= 0 or self.max_per_level < 1:
            raise ValueError("z must be positive and max_per_level at least 1")

    @property
    def levels(self) -> int:
        return self.bits // BITS_PER_STEP

    def threshold(self, sigma: float, min_cohort: int) -> float:
        """The noisy count a prefix needs to be kept."""
        return max(float(min_cohort), self.z * sigma * math.sqrt(2.0))

    def first(self) -> list[tuple[bool, ...]]:
        """The first level's candidates: every first byte of a word (no word is empty)."""
        return sorted(prefix_extend((), byte) for byte in set(self.alphabet))

    def next(self, kept: list[tuple[bool, ...]]) -> list[tuple[bool, ...]]:
        """The next level's candidates: each kept prefix that is not a whole word, followed by each
        byte of the alphabet or by END."""
        bytes_next = sorted(set(self.alphabet) | {END})
        return sorted(prefix_extend(prefix, byte) for prefix in kept if not finished(prefix) for byte in bytes_next)

    def keep(self, counts: dict[tuple[bool, ...], int], threshold: float) -> list[tuple[bool, ...]]:
        """The prefixes kept from a level's noisy counts: at least ``threshold``, the largest
        ``max_per_level`` (ties broken by the prefix, so the choice is a function of the counts)."""
        above = [prefix for prefix, count in counts.items() if count >= threshold]
        above.sort(key=lambda prefix: (-counts[prefix], prefix))
        return sorted(above[: self.max_per_level])


def finished(prefix: tuple[bool, ...]) -> bool:
    """Whether a prefix of whole bytes ends in END: the word it spells is complete."""
    return len(prefix) >= BITS_PER_STEP and not any(prefix[-BITS_PER_STEP:])


# ------------------------------------------------------------------ a report, on the device and at the aggregators

VDAF = "poplar1"  # a collection's report kind (CollectionRules.vdaf) beside Prio3's
_CONTEXT = b"pfs-studio poplar1 report v1|"


def report_context(collection_key: str) -> bytes:
    """Poplar1's application context of a collection: a report is bound to its collection."""
    return _CONTEXT + collection_key.encode()


@functools.lru_cache(maxsize=32)
def share_sizes(bits: int) -> tuple[int, int, int]:
    """(leader input share, helper input share, public share) of a ``bits``-bit Poplar1 report, in bytes
    as encoded: each is of fixed size for its bits (measured on one report, to be the encoder's own)."""
    vdaf = Poplar1(bits)
    public, shares = vdaf.shard(b"", (False,) * bits, bytes(vdaf.NONCE_SIZE), bytes(vdaf.RAND_SIZE))
    leader, helper = (len(vdaf.encode_input_share(share)) for share in shares)
    return leader, helper, len(vdaf.encode_public_share(public))


# ------------------------------------------------------------------ the recipe's schema

POPLAR1_WORDS = "Poplar1Words"
MAX_BITS = 128  # 16 bytes, 16 levels: the longest word a walk spells
MAX_CANDIDATES = 4096  # the most prefixes one level asks (the aggregators' own cap, dap_poplar1.MAX_PREFIXES)
DEFAULT_ALPHABET = "abcdefghijklmnopqrstuvwxyz"


def _schema_error(key: str, message: str) -> SchemaError:
    return SchemaError(key, message)


@dataclass(frozen=True)
class Poplar1WordsType:
    """A recipe's Poplar1 question (``{"dataType": "Poplar1Words", ...}``, docs/formats.md): each
    device reports one of its typed words, by its own coins, as a ``bits``-bit string (word_bits) in one
    Poplar1 report; the aggregators then walk the prefix tree a byte a level (WalkPlan) over the
    ``alphabet``'s bytes, keeping at each level the prefixes whose noisy count clears ``z_score``
    standard deviations of both noises and the minimum cohort, the largest ``max_per_level``.

    ``size`` is the most counts one level releases: what a policy's bucket limit is held against.
    """

    bits: int = 64
    alphabet: str = DEFAULT_ALPHABET
    z_score: float = 4.0
    max_per_level: int = 32

    def __post_init__(self) -> None:
        if isinstance(self.bits, bool) or not isinstance(self.bits, int) or not 8 <= self.bits <= MAX_BITS:
            raise _schema_error("bits", f"bits must be a multiple of 8 from 8 to {MAX_BITS}")
        if self.bits % BITS_PER_STEP:
            raise _schema_error("bits", f"bits must be a multiple of 8 from 8 to {MAX_BITS}")
        if not isinstance(self.alphabet, str) or not self.alphabet or "\0" in self.alphabet:
            raise _schema_error("alphabet", "alphabet must be a non-empty string of the characters words hold")
        if isinstance(self.z_score, bool) or not isinstance(self.z_score, (int, float)) or not self.z_score > 0:
            raise _schema_error("zScore", "zScore must be a number greater than 0")
        if isinstance(self.max_per_level, bool) or not isinstance(self.max_per_level, int) or self.max_per_level < 1:
            raise _schema_error("maxPerLevel", "maxPerLevel must be a whole number, at least 1")
        if self.size > MAX_CANDIDATES:
            raise _schema_error(
                "maxPerLevel",
                f"maxPerLevel × (the alphabet's {len(self.alphabet_bytes)} bytes + 1) must be at most "
                f"{MAX_CANDIDATES:,}: the most prefixes a level may ask",
            )

    @property
    def alphabet_bytes(self) -> bytes:
        return bytes(sorted(set(self.alphabet.encode())))

    @property
    def levels(self) -> int:
        return self.bits // BITS_PER_STEP

    @property
    def size(self) -> int:
        return max(len(self.alphabet_bytes), self.max_per_level * (len(self.alphabet_bytes) + 1))

    @property
    def labels(self) -> list[str]:
        return []  # a walk's counts are named by their prefixes, level by level, not by buckets

    def plan(self) -> WalkPlan:
        return WalkPlan(
            bits=self.bits, alphabet=self.alphabet_bytes, z=float(self.z_score), max_per_level=self.max_per_level
        )

    def to_json(self) -> dict:
        return {
            "dataType": POPLAR1_WORDS,
            "bits": self.bits,
            "alphabet": self.alphabet,
            "zScore": self.z_score,
            "maxPerLevel": self.max_per_level,
        }

    @classmethod
    def from_json(cls, schema: dict) -> Poplar1WordsType:
        return cls(
            bits=schema.get("bits", 64),
            alphabet=schema.get("alphabet", DEFAULT_ALPHABET),
            z_score=schema.get("zScore", 4.0),
            max_per_level=schema.get("maxPerLevel", 32),
        )


def walk_levels(encoding: object) -> int:
    """The levels a recipe's encoding releases as a Poplar1 walk (its budget composes them); 0 when
    it is not a walk (one release)."""
    return encoding.levels if isinstance(encoding, Poplar1WordsType) else 0
