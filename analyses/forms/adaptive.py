"""The adaptive runs' forms: the start form (the spec as fields or as JSON) and one JSON document.

They share the recipe editor's two sides (SOURCE_FORM, SOURCE_JSON) and its JSON parsing.
"""

from __future__ import annotations

import json
import re
from typing import Any

from django import forms
from django.core.exceptions import NON_FIELD_ERRORS

from analyses.forms.recipe_editor import MISSING, SOURCE_FORM, SOURCE_JSON, json_at, json_object
from analyses.models import Analysis
from privacy.heavy_hitters import DEFAULT_ALPHABET
from privacy.mechanisms import MECHANISMS


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
        return json_object(self.cleaned_data["document"])

    def add_problems(self, errors: dict[str, list[str]]) -> None:
        for path, messages in errors.items():
            for message in messages:
                self.add_error("document", f"{path}: {message}")

    def focus_errors(self) -> None:
        """A refused document is focused when the page loads (autofocus, which scrolls to it), its
        errors named by its control (aria-describedby: the list json_field.html renders)."""
        if "document" in self.errors:
            bound = self["document"]
            described = f"{bound.auto_id}_error" + (f" {bound.auto_id}_helptext" if bound.help_text else "")
            self.fields["document"].widget.attrs.update({"autofocus": True, "aria-describedby": described})


# ---------------------------------------------------------------- adaptive runs: the start form

_DISCOVERY, _REFINEMENT, _HEAVY_HITTERS = "ngram_discovery", "bucket_refinement", "heavy_hitters"
KIND_LABELS = {
    _DISCOVERY: "n-gram discovery (text)",
    _REFINEMENT: "bucket refinement (numbers)",
    _HEAVY_HITTERS: "heavy hitters, Poplar1 (text, no local noise)",
}
# Spec key -> the start form's field that shows its errors (the JSON side of the same mapping is
# static/js/adaptive_form.js, which reads this table from the page).
_ADAPTIVE_FIELD_FOR_PATH = {
    "kind": "kind",
    "field": "field",
    "unit": "unit",
    "vocabulary": "vocabulary",
    "maxLength": "rounds",
    "maxRounds": "rounds",
    "alphabet": "alphabet",
    "boundaries": "boundaries",
    "minWidth": "min_width",
    "privacy.mechanism": "mechanism",
    "privacy.epsilon": "epsilon",
    "privacy.epsilon0": "epsilon0",
    "privacy.epsilonPerRound": "epsilon_per_round",
    "privacy.delta": "delta",
    "privacy.samplingRate": "sampling_rate",
    "threshold": "z_score",
    "threshold.zScore": "z_score",
    "threshold.maxPerLevel": "max_per_level",
    "threshold.maxBuckets": "max_per_level",
    "baseline": "baseline",
    "baseline.analysis": "baseline",
    "baseline.rows": "baseline_rows",
    "baseline.columns": "baseline_columns",
    "baseline.topK": "baseline_top_k",
}
# A heavy-hitters walk's maxLength is its longest word, not a number of rounds.
_HEAVY_HITTERS_FIELD_FOR_PATH = {**_ADAPTIVE_FIELD_FOR_PATH, "maxLength": "max_length"}
# The fields each kind needs; a kind's other fields may be blank (the page hides them).
_REQUIRED_FOR_KIND = {
    _DISCOVERY: ("rounds", "mechanism", "epsilon0", "epsilon_per_round"),
    _REFINEMENT: ("rounds", "mechanism", "epsilon0", "epsilon_per_round"),
    _HEAVY_HITTERS: ("max_length", "epsilon"),
}
_ROUND_PREFIX = re.compile(r"^(baseline )?round (\d+): (.*)$")
VOCABULARY_FILE_LIMIT = 1_000_000  # bytes: a dictionary of words, not a corpus


def vocabulary_words(text: str) -> list[str]:
    """The words of a vocabulary given as a JSON array, or one per line, or separated by commas."""
    stripped = text.strip()
    if stripped.startswith("["):
        try:
            value = json.loads(stripped)
        except json.JSONDecodeError:
            value = None
        if isinstance(value, list):
            return [str(word).strip() for word in value if str(word).strip()]
    return [word.strip() for word in re.split(r"[\n,]", text) if word.strip()]


