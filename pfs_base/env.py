"""Typed readers for settings taken from the environment; a bad value stops start-up."""

from __future__ import annotations

import base64
import binascii
import os
import re
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_str(name: str, default: str | None = None) -> str | None:
    value = os.environ.get(name)
    return default if value is None or value == "" else value


def env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    if value.strip().lower() in _TRUE:
        return True
    if value.strip().lower() in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name} must be a boolean (1/0, true/false), not {value!r}")


def env_int(name: str, default: int, *, minimum: int = 0) -> int:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        number = int(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be an integer, not {value!r}") from None
    if number < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}, not {number}")
    return number


def env_list(name: str, default: list[str]) -> list[str]:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    return [item.strip() for item in value.split(",") if item.strip()]


def env_float(name: str, default: float, *, minimum: float = 0.0, maximum: float | None = None) -> float:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        number = float(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a number, not {value!r}") from None
    if number < minimum or (maximum is not None and number > maximum):
        bounds = f"between {minimum:g} and {maximum:g}" if maximum is not None else f"at least {minimum:g}"
        raise ImproperlyConfigured(f"{name} must be {bounds}, not {value}")
    return number


def env_choice(name: str, default: str, choices: tuple[str, ...]) -> str:
    value = env_str(name, default) or default
    if value not in choices:
        raise ImproperlyConfigured(f"{name} must be one of {', '.join(choices)}, not {value!r}")
    return value


def env_file_load(path: Path) -> None:
    """Put the settings of an env file into the environment, where not set already.

    The environment wins: a variable exported in the shell, by systemd or by make is never
    replaced, so `DEBUG=0 manage.py ...` means what it says whatever .env holds. A missing file is
    no error (production sets everything in its environment).
    """
    if path.is_file():
        for name, value in env_file_read(path).items():
            os.environ.setdefault(name, value)


def env_file_read(path: Path) -> dict[str, str]:
    """The ``NAME=value`` lines of an env file, as systemd's EnvironmentFile= and honcho read them:
    optionally after ``export``, the value optionally in single or double quotes; ``#`` starts a
    comment line. Anything else stops start-up with the file and line named."""
    settings = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = _ENV_LINE.fullmatch(line)
        if match is None:
            raise ImproperlyConfigured(f"{path}, line {number}: expected NAME=value, not {line!r}")
        value = match["value"]
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        settings[match["name"]] = value
    return settings


_ENV_LINE = re.compile(r"(?:export\s+)?(?P<name>[A-Za-z_][A-Za-z0-9_]*)\s*=\s*(?P<value>.*)")


def env_keys(name: str, *, size: int = 32) -> list[bytes]:
    """Secret keys from one variable: base64 of ``size`` bytes each, comma-separated, the current
    key first (then older ones still in use). Empty when unset."""
    value = env_str(name)
    if value is None:
        return []
    try:
        return [key_decode(item, size=size) for item in value.split(",") if item.strip()]
    except ValueError as bad:
        raise ImproperlyConfigured(f"{name}: {bad}") from None


def key_decode(text: str, *, size: int = 32) -> bytes:
    """One base64 key of ``size`` bytes; ValueError naming what is wrong (never the key)."""
    try:
        key = base64.b64decode(text.strip(), validate=True)
    except binascii.Error:
        raise ValueError("a key must be base64") from None
    if len(key) != size:
        raise ValueError(f"a key must be {size} bytes (base64 of {size} random bytes), not {len(key)}")
    return key


def env_key(name: str, *, size: int = 32) -> bytes | None:
    """One key of ``size`` bytes, base64, from the variable ``name`` or from the file named by
    ``name``_FILE (its first line); None when neither is set. Both set, or a bad key: ImproperlyConfigured."""
    value, path = env_str(name), env_str(f"{name}_FILE")
    if value is not None and path is not None:
        raise ImproperlyConfigured(f"set {name} or {name}_FILE, not both")
    if path is not None:
        try:
            value = Path(path).read_text(encoding="ascii").strip()
        except (OSError, UnicodeDecodeError) as error:
            raise ImproperlyConfigured(f"{name}_FILE: cannot read {path}: {error}") from None
    if value is None:
        return None
    try:
        return key_decode(value, size=size)
    except ValueError as bad:
        raise ImproperlyConfigured(f"{name}: {bad}") from None
