"""Query-class verification, run on the device before any data is read.

A query is a restricted SELECT of named fields from one stream, as in Figure 4 of seed 000:
``select age, ngrams from KeyboardNGrams``. Anything else — another statement, a clause, a
function, a field or stream outside the approved class — is refused with a reason.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

_IDENTIFIER = r"[A-Za-z_][A-Za-z0-9_]*"
_SELECT = re.compile(
    rf"^\s*select\s+(?P<fields>{_IDENTIFIER}(?:\s*,\s*{_IDENTIFIER})*)\s+from\s+(?P<stream>{_IDENTIFIER})\s*;?\s*$",
    re.IGNORECASE,
)


class QueryRefused(ValueError):
    """The query is not in the approved query class; the message says why."""


@dataclass(frozen=True)
class Query:
    fields: tuple[str, ...]
    stream: str


def parse_query(text: str) -> Query:
    match = _SELECT.match(text or "")
    if match is None:
        raise QueryRefused("only 'select <field>, ... from <stream>' is allowed")
    fields = tuple(f.strip() for f in match["fields"].split(","))
    if len(set(fields)) != len(fields):
        raise QueryRefused("a field is selected twice")
    return Query(fields=fields, stream=match["stream"])


def verify_query(text: str, cohorts: Iterable[str], query_class: dict) -> Query:
    """Parse ``text`` and check it, and its cohort fields, against an approved query class."""
    query = parse_query(text)
    if query.stream != query_class["stream"]:
        raise QueryRefused(f"stream {query.stream!r} is not in the approved query class")
    outside = [f for f in query.fields if f not in query_class["fields"]]
    if outside:
        raise QueryRefused(f"field(s) {', '.join(outside)} are not in the approved query class")
    unapproved = [c for c in cohorts if c not in query_class.get("cohortFields", [])]
    if unapproved:
        raise QueryRefused(f"cohort field(s) {', '.join(unapproved)} are not approved as non-sensitive")
    return query
