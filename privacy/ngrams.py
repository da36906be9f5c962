"""N-gram encodings for interactive discovery (seed 000, Section 1 and Appendix B), pure numpy.

A device holds *sequences* of symbols: the phrases it typed, as words, or the words it typed, as
characters. Symbols are indices into the recipe's ``tokens``; a word the recipe does not list is
``OOV_SYMBOL`` and the end of a sequence is ``END_SYMBOL``. An r-gram is a window of r symbols of a
sequence followed by its end marker, so "hello world" holds the 3-gram ("hello", "world", END):
the end token tells whether a prefix is itself a whole phrase (Appendix B).

``PrefixTreeType`` is the interactive query of round r: the tree of frequent (r-1)-grams, and one
bucket per leaf times (END, OOV, every token), plus one global OOV bucket: 1 + L (V + 2) buckets
for L leaves and V tokens (Appendix B counts 1 + 3 (1 + 1 + 9) for Figure 4). Round 1 has no
prefix yet: its buckets are OOV and the V tokens. A device picks one of its r-grams whose prefix
is a leaf, uniformly, else reports the global OOV.

``HashedNgramType`` is the static baseline: every r-gram, hashed into a count-mean sketch of
``rows`` x ``columns`` cells (a device picks one of its r-grams and one row uniformly; Apple's
count-mean sketch, seed 004), decoded by scoring every candidate r-gram over the vocabulary.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from privacy import limits

OOV_SYMBOL = -1  # a word (or character) the recipe's tokens do not list
END_SYMBOL = -2  # the end of a phrase (or word)
OOV_LABEL = "OOV"
END_LABEL = "</s>"
UNITS = ("word", "character")

IntArray = npt.NDArray[np.int64]


class SchemaError(ValueError):
    """A recipe schema that cannot be encoded; ``key`` names the schema's key at fault."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


def _tokens_of(schema: dict) -> list[str]:
    """A schema's vocabulary: a list of strings, at most privacy.limits.MAX_TOKENS of them."""
    tokens = schema.get("tokens")
    if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
        raise SchemaError("tokens", "tokens must be a list of strings")
    if len(tokens) > limits.MAX_TOKENS:
        raise SchemaError("tokens", f"at most {limits.MAX_TOKENS:,} tokens")
    return tokens


# ---------------------------------------------------------------- sequences and windows


@dataclass(frozen=True)
class Sequences:
    """Each device's sequences of symbols, as CSR offsets of CSR offsets.

    Device i holds sequences ``device_start[i]:device_start[i + 1]``; sequence j is
    ``symbols[sequence_start[j]:sequence_start[j + 1]]``.
    """

    device_start: IntArray  # (devices + 1)
    sequence_start: IntArray  # (sequences + 1)
    symbols: IntArray

    @property
    def devices(self) -> int:
        return self.device_start.size - 1


@dataclass(frozen=True)
class Windows:
    """Every r-gram of every device: the device it belongs to, in device order, and its r symbols."""

    device: IntArray  # (windows,)
    symbols: IntArray  # (windows, r); only the last column can be END_SYMBOL


def windows(sequences: Sequences, length: int, *, anchored: bool = False) -> Windows:
    """The r-grams (r = ``length``) of every sequence with its end marker appended.

    A sequence of l symbols padded to l + 1 has windows starting at 0 .. l + 1 - r; a window of the
    end marker alone (r = 1, start l) is not an r-gram. ``anchored``: only the window at the start
    (word prefixes, for discovering new words from characters, as TrieHH does). Vectorised: no loop
    over devices or sequences.
    """
    if length < 1:
        raise ValueError("an n-gram has length >= 1")
    seq_length = np.diff(sequences.sequence_start)
    if anchored:
        count = (seq_length + 1 >= length).astype(np.int64) if length > 1 else (seq_length >= 1).astype(np.int64)
    else:
        count = np.maximum(seq_length + 2 - length, 0) if length > 1 else seq_length
    total = int(count.sum())
    sequence_of_window = np.repeat(np.arange(seq_length.size), count)
    first_window = np.concatenate([[0], np.cumsum(count)[:-1]])
    start_in_sequence = np.arange(total) - np.repeat(first_window, count)
    position = start_in_sequence[:, None] + np.arange(length)[None, :]  # offset inside the padded sequence
    absolute = sequences.sequence_start[sequence_of_window][:, None] + position
    is_end = position >= seq_length[sequence_of_window][:, None]
    window_symbols = np.where(
        is_end, END_SYMBOL, sequences.symbols[np.minimum(absolute, max(sequences.symbols.size - 1, 0))]
    )
    sequences_per_device = np.diff(sequences.device_start)
    device_of_sequence = np.repeat(np.arange(sequences.devices), sequences_per_device)
    return Windows(device=device_of_sequence[sequence_of_window], symbols=window_symbols.astype(np.int64))


