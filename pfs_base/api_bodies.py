"""Request bodies that refuse what they do not declare.

DRF ignores a key a serializer does not name; for a privacy product that turns a typo into a
silent change. A ``StrictSerializer`` answers 400 naming each unknown key, and the known key it
most resembles when one is close (privacy.schema_keys, the same rule as recipes and specs).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rest_framework import serializers

from privacy.schema_keys import unknown_keys


def refuse_unknown_keys(data: Any, known: Any) -> None:
    """Raise a 400 (DRF ValidationError) naming every key of ``data`` that is not ``known``."""
    if isinstance(data, Mapping):
        unknown = unknown_keys(data, tuple(known))
        if unknown:
            raise serializers.ValidationError({key: [message] for key, message in unknown.items()})


class StrictSerializer(serializers.Serializer):
    def to_internal_value(self, data: Any) -> Any:
        refuse_unknown_keys(data, self.fields)
        return super().to_internal_value(data)
