"""Device records as the fleet JSONL format writes them (docs/fleets.md), read into shard columns.

Pure (numpy, no Django): the server imports a fleet with it (devices.fleet_io) and a real
device's SDK reads its own data with it (pfs_device.sdk), so both see the same values from the same
line: lowercased words, a missing age as NaN, a missing locale as "unknown".
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np
import numpy.typing as npt

from pfs_device.columns import Columns

MAX_ID_LENGTH = 64
MAX_AGE = 150.0
UNKNOWN_LOCALE = "unknown"  # the locale of a device whose profile has none
MAX_LOCALES = int(np.iinfo(np.int16).max) + 1  # locale codes are int16
# A device clock may run a little ahead; further ahead is a unit error (milliseconds for seconds).
CLOCK_SKEW_SECONDS = 86_400
MAX_UNIX_SECONDS = 253_402_300_799  # 9999-12-31T23:59:59Z, the last time ISO 8601 years can write
MAX_MESSAGES = 100  # a file broken on every line reports this many problems, then a count

DEVICE_KEYS = {"id", "profile", "keyboard", "metrics"}
PROFILE_KEYS = {"age", "locale"}
METRICS_KEYS = {"perplexity"}
PHRASE_KEYS = {"text", "time"}


@dataclass
class Parsed:
    """The devices of a file as flat lists, in file order, before any array is built."""

    ids: list[str] = field(default_factory=list)
    ages: list[float] = field(default_factory=list)
    locales: list[str] = field(default_factory=list)
    perplexities: list[float] = field(default_factory=list)
    phrases_per_device: list[int] = field(default_factory=list)
    phrase_times: list[int] = field(default_factory=list)
    tokens_per_phrase: list[int] = field(default_factory=list)
    tokens: list[str] = field(default_factory=list)
    line_of_id: dict[str, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    more_errors: int = 0

    def error(self, message: str) -> None:
        if len(self.errors) < MAX_MESSAGES:
            self.errors.append(message)
        else:
            self.more_errors += 1


def unix_seconds(value: object) -> int:
    """Unix seconds from a number or an ISO 8601 string with a UTC offset; ValueError otherwise."""
    if isinstance(value, bool):
        raise ValueError("must be unix seconds or an ISO 8601 time")
    if isinstance(value, int | float):
        if not math.isfinite(value) or not 0 <= value <= MAX_UNIX_SECONDS:
            raise ValueError(f"must be unix seconds from 0 to {MAX_UNIX_SECONDS}")
        return math.floor(value)
    if isinstance(value, str):
        text = value.strip()
        try:
            number = float(text)
        except ValueError:
            number = None
        if number is not None:
            return unix_seconds(number)
        try:
            moment = datetime.fromisoformat(text)
        except ValueError:
            raise ValueError(f"{value!r} is not unix seconds or an ISO 8601 time") from None
        if moment.tzinfo is None:
            raise ValueError(f"{value!r} needs a UTC offset, e.g. {text}Z or {text}+02:00")
        return unix_seconds(moment.timestamp())
    raise ValueError("must be unix seconds or an ISO 8601 time")


def parse_line(number: int, raw: bytes, now: float, parsed: Parsed) -> None:
    """Validate one line and, when it is valid, append its device to ``parsed``."""
    where = f"line {number}"
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        parsed.error(f"{where}: not UTF-8 text")
        return
    if not text.strip():
        return  # blank lines, such as a trailing one, separate nothing and hold no device
    try:
        device = json.loads(text)
    except json.JSONDecodeError as error:
        parsed.error(f"{where}: not valid JSON: {error.msg} (column {error.colno})")
        return
    if not isinstance(device, dict):
        parsed.error(f"{where}: must be a JSON object, one device per line")
        return

    problems: list[str] = []
    problems += _unknown_keys(device, DEVICE_KEYS, "")
    device_id = _device_id(device.get("id"), problems)
    profile = _object(device, "profile", PROFILE_KEYS, problems)
    metrics = _object(device, "metrics", METRICS_KEYS, problems)
    age = _number(profile.get("age"), "profile.age", 0.0, MAX_AGE, problems)
    locale = _locale(profile.get("locale"), problems)
    perplexity = _number(metrics.get("perplexity"), "metrics.perplexity", 1.0, math.inf, problems)
    phrases = _keyboard(device.get("keyboard"), now, problems)
    if device_id is not None:
        if device_id in parsed.line_of_id:
            problems.append(f"id: {device_id!r} is already the id of line {parsed.line_of_id[device_id]}")
        else:
            parsed.line_of_id[device_id] = number
    for problem in problems:
        parsed.error(f"{where}: {problem}")
    if problems or parsed.errors or device_id is None:
        return  # a file with errors is never written: keep checking ids, stop collecting data

    parsed.ids.append(device_id)
    parsed.ages.append(age)
    parsed.locales.append(locale)
    parsed.perplexities.append(perplexity)
    parsed.phrases_per_device.append(len(phrases))
    for words, moment in phrases:
        parsed.phrase_times.append(moment)
        parsed.tokens_per_phrase.append(len(words))
        parsed.tokens.extend(words)


def _unknown_keys(value: dict, known: set[str], prefix: str) -> list[str]:
    return [f"{prefix}{key}: unknown field (known: {', '.join(sorted(known))})" for key in value if key not in known]


def _device_id(value: object, problems: list[str]) -> str | None:
    if value is None:
        problems.append("id: is required")
    elif not isinstance(value, str) or not value or len(value) > MAX_ID_LENGTH or not value.isprintable():
        problems.append(f"id: must be a string of 1 to {MAX_ID_LENGTH} printable characters")
    else:
        return value
    return None


def _object(device: dict, key: str, known: set[str], problems: list[str]) -> dict:
    value = device.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        problems.append(f"{key}: must be an object")
        return {}
    problems += _unknown_keys(value, known, f"{key}.")
    return value


def _number(value: object, path: str, low: float, high: float, problems: list[str]) -> float:
    """A number in [low, high], or NaN when absent (null or missing)."""
    if value is None:
        return math.nan
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        problems.append(f"{path}: must be a number")
    elif not low <= value <= high:
        bound = f"at least {low:g}" if math.isinf(high) else f"between {low:g} and {high:g}"
        problems.append(f"{path}: must be {bound}")
    else:
        return float(value)
    return math.nan


def _locale(value: object, problems: list[str]) -> str:
    if value is None:
        return UNKNOWN_LOCALE
    if not isinstance(value, str) or not value.strip():
        problems.append("profile.locale: must be a non-empty string, such as en_US")
        return UNKNOWN_LOCALE
    return value.strip()


def _keyboard(value: object, now: float, problems: list[str]) -> list[tuple[list[str], int]]:
    """The device's phrases as (lowercased words, unix seconds), in file order."""
    if value is None:
        return []
    if not isinstance(value, list):
        problems.append("keyboard: must be a list of phrases")
        return []
    phrases = []
    latest = now + CLOCK_SKEW_SECONDS
    for position, entry in enumerate(value):
        path = f"keyboard[{position}]"
        moment: object = None
        if isinstance(entry, dict):
            problems += _unknown_keys(entry, PHRASE_KEYS, f"{path}.")
            text, moment = entry.get("text"), entry.get("time")
            path += ".text"
        else:
            text = entry
        if not isinstance(text, str):
            problems.append(f"{path}: must be a string, or an object with text and time")
            continue
        words = text.lower().split()
        if not words:
            problems.append(f"{path}: must contain at least one word")
            continue
        if moment is None:
            phrases.append((words, math.floor(now)))
            continue
        try:
            seconds = unix_seconds(moment)
        except ValueError as error:
            problems.append(f"keyboard[{position}].time: {error}")
            continue
        if seconds > latest:
            problems.append(f"keyboard[{position}].time: is after the import time (milliseconds instead of seconds?)")
            continue
        phrases.append((words, seconds))
    return phrases