def choose_per_device(
    devices: int, window_device: IntArray, eligible: npt.NDArray[np.bool_], bucket: IntArray, rng: np.random.Generator
) -> IntArray:
    """Each device's bucket: one of its eligible windows, uniformly; 0 (OOV) when it has none.

    The device's own coins pick the window: an eligible window scores 1 + U(0, 1), another U(0, 1),
    and the highest score of the device wins, which is uniform among the eligible ones.
    """
    chosen = np.zeros(devices, dtype=np.int64)
    if window_device.size == 0:
        return chosen
    score = rng.random(window_device.size) + eligible
    best = np.full(devices, -1.0)
    np.maximum.at(best, window_device, score)
    winner = (score == best[window_device]) & eligible
    chosen[window_device[winner]] = bucket[winner]
    return chosen


def expected_counts(
    devices: int, window_device: IntArray, eligible: npt.NDArray[np.bool_], bucket: IntArray, size: int
) -> npt.NDArray[np.float64]:
    """The expected number of devices reporting each bucket under ``choose_per_device`` (its estimand).

    A device with e eligible windows puts 1/e on each one's bucket; a device with none, 1 on OOV.
    """
    per_device = np.bincount(window_device, weights=eligible, minlength=devices)
    weights = np.where(eligible, 1.0 / np.maximum(per_device[window_device], 1.0), 0.0)
    counts = np.bincount(bucket[eligible], weights=weights[eligible], minlength=size).astype(np.float64)
    counts[0] += float(np.count_nonzero(per_device == 0))
    return counts


# ---------------------------------------------------------------- the prefix tree of round r


def _join(unit: str, symbols: tuple[str, ...]) -> str:
    return ("" if unit == "character" else " ").join(symbols)


