"""A model field holding a recipe's privacy parameters as one value, stored as one JSON object.

The column is parsed into a ``PrivacyParameters`` (privacy.parameters) once, when its row is read,
so every reader takes its numbers from that one frozen value instead of seven loose columns. A key
read inside a query (``privacy__epsilon``, ``KeyTextTransform("epsilon", "recipe__privacy")``)
stays plain JSON.
"""

from __future__ import annotations

import json
from typing import Any

from django.db import models
from django.db.models.fields.json import KeyTransform

from privacy.parameters import PrivacyParameters


class _ParametersEncoder(json.JSONEncoder):
    """Writes a PrivacyParameters as its JSON object: on save, in the admin's read-only view, in validation."""

    def default(self, o: object) -> Any:
        if isinstance(o, PrivacyParameters):
            return o.as_json()
        return super().default(o)


class PrivacyParametersField(models.JSONField):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["encoder"] = _ParametersEncoder
        super().__init__(*args, **kwargs)

    def deconstruct(self) -> tuple[str, str, list[Any], dict[str, Any]]:
        name, path, args, kwargs = super().deconstruct()
        del kwargs["encoder"]  # always this one: set by the field itself, not a choice a migration records
        return name, path, args, kwargs

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> Any:
        value = super().from_db_value(value, expression, connection)
        if value is None or isinstance(expression, KeyTransform):
            return value
        return PrivacyParameters.from_json(value)

    def to_python(self, value: Any) -> Any:
        """A fixture's or a form's JSON object, as the value."""
        if isinstance(value, dict):
            return PrivacyParameters.from_json(value)
        return value

    def value_to_string(self, obj: models.Model) -> Any:
        """dumpdata writes the JSON object (loaddata reads it back through to_python)."""
        value = self.value_from_object(obj)
        return value.as_json() if isinstance(value, PrivacyParameters) else value