def _token_vocabulary(tokens: list[str]) -> tuple[list[str], npt.NDArray[np.int32]]:
    """The vocabulary, most frequent token first (ties by name), and every token's code in it."""
    if not tokens:
        return [], np.zeros(0, dtype=np.int32)
    names, inverse, counts = np.unique(np.array(tokens, dtype=np.str_), return_inverse=True, return_counts=True)
    order = np.lexsort((np.arange(names.size), -counts))  # np.unique sorts by name: a stable rank by count
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    return names[order].tolist(), rank[inverse].astype(np.int32)


def _offsets(lengths: list[int]) -> npt.NDArray[np.int64]:
    return np.concatenate([[0], np.cumsum(np.array(lengths, dtype=np.int64))]).astype(np.int64)


def parsed_columns(parsed: Parsed) -> tuple[Columns, dict[str, list[str]]]:
    """Columns of every parsed device in file order, and the vocabularies their codes index.

    Locales sorted by name; tokens (lowercased, split on whitespace) by descending count, ties by name.
    """
    locales = sorted(set(parsed.locales))
    token_vocabulary, token_codes = _token_vocabulary(parsed.tokens)
    locale_index = {locale: i for i, locale in enumerate(locales)}
    columns: Columns = {
        "device_id": np.array(parsed.ids, dtype=np.str_),
        "age": np.array(parsed.ages, dtype=np.float32),
        "locale": np.array([locale_index[locale] for locale in parsed.locales], dtype=np.int16),
        "perplexity": np.array(parsed.perplexities, dtype=np.float32),
        "phrase_start": _offsets(parsed.phrases_per_device),
        "phrase_time": np.array(parsed.phrase_times, dtype=np.int64),
        "token_start": _offsets(parsed.tokens_per_phrase),
        "tokens": token_codes,
    }
    return columns, {"locale": locales, "tokens": token_vocabulary}


def columns_slice(columns: Columns, start: int, stop: int) -> Columns:
    """Devices [start, stop) of whole-fleet columns, with CSR offsets rebased to the slice."""
    phrase_start = columns["phrase_start"][start : stop + 1]
    first_phrase, last_phrase = int(phrase_start[0]), int(phrase_start[-1])
    token_start = columns["token_start"][first_phrase : last_phrase + 1]
    first_token, last_token = int(token_start[0]), int(token_start[-1])
    return {
        "device_id": columns["device_id"][start:stop],
        "age": columns["age"][start:stop],
        "locale": columns["locale"][start:stop],
        "perplexity": columns["perplexity"][start:stop],
        "phrase_start": phrase_start - first_phrase,
        "phrase_time": columns["phrase_time"][first_phrase:last_phrase],
        "token_start": token_start - first_token,
        "tokens": columns["tokens"][first_token:last_token],
    }
