"""A privacy figure as the editor and its pages print it: 0.5, 0.000001, 3 (never 0.500000 or 3.0),
the way the editor's script prints the same numbers (JavaScript's String(x) down to 1e-7)."""

from __future__ import annotations

from decimal import Decimal

from django import template

register = template.Library()


@register.filter
def figure(value: float | int | None) -> str:
    """Up to 9 significant digits, without trailing zeros; fixed notation from 1e-7 up; "—" for None."""
    if value is None or value == "":
        return "—"
    try:
        number = float(value)
    except (TypeError, ValueError):
        return str(value)
    text = f"{number:.9g}"
    if "e" in text and 1e-7 <= abs(number) < 1e21:
        text = format(Decimal(text), "f")
    return text