@dataclass(frozen=True)
class PrefixTreeType:
    """Round r of n-gram discovery: leaves are the frequent (r-1)-grams; see the module docstring.

    ``complete`` are prefixes known to end a phrase (the tree's "null" children); they are carried in
    the tree for the analyst and not extended.
    """

    tokens: tuple[str, ...]
    leaves: tuple[tuple[str, ...], ...] = ((),)
    complete: tuple[tuple[str, ...], ...] = ()
    unit: str = "word"

    def __post_init__(self) -> None:
        if self.unit not in UNITS:
            raise SchemaError("unit", f"unit must be one of {', '.join(UNITS)}")
        if not self.tokens:
            raise SchemaError("tokens", "tokens must hold at least one token")
        if len(set(self.tokens)) != len(self.tokens):
            raise SchemaError("tokens", "tokens must not repeat")
        if any(not isinstance(t, str) or not t or t in (OOV_LABEL, END_LABEL, "null") for t in self.tokens):
            raise SchemaError(
                "tokens", f"tokens must be non-empty strings other than {OOV_LABEL}, {END_LABEL} and null"
            )
        if self.unit == "character" and any(len(t) != 1 for t in self.tokens):
            raise SchemaError("tokens", "with unit 'character' every token is one character")
        if not self.leaves:
            raise SchemaError("tree", "the tree has no leaf to extend")
        depths = {len(leaf) for leaf in self.leaves}
        if len(depths) != 1:
            raise SchemaError("tree", "every leaf of the tree must have the same length")
        if len(set(self.leaves)) != len(self.leaves):
            raise SchemaError("tree", "a leaf appears twice")
        known = set(self.tokens)
        unknown = sorted({t for leaf in (*self.leaves, *self.complete) for t in leaf} - known)
        if unknown:
            raise SchemaError("tokens", f"the tree uses tokens not in tokens: {', '.join(unknown[:5])}")

    @property
    def length(self) -> int:
        """r: the length of the n-grams this round asks for."""
        return len(self.leaves[0]) + 1

    @property
    def size(self) -> int:
        vocabulary = len(self.tokens)
        return 1 + vocabulary if self.length == 1 else 1 + len(self.leaves) * (vocabulary + 2)

    @property
    def labels(self) -> list[str]:
        if self.length == 1:
            return [OOV_LABEL, *self.tokens]
        extensions = (END_LABEL, OOV_LABEL, *self.tokens)
        return [OOV_LABEL] + [_join(self.unit, (*leaf, ext)) for leaf in self.leaves for ext in extensions]

    def bucket_ngram(self, bucket: int) -> tuple[tuple[str, ...], str] | None:
        """(prefix, extension) of a bucket, extension a token, END_LABEL or OOV_LABEL; None for OOV."""
        if bucket == 0:
            return None
        if self.length == 1:
            return (), self.tokens[bucket - 1]
        leaf, ext = divmod(bucket - 1, len(self.tokens) + 2)
        return self.leaves[leaf], (END_LABEL, OOV_LABEL, *self.tokens)[ext]

    # -- Figure 4's JSON: {"root": [...], "hello": ["null", "world"], "hello world": [...]} --

    @classmethod
    def from_json(cls, schema: dict) -> PrefixTreeType:
        """Figure 4's PrefixTree; a node's key is its path joined by spaces (no separator for characters)."""
        unit = schema.get("unit", "word")
        tokens = _tokens_of(schema)
        tree = schema.get("tree", {"root": []})
        if not isinstance(tree, dict) or "root" not in tree:
            raise SchemaError("tree", 'tree must be an object with a "root" node')
        if len(tree) > limits.MAX_LEAVES + 1:
            raise SchemaError("tree", f"the tree must have at most {limits.MAX_LEAVES:,} nodes")
        if unit not in UNITS:
            raise SchemaError("unit", f"unit must be one of {', '.join(UNITS)}")
        leaves, complete, seen = [], [], {"root"}
        frontier: list[tuple[str, ...]] = [()]
        while frontier:
            path = frontier.pop(0)
            key = "root" if not path else _join(unit, path)
            children = tree.get(key, [])
            if not isinstance(children, list) or not all(isinstance(c, str) for c in children):
                raise SchemaError("tree", f"node {key!r} must list its children as strings")
            if len(set(children)) != len(children):
                raise SchemaError("tree", f"node {key!r} lists a child twice")
            seen.add(key)
            extended = [c for c in children if c != "null"]
            if "null" in children and path:
                complete.append(path)
            if not extended:
                leaves.append(path)
            frontier.extend((*path, child) for child in extended)
            if len(leaves) > limits.MAX_LEAVES:
                raise SchemaError("tree", f"the tree must have at most {limits.MAX_LEAVES:,} leaves")
        unreachable = sorted(set(tree) - seen)
        if unreachable:
            raise SchemaError("tree", f"node(s) not reachable from root: {', '.join(unreachable[:5])}")
        # A node whose only child is "null" is a complete phrase, not a leaf to extend.
        leaves = [leaf for leaf in leaves if leaf not in complete or not leaf] or [()]
        if leaves != [()] and () in leaves:
            leaves.remove(())
        return cls(tokens=tuple(tokens), leaves=tuple(leaves), complete=tuple(complete), unit=unit)

    def to_json(self) -> dict:
        # Children in order of first appearance along the leaves, so that from_json's breadth-first
        # walk gives back the same order of leaves (and of buckets) when the leaves are in that order.
        tree: dict[str, list[str]] = {"root": []}
        for path in (*self.leaves, *self.complete):
            for depth in range(1, len(path) + 1):
                parent = "root" if depth == 1 else _join(self.unit, path[: depth - 1])
                children = tree.setdefault(parent, [])
                if path[depth - 1] not in children:
                    children.append(path[depth - 1])
        for path in self.complete:
            tree.setdefault(_join(self.unit, path), []).insert(0, "null")
        schema = {"dataType": "PrefixTree", "tree": tree, "tokens": list(self.tokens)}
        if self.unit != "word":
            schema["unit"] = self.unit
        return schema

    # -- the device side --

    def buckets_of(self, window_symbols: IntArray) -> tuple[IntArray, npt.NDArray[np.bool_]]:
        """Each window's bucket, and whether its prefix is a leaf (if not, it encodes to OOV, 0)."""
        vocabulary = len(self.tokens)
        last = window_symbols[:, -1]
        if self.length == 1:
            eligible = last >= 0
            return np.where(eligible, last + 1, 0).astype(np.int64), eligible
        leaf = self._leaf_index(window_symbols[:, :-1])
        eligible = leaf >= 0
        extension = np.where(last == END_SYMBOL, 0, np.where(last == OOV_SYMBOL, 1, last + 2))
        return np.where(eligible, 1 + leaf * (vocabulary + 2) + extension, 0).astype(np.int64), eligible

    def _leaf_index(self, prefixes: IntArray) -> IntArray:
        """Index into ``leaves`` of each row of symbols, -1 when it is no leaf.

        The tree is walked one level at a time, vectorised: a node's key is parent * (V + 1) + symbol,
        looked up by binary search among the keys of that level.
        """
        index = {t: i for i, t in enumerate(self.tokens)}
        base = len(self.tokens) + 1
        node = np.zeros(prefixes.shape[0], dtype=np.int64)
        alive = np.ones(prefixes.shape[0], dtype=bool)
        for depth in range(self.length - 1):
            paths = sorted({leaf[: depth + 1] for leaf in self.leaves})
            parents = sorted({p[:-1] for p in paths})
            parent_id = {p: i for i, p in enumerate(parents)}
            keys = np.array([parent_id[p[:-1]] * base + index[p[-1]] for p in paths], dtype=np.int64)
            order = np.argsort(keys)
            keys = keys[order]
            symbol = prefixes[:, depth]
            alive &= symbol >= 0
            wanted = node * base + np.where(alive, symbol, 0)
            where = np.minimum(np.searchsorted(keys, wanted), keys.size - 1)
            alive &= keys[where] == wanted
            node = order[where]  # the id of the path at this depth, in sorted-path order
        leaf_of_path = {leaf: i for i, leaf in enumerate(self.leaves)}
        paths = sorted({leaf for leaf in self.leaves})
        to_leaf = np.array([leaf_of_path[p] for p in paths], dtype=np.int64)
        return np.where(alive, to_leaf[node], -1)


