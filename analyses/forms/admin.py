"""The privacy officer's admin forms: field-level messages in words (rather than the database's
"Constraint ... is violated"), and the query class as a stream and its fields, not raw JSON."""

from __future__ import annotations

import json
from typing import Any

from django import forms

from analyses.models import Analysis, FieldPolicy
from analyses.rules.enforced_policy import delta_total_floor, delta_total_too_small
from analyses.services.approvals import REASON_REQUIRED
from pfs_device.streams import STREAMS
from privacy.limits import MAX_BUCKETS

_KIND_WORDS = {"number": "a number", "category": "a category", "text": "typed text"}


def _field_choices() -> list[tuple[str, str]]:
    """Every field of every stream, once, with what it holds and the streams that have it."""
    kinds: dict[str, str] = {}
    streams: dict[str, list[str]] = {}
    for stream, fields in STREAMS.items():
        for name, kind in fields.items():
            kinds.setdefault(name, kind)
            streams.setdefault(name, []).append(stream)
    return [
        (name, f"{name} ({_KIND_WORDS.get(kinds[name], kinds[name])}; in {', '.join(streams[name])})") for name in kinds
    ]


def _positive(value: float | None, what: str) -> float | None:
    if value is not None and value <= 0:
        raise forms.ValidationError(f"Must be greater than 0: {what}.")
    return value


class AnalysisAdminForm(forms.ModelForm):
    """The analysis's columns, with its query class (a JSON column) as three fields."""

    stream = forms.ChoiceField(
        label="Data stream", choices=[(s, s) for s in STREAMS], help_text="The stream on devices that queries read."
    )
    query_fields = forms.MultipleChoiceField(
        label="Fields queries may read",
        widget=forms.CheckboxSelectMultiple,
        choices=_field_choices,
        help_text="Each must be a field of the stream; give each a field policy below.",
    )
    cohort_fields = forms.MultipleChoiceField(
        label="Cohort fields",
        widget=forms.CheckboxSelectMultiple,
        choices=_field_choices,
        required=False,
        help_text="Non-sensitive fields a release may be split by (one release per value).",
    )

    class Meta:
        model = Analysis
        # Not query_class: it is the three fields above. Status and approval are the approval's.
        fields = [
            "identifier",
            "title",
            "fleet",
            "owner",
            "epsilon_allowed",
            "reports_allowed",
            "delta",
            "delta_total",
            "accountant",
            "min_cohort_floor",
            "max_buckets",
        ]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # For static/js/admin_query_class.js: which fields each stream has.
        self.fields["stream"].widget.attrs["data-stream-fields"] = json.dumps(STREAMS)
        query_class = self.instance.query_class if self.instance.pk else None
        if isinstance(query_class, dict):
            self.initial.setdefault("stream", query_class.get("stream"))
            self.initial.setdefault("query_fields", query_class.get("fields", []))
            self.initial.setdefault("cohort_fields", query_class.get("cohortFields", []))

    def clean_epsilon_allowed(self) -> float | None:
        return _positive(self.cleaned_data.get("epsilon_allowed"), "a budget of ε 0 allows no round")

    def clean_reports_allowed(self) -> int | None:
        reports = self.cleaned_data.get("reports_allowed")
        if reports is not None and reports < 1:
            raise forms.ValidationError("Must be at least 1: each device must be allowed at least one report.")
        return reports

    def clean_delta(self) -> float | None:
        delta = self.cleaned_data.get("delta")
        if delta is not None and not 0 < delta < 1:
            raise forms.ValidationError(
                "Must lie strictly between 0 and 1, and well below one over the fleet's size (1e-6 for 100,000 devices)."
            )
        return delta

    def clean_delta_total(self) -> float | None:
        total = self.cleaned_data.get("delta_total")
        if total is not None and not 0 < total < 1:
            raise forms.ValidationError("Must lie strictly between 0 and 1, or be left empty for no cap.")
        return total

    def clean_min_cohort_floor(self) -> int | None:
        floor = self.cleaned_data.get("min_cohort_floor")
        if floor is not None and floor < 1:
            raise forms.ValidationError("Must be at least 1, or left empty for what devices compute.")
        return floor

    def clean_max_buckets(self) -> int | None:
        buckets = self.cleaned_data.get("max_buckets")
        if buckets is not None and not 2 <= buckets <= MAX_BUCKETS:
            raise forms.ValidationError(f"Must be between 2 and {MAX_BUCKETS:,}, or left empty for {MAX_BUCKETS:,}.")
        return buckets

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        floor = delta_total_floor(data.get("delta"), data.get("accountant"))
        if data.get("delta_total") is not None and floor is not None and data["delta_total"] < floor:
            self.add_error("delta_total", delta_total_too_small(floor))
        stream = data.get("stream")
        if stream in STREAMS:
            known = STREAMS[stream]
            for name in ("query_fields", "cohort_fields"):
                foreign = [f for f in data.get(name, []) if f not in known]
                if foreign:
                    self.add_error(
                        name,
                        f"Not in the {stream} stream: {', '.join(foreign)}. Its fields are {', '.join(known)}.",
                    )
        return data

    def _post_clean(self) -> None:
        # The query class is set before the model's own validation runs on the instance.
        if not self._errors:
            self.instance.query_class = self._query_class()
        super()._post_clean()

    def _query_class(self) -> dict[str, Any]:
        """The fields in the order they had (a new one last), so that an unchanged query class
        reads as unchanged in the approval's diff."""
        before = self.instance.query_class if isinstance(self.instance.query_class, dict) else {}

        def ordered(chosen: list[str], previous: list[str]) -> list[str]:
            return [f for f in previous if f in chosen] + [f for f in chosen if f not in previous]

        return {
            "stream": self.cleaned_data["stream"],
            "fields": ordered(self.cleaned_data["query_fields"], before.get("fields", [])),
            "cohortFields": ordered(self.cleaned_data.get("cohort_fields", []), before.get("cohortFields", [])),
        }


