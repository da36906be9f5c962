"""Number formatting for the pages: one format per quantity, thousands grouped everywhere.

Django's floatformat goes through Decimal and the locale machinery: on a round page of 16,384
buckets x 4 numbers that was most of the page's time. These filters use plain string formatting.
Counts (devices, reports, cohorts) are whole numbers with separators ("100,000"); estimates and
their intervals have one decimal ("12,345.6").
"""

from __future__ import annotations

from django import template

register = template.Library()


def grouped(value: object, decimals: int = 0) -> str:
    """``value`` with thousands separators and ``decimals`` decimals; "" for a missing value, and a
    value that is not a number as it is (a label, say)."""
    if value is None or value == "":
        return ""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return str(value)
    if decimals == 0 and number.is_integer():
        return f"{int(number):,}"
    return f"{number:,.{decimals}f}"


@register.filter
def decimal1(value: float | None) -> str:
    """An estimate: ``value`` with one decimal and separators ("12,345.6"), or "" when missing."""
    return grouped(value, 1)


@register.filter
def count(value: object) -> str:
    """A count of devices, reports or rounds: "100,000"; a fractional expectation is rounded."""
    if value is None or value == "":
        return ""
    try:
        return f"{round(float(value)):,}"
    except (TypeError, ValueError):
        return str(value)


@register.filter
def counted(value: object, noun: str) -> str:
    """A count and its noun, in the plural unless it is one: ``{{ n|counted:"report" }}`` gives
    "1 report", "2 reports", "100,000 reports" (never "1 reports")."""
    figure = count(value)
    return f"{figure} {noun}" if figure == "1" else f"{figure} {noun}s"
