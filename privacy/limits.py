"""The one table of limits on what a recipe may ask, and why each limit is where it is.

Every number an analyst (or an attacker) can type has a range here. A value outside it is
refused before anything is built, stored, sent or spent, with a message that states the limit.
The structural limits (boundaries, tokens, sketch shape, buckets) are checked while a schema is
parsed (privacy.encoding), so a huge schema is refused before it allocates anything; privacy
officers can tighten the bucket limit per analysis (its policy's ``budget.maxBuckets``).
docs/formats.md prints this table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final


@dataclass(frozen=True)
class Limit:
    low: float
    high: float
    why: str

    def refusal(self, value: float) -> str | None:
        """None when ``low <= value <= high``; otherwise the sentence that says the limit."""
        if self.low <= value <= self.high:
            return None
        return f"Must lie between {self.low:g} and {self.high:g} ({self.why})."


# Numbers of a recipe's privacy object, by key.
NUMBERS: Final[dict[str, Limit]] = {
    "epsilon0": Limit(0.01, 20.0, "below, the randomizer's output is noise alone; above, it barely randomizes"),
    "epsilon": Limit(0.001, 20.0, "the aggregate guarantee; beyond 20 it promises nothing"),
    "delta": Limit(1e-15, 0.1, "a failure probability; below 1e-15 the bounds lose floating-point precision"),
    "samplingRate": Limit(1e-6, 1.0, "a probability; below one in a million no fleet answers"),
    "minCohort": Limit(1, 1_000_000_000, "no batch is larger than a billion reports"),
}

# Structure of a recipe's schema.
MAX_BOUNDARY_MAGNITUDE: Final = 1e12  # |boundary|: beyond, float64 spacing exceeds 1e-4
MAX_TOKENS: Final = 10_000  # a PrefixTree's or HashedNgrams' vocabulary
MAX_LEAVES: Final = 10_000  # a PrefixTree's leaves
MAX_SKETCH_ROWS: Final = 64  # HashedNgrams rows (hash functions)
MAX_SKETCH_COLUMNS: Final = 65_536  # HashedNgrams columns
# Buckets of any encoding, joint histograms included. A release holds two floats per bucket and
# cohort: 131,072 buckets is about 5 MB of JSON per cohort, what a page can still read.
MAX_BUCKETS: Final = 131_072
MAX_BOUNDARIES: Final = MAX_BUCKETS - 1  # a BucketedType's: k boundaries give k + 1 buckets