# ---------------------------------------------------------------- the static baseline


_MULTIPLIER = np.uint64(0x9E3779B97F4A7C15)  # odd: 2^64 / golden ratio
_SYMBOL_BASE = np.uint64(1_000_003)


@dataclass(frozen=True)
class HashedNgramType:
    """Every r-gram hashed into a count-mean sketch of rows x columns cells, plus one "no r-gram" bucket.

    Row j hashes an r-gram's key k (a polynomial in its symbols) by multiply-shift with its own odd
    multiplier: h_j(k) = ((a_j k + b_j) mod 2^64) >> (64 - log2 columns). A device reports bucket
    1 + j columns + h_j(k) for a uniform row j.

    Decoding (count-mean sketch): with M_j the debiased count of row j's cells and N the reports
    holding an r-gram, E[sum_j M_j[h_j(x)]] = f(x) + (N - f(x)) / columns over the hash functions, so
    f~(x) = columns / (columns - 1) (sum_j M_j[h_j(x)] - N / columns).
    """

    tokens: tuple[str, ...]
    length: int
    rows: int = 4
    columns: int = 4096
    unit: str = "word"
    salt: int = 20221

    def __post_init__(self) -> None:
        if self.length < 1:
            raise SchemaError("length", "length must be at least 1")
        if self.rows < 1:
            raise SchemaError("rows", "rows must be at least 1")
        if self.columns < 2 or self.columns & (self.columns - 1):
            raise SchemaError("columns", "columns must be a power of two, at least 2")
        if self.unit not in UNITS:
            raise SchemaError("unit", f"unit must be one of {', '.join(UNITS)}")
        if not self.tokens or len(set(self.tokens)) != len(self.tokens):
            raise SchemaError("tokens", "tokens must be distinct and at least one")

    @property
    def size(self) -> int:
        return 1 + self.rows * self.columns

    @property
    def labels(self) -> list[str]:
        return ["no n-gram"] + [f"row {j} cell {c}" for j in range(self.rows) for c in range(self.columns)]

    def to_json(self) -> dict:
        schema = {
            "dataType": "HashedNgrams",
            "length": self.length,
            "tokens": list(self.tokens),
            "rows": self.rows,
            "columns": self.columns,
        }
        if self.unit != "word":
            schema["unit"] = self.unit
        return schema

    @classmethod
    def from_json(cls, schema: dict) -> HashedNgramType:
        tokens = _tokens_of(schema)
        numbers = {}
        for name, default, most in (
            ("length", None, 12),
            ("rows", 4, limits.MAX_SKETCH_ROWS),
            ("columns", 4096, limits.MAX_SKETCH_COLUMNS),
        ):
            value = schema.get(name, default)
            if isinstance(value, bool) or not isinstance(value, int):
                raise SchemaError(name, f"{name} must be an integer")
            if value > most:
                raise SchemaError(name, f"{name} must be at most {most:,}")
            numbers[name] = value
        return cls(tokens=tuple(tokens), unit=schema.get("unit", "word"), **numbers)

    def _hash_parameters(self) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.uint64]]:
        rng = np.random.default_rng([self.salt, self.rows, self.columns, self.length])
        a = rng.integers(0, 2**63, size=self.rows, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
        b = rng.integers(0, 2**63, size=self.rows, dtype=np.uint64)
        return a, b

    @staticmethod
    def _keys(window_symbols: IntArray) -> npt.NDArray[np.uint64]:
        key = np.zeros(window_symbols.shape[0], dtype=np.uint64)
        for column in window_symbols.T:  # r columns, not devices
            key = key * _SYMBOL_BASE + (column + 3).astype(np.uint64)  # END -2, OOV -1 -> 1, 2
        return key * _MULTIPLIER

    def _cells(self, keys: npt.NDArray[np.uint64], row: IntArray) -> IntArray:
        a, b = self._hash_parameters()
        shift = np.uint64(64 - int(self.columns).bit_length() + 1)
        return ((a[row] * keys + b[row]) >> shift).astype(np.int64)

    def buckets_of(self, window_symbols: IntArray, row: IntArray) -> IntArray:
        """The bucket of each window hashed with its device's row."""
        return 1 + row * self.columns + self._cells(self._keys(window_symbols), row)

    def decode(
        self, estimates: npt.NDArray[np.float64], variances: npt.NDArray[np.float64], candidates: IntArray
    ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
        """(f~(x), its standard error) for each candidate r-gram, given as rows of symbols."""
        cells = np.asarray(estimates[1:], dtype=np.float64).reshape(self.rows, self.columns)
        cell_variance = np.asarray(variances[1:], dtype=np.float64).reshape(self.rows, self.columns)
        reports = float(cells.sum())  # every report with an r-gram lands in exactly one row
        keys = self._keys(candidates)
        total = np.zeros(candidates.shape[0])
        variance = np.zeros(candidates.shape[0])
        for j in range(self.rows):  # rows of the sketch, a handful
            column = self._cells(keys, np.full(keys.size, j))
            total += cells[j, column]
            variance += cell_variance[j, column]
        scale = self.columns / (self.columns - 1)
        return scale * (total - reports / self.columns), scale * np.sqrt(variance)

    def candidates(self, chunk: int = 1 << 20) -> Iterator[IntArray]:
        """Every r-gram over the tokens (the last symbol may also be END), ``chunk`` rows at a time."""
        vocabulary = len(self.tokens)
        last = np.concatenate([[END_SYMBOL], np.arange(vocabulary)])
        heads = vocabulary ** (self.length - 1)
        heads_per_chunk = max(1, chunk // last.size)
        for first in range(0, heads, heads_per_chunk):
            head = np.arange(first, min(heads, first + heads_per_chunk))
            digits = [(head // vocabulary**p) % vocabulary for p in reversed(range(self.length - 1))]
            prefix = np.stack(digits, axis=1) if digits else np.zeros((head.size, 0), dtype=np.int64)
            yield np.concatenate(
                [np.repeat(prefix, last.size, axis=0), np.tile(last, head.size)[:, None]], axis=1
            ).astype(np.int64)

    def top(
        self, estimates: npt.NDArray[np.float64], variances: npt.NDArray[np.float64], k: int
    ) -> list[tuple[tuple[str, ...], float, float]]:
        """The k candidate r-grams with the largest estimates: (symbols as labels, estimate, standard error)."""
        best = np.empty((0, self.length), dtype=np.int64)
        best_estimate, best_error = np.empty(0), np.empty(0)
        for candidates in self.candidates():
            estimate, error = self.decode(estimates, variances, candidates)
            keep = np.argpartition(-estimate, min(k, estimate.size - 1))[:k] if estimate.size > k else slice(None)
            best = np.concatenate([best, candidates[keep]])
            best_estimate = np.concatenate([best_estimate, estimate[keep]])
            best_error = np.concatenate([best_error, error[keep]])
            if best_estimate.size > 4 * k:
                order = np.argsort(-best_estimate)[:k]
                best, best_estimate, best_error = best[order], best_estimate[order], best_error[order]
        order = np.argsort(-best_estimate)[:k]
        return [(self.symbol_labels(best[i]), float(best_estimate[i]), float(best_error[i])) for i in order]

    def symbol_labels(self, symbols: IntArray) -> tuple[str, ...]:
        return symbol_labels(self.tokens, symbols)


def symbol_labels(tokens: tuple[str, ...], symbols: IntArray) -> tuple[str, ...]:
    names = {END_SYMBOL: END_LABEL, OOV_SYMBOL: OOV_LABEL}
    return tuple(names.get(int(s), tokens[int(s)] if int(s) >= 0 else OOV_LABEL) for s in symbols)


def ngram_text(unit: str, ngram: tuple[str, ...]) -> str:
    """An n-gram as the analyst reads it: words joined by spaces, characters run together."""
    return _join(unit, ngram)
