"""Small readers that collect every problem of a JSON document, keyed by its dotted path."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from privacy.limits import Limit
from privacy.schema_keys import unknown_keys


def sentence(error: object) -> str:
    """An error's text as a sentence: capitalised, ending in a full stop unless it has its own."""
    text = str(error)
    text = text[:1].upper() + text[1:]
    return text if text.endswith((".", "?", "!")) else f"{text}."


class Problems:
    def __init__(self) -> None:
        self.errors: dict[str, list[str]] = {}

    def add(self, path: str, message: str) -> None:
        self.errors.setdefault(path, []).append(message)

    def __bool__(self) -> bool:
        return bool(self.errors)

    def only(self, data: Any, known: Iterable[str], prefix: str = "") -> None:
        """Refuse every key of ``data`` (an object at ``prefix``) that is not ``known``."""
        if isinstance(data, dict):
            for key, message in unknown_keys(data, known).items():
                self.add(f"{prefix}{key}", message)

    def number(
        self,
        data: dict,
        key: str,
        path: str,
        *,
        default: float | None = None,
        positive: bool = False,
        open_unit: bool = False,
        unit: bool = False,
        limit: Limit | None = None,
    ) -> float | None:
        """A finite number at data[key]; positive: > 0; open_unit: in (0, 1); unit: in (0, 1]; within ``limit``
        (privacy.limits) when given."""
        value = data.get(key, default)
        if value is None:
            self.add(path, "This field is required.")
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            self.add(path, "Must be a finite number.")
            return None
        if positive and value <= 0:
            self.add(path, "Must be greater than 0.")
            return None
        if open_unit and not 0 < value < 1:
            self.add(path, "Must lie strictly between 0 and 1.")
            return None
        if unit and not 0 < value <= 1:
            self.add(path, "Must lie in (0, 1].")
            return None
        if limit is not None and (refusal := limit.refusal(value)):
            self.add(path, refusal)
            return None
        return float(value)

    def integer(
        self, data: dict, key: str, path: str, *, minimum: int = 0, required: bool = True, limit: Limit | None = None
    ) -> int | None:
        value = data.get(key)
        if value is None and not required:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            self.add(path, "Must be a whole number." if value is not None else "This field is required.")
            return None
        if value < minimum:
            self.add(path, f"Must be at least {minimum}.")
            return None
        if limit is not None and (refusal := limit.refusal(value)):
            self.add(path, refusal)
            return None
        return value

    def string(self, data: dict, key: str, path: str, *, required: bool = True) -> str | None:
        value = data.get(key)
        if value is None and not required:
            return None
        if not isinstance(value, str) or not value.strip():
            self.add(path, "Must be a non-empty string." if value is not None else "This field is required.")
            return None
        return value.strip()

    def obj(self, data: dict, key: str, path: str) -> dict | None:
        value = data.get(key)
        if not isinstance(value, dict):
            self.add(path, "Must be an object." if value is not None else "This field is required.")
            return None
        return value

    def string_list(self, data: dict, key: str, path: str, *, default: list | None = None) -> list[str] | None:
        value: Any = data.get(key, default)
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            self.add(path, "Must be a list of strings." if value is not None else "This field is required.")
            return None
        return value
