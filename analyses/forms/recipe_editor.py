"""The dashboard's recipe form: builds Figure 4's JSON from a few inputs and maps errors back."""

from __future__ import annotations

import json
import re
from functools import cached_property
from typing import Any

from django import forms

from analyses import calculators
from analyses.models import Analysis, Recipe
from devices.synthetic import TOKENS
from pfs_base.errors import ValidationFailed
from pfs_device.streams import field_kind
from privacy.aggregator_noise import GAUSSIAN, LAPLACE
from privacy.enforced_cohort import BOUNDS, CURVE_LABELS, CURVE_METHODS
from privacy.mechanisms import MECHANISMS, mechanism_get, replacement_epsilon0
from privacy.ngrams import PrefixTreeType
from privacy.parameters import PRIVACY_KEYS

# Dotted JSON paths of recipe errors, and the form field that shows each. The editor's script
# (static/js/recipe_form.js) reads this table from the page to place its messages.
_FIELD_FOR_PATH = {
    "privacy.epsilon0": "epsilon0",
    "privacy.epsilon": "epsilon",
    "privacy.delta": "delta",
    "privacy.samplingRate": "sampling_rate",
    "privacy.mechanism": "mechanism",
    "privacy.noise": "noise",
    "privacy.noiseDistribution": "noise_distribution",
    "privacy.minCohort": "min_cohort",
    "cohorts": "cohorts",
    "query": "field",
    "dataTypeContent": "boundaries",  # e.g. more buckets than the policy allows: the boundaries make them
    "confirmSmallCohorts": "confirm_small_cohorts",
    # An accuracy target's problems (analyses.services.accuracy.target_parse), under the editor's target fields.
    "target": "target_half_width",
    "target.halfWidth": "target_half_width",
    "target.relativeError": "target_relative_error",
}
# Which side of the editor is the recipe: the form's fields, or the JSON textarea.
SOURCE_FORM = "form"
SOURCE_JSON = "json"
# The table under the curve of aggregate epsilon against n, readable without JavaScript.
# Two curves: the closed form, and the bound devices enforce for the recipe's randomizer (check 3).
_CLOSED_FORM = "closed-form"
_CURVE_ROWS = 7  # n = 10^2, 10^3, ..., 10^8


def form_field_for(path: str) -> str | None:
    """The form field that shows errors at a recipe key, or None when no field does."""
    name = _FIELD_FOR_PATH.get(path)
    if name is None and path.endswith(".boundaries"):
        name = "boundaries"
    return name


