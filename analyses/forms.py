"""The dashboard's recipe form: builds Figure 4's JSON from a few inputs and maps errors back."""

from __future__ import annotations

from typing import Any

from django import forms

from analyses.models import Analysis
from devices.streams import field_kind
from privacy.mechanisms import MECHANISMS

# Dotted JSON paths of recipe errors, and the form field that shows each.
_FIELD_FOR_PATH = {
    "privacy.epsilon0": "epsilon0",
    "privacy.epsilon": "epsilon",
    "privacy.delta": "delta",
    "privacy.samplingRate": "sampling_rate",
    "privacy.mechanism": "mechanism",
    "cohorts": "cohorts",
    "query": "field",
}


class RecipeForm(forms.Form):
    field = forms.ChoiceField(label="Field to histogram")
    boundaries = forms.CharField(
        label="Bucket boundaries",
        help_text="Increasing numbers, comma-separated. k boundaries give OOV + k buckets.",
        initial="20, 30, 40, 50, 60, 70, 80",
    )
    cohorts = forms.MultipleChoiceField(
        label="Split by cohort",
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="Non-sensitive fields: one release per value, each meeting the minimum cohort.",
    )
    mechanism = forms.ChoiceField(label="Local randomizer", choices=[(m, m) for m in sorted(MECHANISMS)])
    epsilon0 = forms.FloatField(label="Local epsilon (ε₀)", initial=2.0)
    epsilon = forms.FloatField(label="Aggregate epsilon (ε)", initial=0.3)
    delta = forms.FloatField(label="Delta (δ)", initial=1e-6)
    sampling_rate = forms.FloatField(label="Sampling rate (q)", initial=1.0)

    def __init__(self, *args: Any, analysis: Analysis, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.analysis = analysis
        stream = analysis.query_class["stream"]
        numeric = [f for f in analysis.query_class["fields"] if field_kind(stream, f) == "number"]
        self.fields["field"].choices = [(f, f) for f in numeric]
        self.fields["cohorts"].choices = [(c, c) for c in analysis.query_class.get("cohortFields", [])]

    def clean_boundaries(self) -> list[float]:
        text = self.cleaned_data["boundaries"]
        try:
            return [float(part) for part in text.replace(";", ",").split(",") if part.strip()]
        except ValueError:
            raise forms.ValidationError("Every boundary must be a number.") from None

    def recipe(self) -> dict[str, Any]:
        """Figure 4's recipe (seed 000) for the cleaned input."""
        data = self.cleaned_data
        field = data["field"]
        return {
            "version": "1",
            "AnalysisIdentifier": self.analysis.identifier,
            # A recipe query, verified on every device, not SQL run against a database.
            "query": f"select {field} from {self.analysis.query_class['stream']}",  # noqa: S608
            "cohorts": data["cohorts"],
            "dataTypeContent": {field: {"dataType": "BucketedType", "boundaries": data["boundaries"]}},
            "privacy": {
                "mechanism": data["mechanism"],
                "epsilon0": data["epsilon0"],
                "epsilon": data["epsilon"],
                "delta": data["delta"],
                "samplingRate": data["sampling_rate"],
            },
        }

    def add_recipe_errors(self, errors: dict[str, list[str]]) -> None:
        for path, messages in errors.items():
            name = _FIELD_FOR_PATH.get(path)
            if name is None and path.endswith(".boundaries"):
                name = "boundaries"
            for message in messages:
                self.add_error(name, message)