class FieldPolicyAdminForm(forms.ModelForm):
    class Meta:
        model = FieldPolicy
        fields = ["field", "local_epsilon", "epsilon", "reports", "aggregator_noise", "delta_total"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # The tabular inline names each column in its header, not in a <label>: a screen reader
        # needs each input's own name, so each carries its column's label.
        for field in self.fields.values():
            field.widget.attrs.setdefault("aria-label", str(field.label))

    def clean_local_epsilon(self) -> float | None:
        return _positive(self.cleaned_data.get("local_epsilon"), "devices need some local ε to answer at all")

    def clean_epsilon(self) -> float | None:
        return _positive(self.cleaned_data.get("epsilon"), "a field budget of ε 0 allows no round on it")

    def clean_reports(self) -> int | None:
        reports = self.cleaned_data.get("reports")
        if reports is not None and reports < 1:
            raise forms.ValidationError("Must be at least 1: each device must be allowed at least one report.")
        return reports

    def clean_delta_total(self) -> float | None:
        total = self.cleaned_data.get("delta_total")
        if total is not None and not 0 < total < 1:
            raise forms.ValidationError("Must lie strictly between 0 and 1, or be left empty for no cap.")
        return total


class FieldPolicyFormSet(forms.BaseInlineFormSet):
    """Each field policy names a field queries may read (the query class the form above sets)."""

    def add_fields(self, form: forms.Form, index: int | None) -> None:
        super().add_fields(form, index)
        if "DELETE" in form.fields:  # the formset's own column, named like the others (FieldPolicyAdminForm)
            form.fields["DELETE"].widget.attrs.setdefault("aria-label", "Delete this field policy")

    def clean(self) -> None:
        super().clean()
        query_class = self.instance.query_class if isinstance(self.instance.query_class, dict) else {}
        readable = query_class.get("fields", [])
        for form in self.forms:
            data = getattr(form, "cleaned_data", None) or {}
            name = data.get("field")
            if data.get("DELETE") or not name or not readable or name in readable:
                continue
            form.add_error(
                "field",
                f"Not a field queries may read ({', '.join(readable)}): tick it above, or delete this policy.",
            )


class PolicyRejectForm(forms.Form):
    """Why the officer rejects the pending edits: required, recorded and shown in the history."""

    reason = forms.CharField(
        label="Reason for rejecting",
        widget=forms.Textarea(attrs={"rows": 3}),
        max_length=2000,
        error_messages={"required": REASON_REQUIRED},
        help_text="Recorded in the analysis's history. Rejecting discards the pending edits; devices keep "
        "the policy they enforce.",
    )
