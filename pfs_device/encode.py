"""On the device: turn a field's data into one bucket per device, as the recipe's schema says.

A numeric field is bucketed (BucketedType). Typed text is read as sequences of words (phrases) or
of characters (words) and encoded by the round's prefix tree or, for the static baseline, hashed
(privacy.ngrams); the device's own coins pick which of its n-grams it reports. Vectorised over a
whole shard.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from pfs_device.columns import Columns
from pfs_device.streams import field_kind
from privacy.encoding import CombinationType, Encoding, content_encoding
from privacy.ngrams import HashedNgramType, PrefixTreeType, Sequences, choose_per_device, windows

# The schema each field kind can be encoded with (pfs_device.streams): anything else is refused.
SCHEMAS_BY_KIND = {"number": ("BucketedType",), "text": ("PrefixTree", "HashedNgrams", "Poplar1Words")}


def schema_fits(kind: str | None, schema: dict) -> bool:
    return kind is not None and schema.get("dataType") in SCHEMAS_BY_KIND.get(kind, ())


ParsedContent = tuple[tuple[str, ...], Encoding | CombinationType]


def content_fits(stream: str, data_types: dict, parsed: ParsedContent | None = None) -> bool:
    """Whether every encoded field of the stream has a schema its kind allows.

    ``parsed``: content_encoding(data_types) when the caller holds it already (a shard's task).
    """
    if parsed is None:
        try:
            parsed = content_encoding(data_types)
        except ValueError:
            return False
    return all(schema_fits(field_kind(stream, f), data_types[f]) for f in parsed[0])


def encode_devices(
    data_types: dict,
    columns: Columns,
    vocabularies: dict,
    rng: np.random.Generator,
    parsed: ParsedContent | None = None,
) -> npt.NDArray[np.int64]:
    """Each device's bucket under the recipe's dataTypeContent; ``rng`` holds the devices' coins.
    ``parsed``: content_encoding(data_types) when the caller holds it already."""
    fields, encoding = parsed or content_encoding(data_types)
    if isinstance(encoding, CombinationType):
        parts = [_encode_field(part, field, columns, vocabularies, rng) for field, part in encoding.parts]
        return encoding.combine(parts)
    return _encode_field(encoding, fields[0], columns, vocabularies, rng)


def _encode_field(
    encoding: Encoding, field: str, columns: Columns, vocabularies: dict, rng: np.random.Generator
) -> npt.NDArray[np.int64]:
    if not isinstance(encoding, (PrefixTreeType, HashedNgramType)):
        return encoding.encode(columns[field])
    sequences = text_sequences(columns, vocabularies["tokens"], encoding.tokens, encoding.unit)
    found = windows(sequences, encoding.length, anchored=encoding.unit == "character")
    if isinstance(encoding, PrefixTreeType):
        bucket, eligible = encoding.buckets_of(found.symbols)
    else:
        row = rng.integers(0, encoding.rows, size=sequences.devices)
        bucket, eligible = encoding.buckets_of(found.symbols, row[found.device]), np.ones(found.device.size, bool)
    return choose_per_device(sequences.devices, found.device, eligible, bucket, rng)


def device_words(columns: Columns, fleet_tokens: list[str], rng: np.random.Generator) -> list[str]:
    """Each device's word for a Poplar1 walk: one of the words it typed (within retention), uniformly
    by its own coins; "" for a device that typed none (its report then lies under no prefix asked)."""
    phrase_start, token_start, typed = columns["phrase_start"], columns["token_start"], columns["tokens"]
    first, last = token_start[phrase_start[:-1]], token_start[phrase_start[1:]]
    held = last - first
    pick = first + np.floor(rng.random(held.size) * held).astype(np.int64)
    tokens = np.asarray(fleet_tokens, dtype=object)
    words = np.full(held.size, "", dtype=object)
    words[held > 0] = tokens[typed[pick[held > 0]]]
    return words.tolist()


def text_sequences(columns: Columns, fleet_tokens: list[str], tokens: tuple[str, ...], unit: str) -> Sequences:
    """The typed text of every device as sequences of the recipe's token indices (OOV: -1).

    ``word``: a sequence per phrase, a symbol per word. ``character``: a sequence per word typed,
    a symbol per character.
    """
    index = {token: i for i, token in enumerate(tokens)}
    phrase_start, token_start, typed = columns["phrase_start"], columns["token_start"], columns["tokens"]
    if unit == "word":
        lookup = np.array([index.get(t, -1) for t in fleet_tokens], dtype=np.int64)
        return Sequences(device_start=phrase_start, sequence_start=token_start, symbols=lookup[typed])

    # Characters: each word the device typed becomes a sequence of its characters' indices.
    spelled = [np.array([index.get(c, -1) for c in word], dtype=np.int64) for word in fleet_tokens]
    word_length = np.array([s.size for s in spelled], dtype=np.int64)
    word_offset = np.concatenate([[0], np.cumsum(word_length)])
    letters = np.concatenate(spelled) if spelled else np.zeros(0, dtype=np.int64)
    length = word_length[typed]
    sequence_start = np.concatenate([[0], np.cumsum(length)]).astype(np.int64)
    within = np.arange(int(sequence_start[-1])) - np.repeat(sequence_start[:-1], length)
    symbols = letters[np.repeat(word_offset[:-1][typed], length) + within]
    # A device's words are its phrases' tokens: its sequences start where its first phrase's tokens do.
    return Sequences(device_start=token_start[phrase_start], sequence_start=sequence_start, symbols=symbols)
