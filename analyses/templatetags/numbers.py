"""Number formatting for the big release tables.

Django's floatformat goes through Decimal and the locale machinery: on a round page of 16,384
buckets x 4 numbers that was most of the page's time. Releases are shown with one decimal and no
grouping, which is what this does, with plain string formatting.
"""

from __future__ import annotations

from django import template

register = template.Library()


@register.filter
def decimal1(value: float | None) -> str:
    """``value`` with one decimal ("12.3"), or "" for a missing value."""
    if value is None or value == "":
        return ""
    return f"{float(value):.1f}"