class RecipeForm(forms.Form):
    field = forms.ChoiceField(label="Field to histogram")
    boundaries = forms.CharField(
        label="Bucket boundaries",
        help_text="Increasing numbers, comma-separated. k boundaries make k + 1 buckets: one below the first "
        "boundary (values below it, or missing), then one from each boundary to the next, the last open-ended.",
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
    noise_distribution = forms.ChoiceField(
        label="Aggregators' noise",
        choices=[
            (GAUSSIAN, "Discrete Gaussian: (ε, δ)-DP"),
            (LAPLACE, "Discrete Laplace: pure ε-DP (δ = 0)"),
        ],
        initial=GAUSSIAN,
        required=False,  # a post without it (the form as it was) means the Gaussian, as in the recipe format
        help_text="Aggregator noise only. The discrete Laplace spends no δ (δ below is then not used).",
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
    # The JSON side: Figure 4's recipe, run as written when ``source`` says so. Without JavaScript
    # the analyst picks the side; the editor's script keeps both in sync and picks it itself.
    # Not part of the recipe: the analyst's go-ahead for a split expected to leave cohorts below
    # the minimum cohort (analyses.services.cohorts), asked for only when a start was refused so.
    # The same go-ahead covers a recipe whose expected noise exceeds what most buckets can hold
    # (analyses.services.accuracy): its devices would spend for counts not told from zero.
    confirm_small_cohorts = forms.BooleanField(
        label="Start anyway: I have read the warning above (batches expected below the minimum cohort, or noise "
        "larger than most buckets' counts); the devices asked will still spend budget",
        required=False,
    )
    # Accuracy first: "Propose parameters" fills ε₀, ε and the sampling rate with the cheapest that
    # meet one of these (analyses.services.accuracy.recipe_propose). Not part of the recipe.
    target_half_width = forms.FloatField(
        label="Target: ± devices per bucket at 95%",
        required=False,
        min_value=0,
        help_text="The error you can accept on a typical bucket's count.",
    )
    target_relative_error = forms.FloatField(
        label="or target: relative error on the largest bucket",
        required=False,
        min_value=0,
        help_text="E.g. 0.1 for ±10% at 95%, the largest bucket holding at least the fleet's reports / buckets.",
    )
    source = forms.ChoiceField(
        label="Run from",
        choices=[(SOURCE_FORM, "the form fields"), (SOURCE_JSON, "the recipe JSON")],
        initial=SOURCE_FORM,
        required=False,  # a post without it (the form as it always was) runs the fields
        widget=forms.RadioSelect,
    )
    recipe_json = forms.CharField(
        label="Recipe JSON",
        required=False,
        widget=forms.Textarea(attrs={"rows": 20, "cols": 60, "spellcheck": "false"}),
        help_text="The recipe devices receive, for the values above (format: docs/formats.md). Keys the form has no field "
        "for (recipeIdentifier, a PrefixTree, …) can be written here.",
    )

    # The fields that make up the form side of the editor, in the order they are shown.
    FORM_SIDE = (
        "field",
        "boundaries",
        "cohorts",
        PRIVACY_KEYS[0],  # noise
        "noise_distribution",
        *PRIVACY_KEYS[1:],
    )
    TARGET = ("target_half_width", "target_relative_error")

    # The privacy fields, each linked to its entry in the parameter guide (templates/analyses/guide.html).
    GUIDED = frozenset(PRIVACY_KEYS)

    def __init__(self, *args: Any, analysis: Analysis, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.analysis = analysis
        self._fields_recipe: dict[str, Any] | None = None
        self._fields_shown: dict[str, Any] | None = None
        query_class = analysis.enforced.query_class  # what devices accept, not an unapproved edit
        stream = query_class["stream"]
        numeric = [f for f in query_class["fields"] if field_kind(stream, f) == "number"]
        # A histogram needs a number field: an analysis of text fields only gets no histogram editor.
        self.numeric_fields = numeric
        self.text_fields = [f for f in query_class["fields"] if field_kind(stream, f) == "text"]
        self.fields["field"].choices = [(f, f) for f in numeric]
        self.fields["field"].initial = numeric[0] if numeric else None
        self.fields["mechanism"].initial = "asymmetric_ohe"  # the recipe format's default
        self.fields["cohorts"].choices = [(c, c) for c in query_class.get("cohortFields", [])]
        if not self.is_bound and self.initial.get("recipe_json"):
            # A recipe given as JSON (a drill-down's refinement) runs as written unless the analyst
            # picks the fields: they may not hold all of it.
            self.initial = {**self.initial, "source": SOURCE_JSON}

    @property
    def json_is_source(self) -> bool:
        return self.is_bound and self.data.get("source") == SOURCE_JSON

    @cached_property
    def text_example(self) -> str:
        """A recipe over the first text field (one level of a prefix tree over common words), to
        copy into the JSON box of an analysis with no number field: the format, filled in."""
        if not self.text_fields:
            return ""
        field = self.text_fields[0]
        enforced = self.analysis.enforced
        policy = enforced.field(field)
        recipe = {
            "version": "1",
            "AnalysisIdentifier": self.analysis.identifier,
            "query": f"select {field} from {enforced.query_class['stream']}",  # noqa: S608 (a recipe query)
            "cohorts": [],
            "dataTypeContent": {field: PrefixTreeType(tokens=tuple(TOKENS[:12]), unit="word").to_json()},
            "privacy": {
                "mechanism": "asymmetric_ohe",
                "epsilon0": min(4.0, policy.local_epsilon) if policy else 4.0,
                "epsilon": min(1.0, policy.epsilon if policy else 1.0, enforced.epsilon_allowed),
                "delta": min(1e-6, enforced.delta),
            },
        }
        return _dumps(recipe)

    def form_side(self) -> list[forms.BoundField]:
        return [self[name] for name in self.FORM_SIDE]

    def clean_noise(self) -> str:
        return self.cleaned_data["noise"] or Recipe.Noise.CLIENT

    def clean_noise_distribution(self) -> str:
        return self.cleaned_data["noise_distribution"] or GAUSSIAN

    def target_fields(self) -> list[forms.BoundField]:
        return [self[name] for name in self.TARGET]

    def target(self) -> dict[str, float]:
        """The accuracy target the analyst gave, as the API takes it (recipe_propose judges it)."""
        given = {
            key: self.cleaned_data.get(name)
            for key, name in (("halfWidth", "target_half_width"), ("relativeError", "target_relative_error"))
        }
        return {key: value for key, value in given.items() if value is not None}

    def clean_recipe_json(self) -> Any:
        text = self.cleaned_data["recipe_json"]
        if not self.json_is_source:
            return text
        return json_object(text)

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if self.json_is_source:
            # The fields as posted (the editor's script keeps them in sync with the JSON): an error at
            # a key the field shows as the JSON has it goes under the field (add_recipe_errors).
            if not any(name in self.errors for name in self.FORM_SIDE):
                self._fields_shown = self._recipe_from_fields(data)
            # The JSON is the recipe: the fields' own complaints do not count, recipe_validate judges it.
            for name in self.FORM_SIDE:
                self.errors.pop(name, None)
        elif not any(name in self.errors for name in self.FORM_SIDE):
            # Kept now: errors the recipe gets later (add_recipe_errors) take fields out of cleaned_data.
            self._fields_recipe = self._recipe_from_fields(data)
        return data

    def clean_boundaries(self) -> list[float]:
        text = self.cleaned_data["boundaries"]
        try:
            return [float(part) for part in text.replace(";", ",").split(",") if part.strip()]
        except ValueError:
            raise forms.ValidationError("Every boundary must be a number.") from None

    def recipe(self) -> dict[str, Any]:
        """The recipe to run: the JSON as written when it is the source, else Figure 4's recipe for the fields."""
        if self.json_is_source:
            return self.cleaned_data["recipe_json"]
        return self._recipe_from_fields(self.cleaned_data)

    def _recipe_from_fields(self, data: dict[str, Any]) -> dict[str, Any]:
        """Figure 4's recipe (seed 000) for the cleaned fields: the one form-to-JSON mapping."""
        field = data["field"]
        return {
            "version": "1",
            "AnalysisIdentifier": self.analysis.identifier,
            # A recipe query, verified on every device, not SQL run against a database.
            "query": f"select {field} from {self.analysis.enforced.query_class['stream']}",  # noqa: S608
            "cohorts": data["cohorts"],
            "dataTypeContent": {field: {"dataType": "BucketedType", "boundaries": data["boundaries"]}},
            "privacy": self._privacy(data),
        }

    @staticmethod
    def _privacy(data: dict[str, Any]) -> dict[str, Any]:
        privacy: dict[str, Any] = {"noise": data["noise"]}
        if data["noise"] == Recipe.Noise.CLIENT:
            privacy.update(mechanism=data["mechanism"], epsilon0=data["epsilon0"])
        if data["noise"] == Recipe.Noise.AGGREGATOR and data.get("noise_distribution") == LAPLACE:
            # Pure epsilon-DP: the recipe names the distribution and carries no delta (it is 0).
            privacy.update(noiseDistribution=LAPLACE, epsilon=data["epsilon"], samplingRate=data["sampling_rate"])
        else:
            privacy.update(epsilon=data["epsilon"], delta=data["delta"], samplingRate=data["sampling_rate"])
        if data.get("min_cohort") is not None:
            privacy["minCohort"] = data["min_cohort"]
        return privacy

    def add_recipe_errors(self, errors: dict[str, list[str]]) -> None:
        for path, messages in errors.items():
            for message in messages:
                if path == "confirmSmallCohorts":
                    self.add_error("confirm_small_cohorts", message)  # a go-ahead to give, not a key to fix
                elif path.startswith("budget."):
                    self.add_error(None, message)  # the policy's, not the recipe's: no field or key to fix
                elif path == "target" or path.startswith("target."):
                    self.add_error(form_field_for(path), message)  # the editor's target, not the recipe
                elif self.json_is_source and not self._field_shows(path):
                    # The fields do not show what the JSON says there: the message goes with the JSON, by key.
                    self.add_error("recipe_json", f"{path}: {message}")
                else:
                    self.add_error(form_field_for(path), message)

    def _field_shows(self, path: str) -> bool:
        """Whether a form field shows the JSON's value at ``path`` (so its error can go under it)."""
        if self._fields_shown is None or form_field_for(path) is None:
            return False
        posted = self.cleaned_data.get("recipe_json")
        return json_at(posted, path) == json_at(self._fields_shown, path) != MISSING

    @property
    def recipe_paths(self) -> dict[str, str]:
        """Form field -> recipe key, for the editor's script (the JSON side of the same mapping)."""
        return {name: path for path, name in _FIELD_FOR_PATH.items()}

    def with_proposal(self, recipe: dict[str, Any]) -> RecipeForm:
        """This form as posted, its privacy fields and JSON rewritten to ``recipe`` (a proposal's): what the
        editor shows after "Propose parameters", to be run or changed (the fields are the source)."""
        privacy = recipe["privacy"]
        data = self.data.copy()  # a QueryDict: item assignment replaces a value (update would add one)
        values = {
            "noise": privacy["noise"],
            "noise_distribution": privacy.get("noiseDistribution", GAUSSIAN),
            "epsilon": privacy["epsilon"],
            "sampling_rate": privacy["samplingRate"],
            "min_cohort": "",  # the devices' own, for the parameters proposed
            "source": SOURCE_FORM,
        }
        values.update(
            (name, privacy[key])
            for name, key in (("mechanism", "mechanism"), ("epsilon0", "epsilon0"), ("delta", "delta"))
            if key in privacy
        )
        for name, value in values.items():
            data[name] = str(value)
        proposed = RecipeForm(data, analysis=self.analysis)
        proposed.is_valid()
        return proposed

    @cached_property
    def json_text(self) -> str:
        """What the Recipe JSON textarea shows: the JSON posted when it was run, else the fields' recipe."""
        if not self.is_bound:
            if self.initial.get("recipe_json"):
                return self.initial["recipe_json"]
            initial = self._initial_recipe()
            return _dumps(initial) if initial is not None else ""
        if self._fields_recipe is not None:
            return _dumps(self._fields_recipe)
        return self.data.get("recipe_json", "")

    def _initial_recipe(self) -> dict[str, Any] | None:
        """The fields' recipe for their initial values; None when they do not make one."""
        values = {name: self.get_initial_for_field(self.fields[name], name) for name in self.FORM_SIDE}
        probe = RecipeForm(values, analysis=self.analysis)
        return probe._recipe_from_fields(probe.cleaned_data) if probe.is_valid() else None

    @cached_property
    def curve_table(self) -> dict[str, Any] | None:
        """Aggregate epsilon at n = 10^2 ... 10^8 by the closed form and by the bound devices enforce
        for the recipe's randomizer (privacy.enforced_cohort.BOUNDS; for symmetric RAPPOR, whose bound has
        no curve, FMT 2022 at its replacement epsilon0, which lies above it: CURVE_METHODS); None without figures.

        The table alternative of the editor's curve, there without JavaScript too.
        """
        try:
            content = json.loads(self.json_text)
            privacy = content["privacy"]
            if privacy.get("noise", Recipe.Noise.CLIENT) != Recipe.Noise.CLIENT:
                return None
            enforced_method = BOUNDS[privacy["mechanism"]][0]
            curve_method = CURVE_METHODS[enforced_method]
            # Charged in the replacement model, as check 3 does.
            epsilon0 = replacement_epsilon0(mechanism_get(privacy["mechanism"], float(privacy["epsilon0"])))
            curves = [
                calculators.privacy_curve(epsilon0=epsilon0, delta=privacy["delta"], method=method, points=_CURVE_ROWS)
                for method in (_CLOSED_FORM, curve_method)
            ]
        except (AttributeError, KeyError, TypeError, ValueError, ValidationFailed):
            return None
        rows = [
            {
                "n": closed["n"],
                "n_label": f"{closed['n']:,}",
                "closed_form": closed["epsilon"],
                "enforced": enforced["epsilon"],
            }
            for closed, enforced in zip(curves[0]["points"], curves[1]["points"], strict=True)
        ]
        return {
            "epsilon0": curves[0]["epsilon0"],
            "delta": curves[0]["delta"],
            "enforced_label": CURVE_LABELS[enforced_method],
            "rows": rows,
        }


MISSING = object()


def json_at(document: Any, path: str) -> Any:
    """The value at a dotted path of a JSON document, or MISSING."""
    for key in path.split("."):
        if not isinstance(document, dict) or key not in document:
            return MISSING
        document = document[key]
    return document


def json_object(text: str) -> dict[str, Any]:
    """The JSON object in ``text``; a ValidationError saying where the JSON breaks, or that it is no object."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise forms.ValidationError(
            f"Not valid JSON: {error.msg} (line {error.lineno}, column {error.colno})."
        ) from None
    if not isinstance(value, dict):
        raise forms.ValidationError("Must be a JSON object.")
    return value


# An array of numbers or strings as json.dumps(indent=2) spreads it, one item a line. JSON strings
# hold no raw newline, so ",\n" only ever separates items.
_SPREAD_ARRAY = re.compile(r"\[\n\s+([^\[\]{}]*?)\n\s*\]")


def _dumps(recipe: dict[str, Any]) -> str:
    """Indented JSON with short arrays on one line (static/js/recipe_form.js writes it the same way)."""
    text = json.dumps(recipe, indent=2, ensure_ascii=False)
    return _SPREAD_ARRAY.sub(lambda match: "[" + re.sub(r",\n\s*", ", ", match.group(1)) + "]", text)


def recipe_problem_said(path: str, message: str) -> str:
    """A recipe problem in words for a page, its key named as the editor labels it ("Aggregate epsilon
    (ε): Exceeds …"), never as a raw key ("privacy.epsilon: …"). A report count's message names its
    scope itself ("The analysis has used …"): it stands alone."""
    name = form_field_for(path)
    if name is not None:
        return f"{RecipeForm.base_fields[name].label}: {message}"
    return message if path in ("budget.reports", "__all__") else f"{path}: {message}"
