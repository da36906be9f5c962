"""The dashboard's recipe form: builds Figure 4's JSON from a few inputs and maps errors back."""

from __future__ import annotations

import json
from typing import Any

from django import forms

from analyses.models import Analysis, Recipe
from devices.streams import field_kind
from privacy.mechanisms import MECHANISMS

# Dotted JSON paths of recipe errors, and the form field that shows each.
_FIELD_FOR_PATH = {
    "privacy.epsilon0": "epsilon0",
    "privacy.epsilon": "epsilon",
    "privacy.delta": "delta",
    "privacy.samplingRate": "sampling_rate",
    "privacy.mechanism": "mechanism",
    "privacy.noise": "noise",
    "privacy.minCohort": "min_cohort",
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
    noise = forms.ChoiceField(
        label="Noise",
        choices=Recipe.Noise.choices,
        initial=Recipe.Noise.CLIENT,
        required=False,  # an API-style post without it means client noise, as in the recipe format
        help_text="Aggregator noise needs the field's policy to allow it; devices then use no local randomizer.",
    )
    mechanism = forms.ChoiceField(
        label="Local randomizer", choices=[(m, m) for m in sorted(MECHANISMS)], help_text="Client noise only."
    )
    epsilon0 = forms.FloatField(label="Local epsilon (ε₀)", initial=2.0, required=False, help_text="Client noise only.")
    epsilon = forms.FloatField(label="Aggregate epsilon (ε)", initial=0.3)
    delta = forms.FloatField(label="Delta (δ)", initial=1e-6)
    sampling_rate = forms.FloatField(label="Sampling rate (q)", initial=1.0)
    min_cohort = forms.IntegerField(
        label="Minimum cohort",
        required=False,
        min_value=1,
        help_text="Optional. Client noise: raises the computed minimum, never lowers it. "
        "Aggregator noise: defaults to 1,000.",
    )

    def __init__(self, *args: Any, analysis: Analysis, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.analysis = analysis
        stream = analysis.query_class["stream"]
        numeric = [f for f in analysis.query_class["fields"] if field_kind(stream, f) == "number"]
        self.fields["field"].choices = [(f, f) for f in numeric]
        self.fields["cohorts"].choices = [(c, c) for c in analysis.query_class.get("cohortFields", [])]

    def clean_noise(self) -> str:
        return self.cleaned_data["noise"] or Recipe.Noise.CLIENT

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
            "privacy": self._privacy(data),
        }

    @staticmethod
    def _privacy(data: dict[str, Any]) -> dict[str, Any]:
        privacy: dict[str, Any] = {"noise": data["noise"]}
        if data["noise"] == Recipe.Noise.CLIENT:
            privacy.update(mechanism=data["mechanism"], epsilon0=data["epsilon0"])
        privacy.update(epsilon=data["epsilon"], delta=data["delta"], samplingRate=data["sampling_rate"])
        if data.get("min_cohort") is not None:
            privacy["minCohort"] = data["min_cohort"]
        return privacy

    def add_recipe_errors(self, errors: dict[str, list[str]]) -> None:
        for path, messages in errors.items():
            name = _FIELD_FOR_PATH.get(path)
            if name is None and path.endswith(".boundaries"):
                name = "boundaries"
            for message in messages:
                self.add_error(name, message)


class AdaptiveJsonForm(forms.Form):
    """One JSON document of an adaptive run: the spec that starts it, or the next round's recipe.

    Errors of the services (dotted JSON paths) all show next to the textarea, each with its path.
    """

    document = forms.CharField(widget=forms.Textarea(attrs={"rows": 24, "cols": 80, "spellcheck": "false"}))

    def __init__(self, *args: Any, label: str, help_text: str = "", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["document"].label = label
        self.fields["document"].help_text = help_text

    def clean_document(self) -> dict[str, Any]:
        text = self.cleaned_data["document"]
        try:
            value = json.loads(text)
        except json.JSONDecodeError as error:
            raise forms.ValidationError(
                f"Not valid JSON: {error.msg} (line {error.lineno}, column {error.colno})."
            ) from None
        if not isinstance(value, dict):
            raise forms.ValidationError("Must be a JSON object.")
        return value

    def add_problems(self, errors: dict[str, list[str]]) -> None:
        for path, messages in errors.items():
            for message in messages:
                self.add_error("document", f"{path}: {message}")
