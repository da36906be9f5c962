from __future__ import annotations


class ValidationFailed(ValueError):
    """Bad input: ``errors`` maps each offending field (a dotted JSON path) to its messages."""

    def __init__(self, errors: dict[str, list[str]]) -> None:
        super().__init__("; ".join(f"{k}: {' '.join(v)}" for k, v in errors.items()))
        self.errors = errors


class NotAllowed(PermissionError):
    """The action is not allowed in the object's current state (e.g. running an unapproved analysis)."""


class Conflict(NotAllowed):
    """Not allowed because of the object's state, not the user's rights (cancelling a finished round).

    The API answers 409 rather than 403; callers that catch NotAllowed still catch it.
    """


class Unavailable(RuntimeError):
    """Another service this one depends on did not answer (the helper aggregator): nothing was
    done; the same request may succeed later. The API answers 503."""
