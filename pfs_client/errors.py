"""What the client raises. Every error is a PfsError, so a notebook can catch them all at once."""

from __future__ import annotations

import html
import json
import re
from typing import Any

# The code an error body without one gets, by HTTP status (DRF's default codes).
_DEFAULT_CODES = {
    400: "invalid",
    401: "not_authenticated",
    403: "permission_denied",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    409: "conflict",
    413: "too_large",
    415: "unsupported_media_type",
    422: "unprocessable",
    429: "throttled",
}


class PfsError(Exception):
    """Anything that went wrong talking to PFS Studio."""


class TransportError(PfsError):
    """The server could not be reached, or the connection broke, even after the retries."""


class ApiError(PfsError):
    """The server answered with an error: its HTTP status, code, message and per-field messages.

    ``fields`` maps a field (the recipe's dotted JSON path, e.g. ``privacy.epsilon0``) to its messages.
    """

    def __init__(self, status: int, code: str, detail: str, fields: dict[str, list[str]] | None = None) -> None:
        self.status = status
        self.code = code
        self.detail = detail
        self.fields = fields or {}
        super().__init__(str(self))

    def __str__(self) -> str:
        return "\n".join([f"HTTP {self.status} {self.code}: {self.summary}", *(f"  {m}" for m in self.details())])

    @property
    def summary(self) -> str:
        """One line that says what was wrong: the one field's message in full (the server's ``detail``
        then only names the field: "Invalid input: recipeIdentifier."), else the ``detail``."""
        messages = self.messages()
        return messages[0] if len(messages) == 1 else self.detail

    def messages(self) -> list[str]:
        """One ``field: message`` line per field."""
        return [f"{name}: {' '.join(messages)}" for name, messages in self.fields.items()]

    def details(self) -> list[str]:
        """The lines under the summary: one per field when there are several."""
        messages = self.messages()
        return messages if len(messages) > 1 else []

    @classmethod
    def from_response(cls, status: int, body: bytes, reason: str = "") -> ApiError:
        """Parse the error body: the API's ``{"detail", "code", "fields"}``, DRF's default
        ``{field: [messages]}`` or ``{"detail": ...}``, or a page that is not JSON (a proxy's 502)."""
        # A 401 is its own class, so that a notebook can catch a wrong password or an expired token.
        cls = AuthenticationError if status == 401 else cls
        code = _DEFAULT_CODES.get(status, "server_error" if status >= 500 else "error")
        fallback = reason or f"HTTP {status}"
        try:
            data: Any = json.loads(body.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            return cls(status, code, _text_summary(body) or fallback)
        if isinstance(data, list):
            return cls(status, code, " ".join(str(item) for item in data) or fallback)
        if not isinstance(data, dict):
            return cls(status, code, str(data))
        if "fields" in data or ("detail" in data and "code" in data):
            fields = _flatten(data.get("fields") or {})
            return cls(status, str(data.get("code") or code), str(data.get("detail") or fallback), fields)
        if set(data) <= {"detail", "code"} and "detail" in data:
            return cls(status, str(data.get("code") or code), str(data["detail"]))
        return cls(status, code, "Invalid input." if status == 400 else fallback, _flatten(data))


class AuthenticationError(ApiError):
    """HTTP 401: a wrong username or password (signing in), or a token the server does not know."""


def _flatten(errors: Any, prefix: str = "") -> dict[str, list[str]]:
    """Nested DRF errors as one list of messages per dotted path."""
    if isinstance(errors, dict):
        flat: dict[str, list[str]] = {}
        for key, value in errors.items():
            flat.update(_flatten(value, f"{prefix}.{key}" if prefix else str(key)))
        return flat
    if isinstance(errors, list) and any(isinstance(item, dict | list) for item in errors):
        flat = {}
        for index, item in enumerate(errors):
            flat.update(_flatten(item, f"{prefix}.{index}" if prefix else str(index)))
        return flat
    messages = [str(m) for m in errors] if isinstance(errors, list) else [str(errors)]
    return {prefix or "detail": messages} if messages else {}


def _text_summary(body: bytes) -> str:
    """The title of an HTML error page, or the first line of a text body."""
    text = body.decode("utf-8", errors="replace").strip()
    title = re.search(r"<title>(.*?)</title>", text, flags=re.IGNORECASE | re.DOTALL)
    if title:
        return " ".join(html.unescape(title.group(1)).split())
    if text.startswith("<"):
        return ""
    return text.splitlines()[0][:200] if text else ""


class RoundFailed(PfsError):
    """A round ended failed or cancelled: nothing was released. ``round`` is the round as last read."""

    def __init__(self, round_: Any) -> None:
        self.round = round_
        reason = f": {round_.error}" if round_.error else ""
        super().__init__(f"round {round_.id} {round_.status}{reason}")


class AdaptiveRunFailed(PfsError):
    """An adaptive run ended failed. ``run`` is the run as last read."""

    def __init__(self, run: Any) -> None:
        self.run = run
        reason = f": {run.stop_reason}" if run.stop_reason else ""
        super().__init__(f"adaptive run {run.id} failed{reason}")


class WaitTimeout(PfsError, TimeoutError):
    """Waiting gave up; the round or run goes on on the server."""
