"""The API's JSON parser: DRF's, refusing JSON nested deeper than any recipe or spec needs.

Python's json module recurses once per level: a 1 MiB body of `[[[[...` exhausts the stack while
parsing (a RecursionError, which DRF's parser lets through as a 500), and a body just under that
limit would do so later, in whatever walks the value. Both are a 400 parse_error here.
"""

from __future__ import annotations

from typing import Any

from rest_framework import parsers
from rest_framework.exceptions import ParseError

# Recipes and adaptive specs nest about 5 levels; a joint histogram's recipe a few more.
MAX_DEPTH = 32


class JSONParser(parsers.JSONParser):
    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError(f"JSON parse error - nested deeper than {MAX_DEPTH} levels.") from None
        if nesting_depth(data) > MAX_DEPTH:
            raise ParseError(f"JSON parse error - nested deeper than {MAX_DEPTH} levels.")
        return data


def nesting_depth(value: Any) -> int:
    """Levels of arrays and objects in a parsed JSON value (a scalar is 0), without recursing."""
    deepest = 0
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        deepest = max(deepest, depth)
        if depth > MAX_DEPTH:
            break  # deep enough to refuse: no need to walk the rest
        stack.extend((child, depth + 1) for child in children)
    return deepest
