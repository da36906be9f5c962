"""Where private keys come from: the environment, a key file, or (the embedded default) the role's database.

Three roles hold private keys: the leader's and the helper's HPKE keys (X25519, 32 bytes), and the
issuer's key-wrapping key (AES-256-GCM, 32 bytes), which seals each collection's RSA signing key in
the issuer's store. Each comes from, in order:

- ``PFS_<ROLE>_KEY``: base64 keys, comma-separated, the current one first, then older ones still
  needed (an operator rotates by prepending a new key, and drops an old one once the collections
  opened before are closed);
- ``PFS_<ROLE>_KEY_FILE``: a file of one base64 key a line, the current one first; an older key's
  line also says when it was retired (``<key> retired <ISO time>``). ``manage.py rotate_keys``
  writes it (owner-only), and the file is read again whenever it changes, so a running process
  picks up a rotation;
- neither: the role's own database (``AggregatorKey`` rows; the issuer then keeps its RSA keys
  unwrapped in its store).
"""

from __future__ import annotations

import base64
import os
import secrets
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from django.conf import settings

from pfs_base.env import key_decode

ROLES = ("leader", "helper", "issuer")
DATABASE, ENVIRONMENT, FILE = "database", "environment", "file"


class KeysUnavailable(RuntimeError):
    """The configured key file is missing or unreadable: the role cannot work without its key."""


@dataclass(frozen=True)
class StoredKey:
    key: bytes
    retired_at: datetime | None = None  # None: the current key


@dataclass(frozen=True)
class KeySource:
    role: str
    kind: str  # DATABASE, ENVIRONMENT or FILE
    where: str = ""  # the variable's name, or the file's path

    def describe(self) -> str:
        return {
            DATABASE: "its database",
            ENVIRONMENT: f"the environment ({self.where})",
            FILE: f"the file {self.where}",
        }[self.kind]


def key_source(role: str) -> KeySource:
    if settings.PFS_KEYS.get(role):
        return KeySource(role, ENVIRONMENT, f"PFS_{role.upper()}_KEY")
    if settings.PFS_KEY_FILES.get(role):
        return KeySource(role, FILE, settings.PFS_KEY_FILES[role])
    return KeySource(role, DATABASE)


def source_keys(source: KeySource) -> list[StoredKey]:
    """The keys of an environment or file source, the current one first."""
    if source.kind == ENVIRONMENT:
        keys = settings.PFS_KEYS[source.role]
        return [StoredKey(keys[0])] + [StoredKey(key, retired_at=datetime.min) for key in keys[1:]]
    if source.kind == FILE:
        return key_file_read(Path(source.where))
    raise ValueError("a database source is read by its role")


def key_new() -> bytes:
    return secrets.token_bytes(32)


_file_cache: dict[str, tuple[float, list[StoredKey]]] = {}


def key_file_read(path: Path) -> list[StoredKey]:
    try:
        modified = path.stat().st_mtime_ns
    except OSError as error:
        raise KeysUnavailable(f"key file {path}: {error.strerror} (manage.py rotate_keys writes it)") from None
    cached = _file_cache.get(str(path))
    if cached is not None and cached[0] == modified:
        return cached[1]
    keys = []
    for number, line in enumerate(path.read_text(encoding="ascii").splitlines(), start=1):
        parts = line.split()
        if not parts or parts[0].startswith("#"):
            continue
        try:
            key = key_decode(parts[0])
            retired = datetime.fromisoformat(parts[2]) if parts[1:2] == ["retired"] and len(parts) == 3 else None
        except ValueError as bad:
            raise KeysUnavailable(f"key file {path}, line {number}: {bad}") from None
        if len(parts) != 1 and retired is None:
            raise KeysUnavailable(f"key file {path}, line {number}: expected '<key>' or '<key> retired <time>'")
        keys.append(StoredKey(key, retired))
    if not keys or keys[0].retired_at is not None:
        raise KeysUnavailable(f"key file {path}: its first line must be the current key")
    _file_cache[str(path)] = (modified, keys)
    return keys


def key_file_write(path: Path, keys: list[StoredKey]) -> None:
    """Replace the file at once (a reader sees the old file or the new one), readable by its owner only."""
    lines = ["# PFS Studio private keys: the current one first (manage.py rotate_keys)"]
    for stored in keys:
        text = base64.b64encode(stored.key).decode()
        lines.append(text if stored.retired_at is None else f"{text} retired {stored.retired_at.isoformat()}")
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(4)}")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w", encoding="ascii") as file:
        file.write("\n".join(lines) + "\n")
    os.replace(temporary, path)
