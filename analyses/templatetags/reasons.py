"""Why a device did not answer, or why an aggregator rejected a report, said in words on the pages.

The keys (pfs_device.budget.Decision's labels, aggregation.reports' reasons) stay the API's and the
downloads'; a page says what each means. An unknown key is shown as it is (a newer worker's)."""

from __future__ import annotations

from django import template

register = template.Library()

REASON_WORDS = {
    # A device's decision (pfs_device.budget.Decision), in the order it decides.
    "not_sampled": "not sampled (left out by the sampling rate)",
    "query_class": "query outside the approved query class",
    "analysis_budget": "analysis budget spent (check 1)",
    "field_budget": "a field's budget spent (check 2)",
    "min_cohort": "minimum cohort below what the device requires (check 3)",
    "policy_snapshot": "the device holds another policy snapshot",
    # An aggregator's rejection of an uploaded report (aggregation.reports).
    "unknown_collection": "no such collection",
    "collection_closed": "arrived after the collection closed",
    "token_invalid": "token invalid (not the issuer's, or for another report)",
    "token_reused": "token used before",
    "share_unopened": "its share could not be opened",
    "share_malformed": "its share is malformed",
    "proof_invalid": "its validity proof failed",
    "report_malformed": "not a report",
    "report_too_large": "larger than any honest report",
    "helper_disagreed": "the helper answered outside the protocol",
}


@register.filter
def reason(key: object) -> str:
    """``{{ key|reason }}``: "not_sampled" → "not sampled (left out by the sampling rate)"."""
    return REASON_WORDS.get(str(key), str(key))


@register.simple_tag
def reason_words() -> dict[str, str]:
    """The table itself, for a page's script that writes reasons as they arrive (static/js/round.js)."""
    return REASON_WORDS