class AdaptiveSpecForm(forms.Form):
    """The start of an adaptive run: its spec as fields, or as the JSON (docs/adaptive.md).

    As in the recipe editor, one side is the spec: the fields (``spec_from_fields``, the one
    fields-to-JSON mapping) or the JSON as written. A post without ``source`` runs the JSON, as the
    page did when it had only the JSON.
    """

    kind = forms.ChoiceField(label="Kind", widget=forms.RadioSelect)
    field = forms.ChoiceField(label="Field")
    unit = forms.ChoiceField(
        label="Unit", choices=[("word", "words"), ("character", "letters")], initial="word", required=False
    )
    vocabulary = forms.CharField(
        label="Vocabulary",
        required=False,
        widget=forms.Textarea(attrs={"rows": 5, "cols": 60, "spellcheck": "false"}),
        help_text="The public words (or letters) an n-gram may be made of, one a line or separated by commas. "
        "Devices' words outside it are not counted.",
    )
    vocabulary_file = forms.FileField(
        label="…or a vocabulary file",
        required=False,
        help_text="A text file, one word a line, or a JSON array; it replaces the list above.",
    )
    rounds = forms.IntegerField(label="Rounds", min_value=1, max_value=12, required=False)
    # A walk's length and alphabet: the service states their limits (1 to 16 bytes, the prefixes a
    # level) in its own words, under these fields.
    max_length = forms.IntegerField(
        label="Longest word (bytes)",
        required=False,
        help_text="The walk spells words a byte a level: one level a byte, 16 at most.",
    )
    alphabet = forms.CharField(
        label="Alphabet",
        required=False,
        initial=DEFAULT_ALPHABET,
        widget=forms.TextInput(attrs={"spellcheck": "false", "autocomplete": "off"}),
        help_text="The characters a word may be spelled with: each level tries every one after each kept "
        "prefix. Blank: a to z.",
    )
    boundaries = forms.CharField(
        label="First bucket boundaries", required=False, help_text="Refinement: increasing numbers, comma-separated."
    )
    min_width = forms.FloatField(
        label="Narrowest bucket", required=False, help_text="Refinement: never split below it."
    )
    mechanism = forms.ChoiceField(
        label="Local randomizer", choices=[(m, m) for m in sorted(MECHANISMS)], required=False
    )
    epsilon0 = forms.FloatField(label="Local epsilon (ε₀)", required=False)
    epsilon_per_round = forms.FloatField(label="Aggregate epsilon per round (ε)", required=False)
    epsilon = forms.FloatField(
        label="Epsilon (ε) of the whole walk",
        required=False,
        help_text="No local noise: each aggregator adds discrete Gaussian noise to every level's counts, "
        "and the levels compose within this ε and the δ below.",
    )
    delta = forms.FloatField(label="Delta (δ) per round")
    sampling_rate = forms.FloatField(label="Sampling rate (q)", initial=1.0)
    z_score = forms.FloatField(label="Keep above (z-score)", required=False)
    max_per_level = forms.IntegerField(label="Keep at most", required=False, min_value=1)
    # Help that depends on the kind chosen, each in that kind's own words (an analyst refining
    # buckets reads nothing of n-grams): shown by the page's script for the kind checked.
    KIND_HELP = {
        "rounds": {
            "ngram_discovery": "The longest n-gram: one word (or letter) a round.",
            "bucket_refinement": "How many rounds of splitting, at most.",
        },
        "delta": {
            "heavy_hitters": "The whole walk's δ, as its ε: one round, every level within it.",
        },
        "z_score": {
            "ngram_discovery": "An n-gram is kept when its estimate is this many standard errors above 0.",
            "bucket_refinement": "A bucket is split when its estimate is this many standard errors above 0.",
            "heavy_hitters": "A prefix is extended when its noisy count is this many standard errors above 0 "
            "(4 if blank).",
        },
        "max_per_level": {
            "ngram_discovery": "n-grams kept a level, at most.",
            "bucket_refinement": "Buckets in a round, at most.",
            "heavy_hitters": "Prefixes kept a level, at most (32 if blank); times the alphabet's bytes plus one, "
            "at most 4,096.",
        },
    }

    @property
    def kind_helps(self) -> list[tuple[str, str, str]]:
        """(field, kind, help) for the page's template (templates/analyses/includes/spec_field.html)."""
        return [(name, kind, text) for name, texts in self.KIND_HELP.items() for kind, text in texts.items()]

    baseline = forms.ChoiceField(
        label="Static baseline on",
        required=False,
        help_text="Discovery only: another analysis of the same fleet runs the same plan as one static sketch, "
        "for comparison. It spends that analysis's budget.",
    )
    baseline_rows = forms.IntegerField(label="Sketch rows", required=False, min_value=1)
    baseline_columns = forms.IntegerField(label="Sketch columns", required=False, min_value=1)
    baseline_top_k = forms.IntegerField(label="Baseline top k", required=False, min_value=1)
    source = forms.ChoiceField(
        label="Start from",
        choices=[(SOURCE_FORM, "the form fields"), (SOURCE_JSON, "the spec JSON")],
        initial=SOURCE_FORM,
        required=False,
        widget=forms.RadioSelect,
    )
    document = forms.CharField(
        label="Spec (JSON)",
        required=False,
        widget=forms.Textarea(attrs={"rows": 16, "cols": 80, "spellcheck": "false"}),
        help_text="The same spec as JSON (docs/adaptive.md); its whole budget plan is checked against the policy "
        "before round 1 is sent.",
    )

    PRIVACY_FIELDS = ("mechanism", "epsilon0", "epsilon_per_round", "epsilon", "delta", "sampling_rate")

    def __init__(
        self,
        *args: Any,
        analysis: Analysis,
        kinds: dict[str, list[str]],
        kinds_refused: dict[str, str] | None = None,
        baselines: dict[str, dict[str, Any]],
        examples: dict[str, dict[str, Any]],
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.analysis = analysis
        self.kinds = kinds  # kind -> the fields it can run on
        # kind -> why no field of the analysis can run it (the page says so under the kinds).
        self.kinds_refused = kinds_refused or {}
        self._fields_shown: dict[str, Any] | None = None
        self.fields["kind"].choices = [(k, KIND_LABELS[k]) for k in kinds]
        # A text field may run more than one kind: listed once.
        self.fields["field"].choices = [(f, f) for f in dict.fromkeys(f for fields in kinds.values() for f in fields)]
        # Only the analyses a start would accept (pages.adaptive._baselines), with what the page's
        # plan needs of each: the fields it can hold a baseline for, the budget it has left.
        self.baselines = baselines
        self.fields["baseline"].choices = [("", "none"), *((b, b) for b in baselines)]
        if examples and not self.is_bound:
            first, *others = examples.values()
            initial = fields_from_spec(first)
            # The other kinds' own fields (a walk's length and ε, a refinement's boundaries) from
            # their examples: choosing another kind on the page shows a spec that can run, not blanks.
            for other in others:
                initial.update({k: v for k, v in fields_from_spec(other).items() if initial.get(k) in (None, "")})
            self.initial = {**initial, **self.initial}

    @property
    def json_is_source(self) -> bool:
        return self.is_bound and (self.data.get("source") or SOURCE_JSON) == SOURCE_JSON

    @property
    def field_paths(self) -> dict[str, str]:
        """Spec key -> form field, for the page's script."""
        return _ADAPTIVE_FIELD_FOR_PATH

    def clean_document(self) -> Any:
        text = self.cleaned_data["document"]
        if not self.json_is_source:
            return text
        if not text.strip():
            raise forms.ValidationError("Give the spec as JSON, or choose to start from the form fields.")
        return json_object(text)

    def clean_boundaries(self) -> list[float] | None:
        text = self.cleaned_data["boundaries"]
        try:
            return [float(part) for part in text.replace(";", ",").split(",") if part.strip()]
        except ValueError:
            raise forms.ValidationError("Every boundary must be a number.") from None

    def clean_vocabulary_file(self) -> list[str] | None:
        upload = self.cleaned_data.get("vocabulary_file")
        if not upload:
            return None
        if upload.size > VOCABULARY_FILE_LIMIT:
            raise forms.ValidationError(f"At most {VOCABULARY_FILE_LIMIT:,} bytes: a list of words, not a corpus.")
        try:
            return vocabulary_words(upload.read().decode("utf-8"))
        except UnicodeDecodeError:
            raise forms.ValidationError("Must be a UTF-8 text file.") from None

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        for name in _REQUIRED_FOR_KIND.get(data.get("kind"), ()):
            if name not in self.errors and data.get(name) in (None, ""):
                self.add_error(name, self.fields[name].error_messages["required"])
        if self.json_is_source:
            # The fields as posted (the page's script keeps them in sync with the JSON): an error at a
            # key a field shows as the JSON has it goes under that field (add_problems).
            if not any(name in self.errors for name in self.fields if name != "document") and data.get("kind"):
                self._fields_shown = spec_from_fields(self.analysis.identifier, data)
            for name in list(self.errors):
                if name not in ("document", NON_FIELD_ERRORS):
                    self.errors.pop(name)
            return data
        kind = data.get("kind")
        if kind and data.get("field") and data["field"] not in self.kinds.get(kind, []):
            wanted = {
                _DISCOVERY: "A text field",
                _REFINEMENT: "A number field",
                _HEAVY_HITTERS: "A text field whose policy allows aggregator noise",
            }[kind]
            self.add_error("field", f"{wanted} is needed for this kind: {', '.join(self.kinds[kind])}.")
        if kind == _DISCOVERY and not (data.get("vocabulary_file") or vocabulary_words(data.get("vocabulary") or "")):
            self.add_error("vocabulary", "Give the words n-grams are made of: a list, or a file.")
        if kind == _REFINEMENT and not data.get("boundaries"):
            self.add_error("boundaries", "Give the first buckets' boundaries.")
        return data

    def spec(self) -> dict[str, Any]:
        """The spec to start: the JSON as written when it is the source, else the fields'."""
        if self.json_is_source:
            return self.cleaned_data["document"]
        return spec_from_fields(self.analysis.identifier, self.cleaned_data)

    def add_problems(self, errors: dict[str, list[str]]) -> None:
        """The services' errors (by spec key, "round N: key" for a planned round, "baseline ..." for
        the static baseline's) by the field they name; with the JSON as the spec, by the JSON unless
        the field shows what the JSON says there."""
        for path, messages in errors.items():
            key, prefix = path, ""
            match = _ROUND_PREFIX.match(path)
            if match:
                baseline, number, key = match.groups()
                prefix = f"{'Baseline round' if baseline else 'Round'} {number}: "
                if baseline:
                    key = "baseline.analysis"
            elif path.startswith("baseline "):  # the baseline's budget plan: its analysis is the field to change
                key, prefix = "baseline.analysis", "Baseline: "
            name = self._field_for_path().get(key)
            for message in messages:
                if self.json_is_source and not (name and self._field_shows(key)):
                    self.add_error("document", f"{path}: {message}")
                elif key.startswith("budget.") or name is None:
                    shown = message if key.startswith("budget.") else f"{path}: {message}"
                    self.add_error(None, prefix + shown)
                else:
                    self.add_error(name, prefix + message)

    def _field_for_path(self) -> dict[str, str]:
        """Spec key -> form field for the kind of the spec started (the JSON's when it is the source)."""
        spec = self.cleaned_data.get("document") if self.json_is_source else self.cleaned_data
        kind = spec.get("kind") if isinstance(spec, dict) else None
        return _HEAVY_HITTERS_FIELD_FOR_PATH if kind == _HEAVY_HITTERS else _ADAPTIVE_FIELD_FOR_PATH

    def _field_shows(self, path: str) -> bool:
        """Whether a field shows the JSON's value at ``path`` (so that its error can go under it)."""
        if self._fields_shown is None or path not in self._field_for_path():
            return False
        posted = self.cleaned_data.get("document")
        return json_at(posted, path) == json_at(self._fields_shown, path) != MISSING

    # The fields in the order the page shows them (templates/analyses/adaptive_list.html).
    PAGE_ORDER = (
        "kind",
        "field",
        "unit",
        "rounds",
        "max_length",
        "alphabet",
        "boundaries",
        "min_width",
        "vocabulary",
        "vocabulary_file",
        *PRIVACY_FIELDS,
        "z_score",
        "max_per_level",
        "baseline",
        "baseline_rows",
        "baseline_columns",
        "baseline_top_k",
        "document",
    )

    def focus_first_error(self) -> None:
        """A refused start lands on its first problem: the first field with an error is focused when
        the page loads (autofocus, which also scrolls to it) and names its errors (aria-describedby).
        A problem of the whole spec is above the fields: the template focuses it instead."""
        if self.non_field_errors():
            return
        name = next((name for name in self.PAGE_ORDER if name in self.errors), None)
        if name is None:
            return
        bound = self[name]
        described = [f"{bound.auto_id}_error"] + ([f"{bound.auto_id}_helptext"] if bound.help_text else [])
        self.fields[name].widget.attrs.update({"autofocus": True, "aria-describedby": " ".join(described)})


def spec_from_fields(analysis: str, data: dict[str, Any]) -> dict[str, Any]:
    """The spec for the start form's cleaned fields: the one form-to-JSON mapping."""
    kind = data["kind"]
    spec: dict[str, Any] = {"analysis": analysis, "kind": kind, "field": data["field"]}
    if kind == _HEAVY_HITTERS:
        return _walk_spec_from_fields(spec, data)
    if kind == _DISCOVERY:
        spec["unit"] = data.get("unit") or "word"
        spec["vocabulary"] = data.get("vocabulary_file") or vocabulary_words(data.get("vocabulary") or "")
        spec["maxLength"] = data["rounds"]
    else:
        spec["boundaries"] = data.get("boundaries") or []
        if data.get("min_width") is not None:
            spec["minWidth"] = data["min_width"]
        spec["maxRounds"] = data["rounds"]
    spec["privacy"] = {
        "mechanism": data["mechanism"],
        "epsilon0": data["epsilon0"],
        "epsilonPerRound": data["epsilon_per_round"],
        "delta": data["delta"],
        "samplingRate": data["sampling_rate"],
    }
    threshold: dict[str, Any] = {}
    if data.get("z_score") is not None:
        threshold["zScore"] = data["z_score"]
    if data.get("max_per_level") is not None:
        threshold["maxPerLevel" if kind == _DISCOVERY else "maxBuckets"] = data["max_per_level"]
    spec["threshold"] = threshold
    if kind == _DISCOVERY and data.get("baseline"):
        baseline: dict[str, Any] = {"analysis": data["baseline"]}
        for key, name in (("rows", "baseline_rows"), ("columns", "baseline_columns"), ("topK", "baseline_top_k")):
            if data.get(name) is not None:
                baseline[key] = data[name]
        spec["baseline"] = baseline
    return spec


def _walk_spec_from_fields(spec: dict[str, Any], data: dict[str, Any]) -> dict[str, Any]:
    """A heavy-hitters walk's spec: its length and alphabet, the whole walk's privacy (no local
    randomizer), its threshold; a blank alphabet, z-score or maximum is the walk's default."""
    spec["maxLength"] = data["max_length"]
    if data.get("alphabet"):
        spec["alphabet"] = data["alphabet"]
    spec["privacy"] = {"epsilon": data["epsilon"], "delta": data["delta"], "samplingRate": data["sampling_rate"]}
    threshold: dict[str, Any] = {}
    if data.get("z_score") is not None:
        threshold["zScore"] = data["z_score"]
    if data.get("max_per_level") is not None:
        threshold["maxPerLevel"] = data["max_per_level"]
    spec["threshold"] = threshold
    return spec


def fields_from_spec(spec: dict[str, Any]) -> dict[str, Any]:
    """The start form's initial values for a spec (the page's examples)."""
    privacy = spec.get("privacy", {})
    threshold = spec.get("threshold", {})
    baseline = spec.get("baseline") or {}
    walk = spec.get("kind") == _HEAVY_HITTERS
    return {
        "kind": spec.get("kind"),
        "field": spec.get("field"),
        "unit": spec.get("unit", "word"),
        "vocabulary": ", ".join(spec.get("vocabulary", [])),
        "rounds": None if walk else spec.get("maxLength", spec.get("maxRounds")),
        "max_length": spec.get("maxLength") if walk else None,
        "alphabet": spec.get("alphabet", DEFAULT_ALPHABET),
        "boundaries": ", ".join(f"{b:g}" for b in spec.get("boundaries", [])),
        "min_width": spec.get("minWidth"),
        "mechanism": privacy.get("mechanism", "asymmetric_ohe"),
        "epsilon0": privacy.get("epsilon0"),
        "epsilon_per_round": privacy.get("epsilonPerRound"),
        "epsilon": privacy.get("epsilon"),
        "delta": privacy.get("delta"),
        "sampling_rate": privacy.get("samplingRate", 1.0),
        "z_score": threshold.get("zScore"),
        "max_per_level": threshold.get("maxPerLevel", threshold.get("maxBuckets")),
        "baseline": baseline.get("analysis", ""),
        "baseline_rows": baseline.get("rows"),
        "baseline_columns": baseline.get("columns"),
        "baseline_top_k": baseline.get("topK"),
    }
