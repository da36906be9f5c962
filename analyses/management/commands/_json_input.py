"""Shared by the commands that read a JSON file: a bad file is a usage error (exit code 2)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import CommandError

from pfs_base.errors import ValidationFailed


def read_json(path: str) -> Any:
    try:
        return json.loads(Path(path).read_text())
    except OSError as error:
        raise CommandError(f"cannot read {path}: {error.strerror}", returncode=2) from error
    except json.JSONDecodeError as error:
        raise CommandError(f"{path} is not valid JSON: {error}", returncode=2) from error


def invalid(error: ValidationFailed) -> CommandError:
    lines = [f"  {path}: {' '.join(messages)}" for path, messages in error.errors.items()]
    return CommandError("invalid input, nothing was changed:\n" + "\n".join(lines), returncode=2)
