"""Joint histograms (CombinationType, Figure 4 of seed 000): age x n-grams, one release per locale."""

from __future__ import annotations

import numpy as np
import pytest
from django.test import Client

from analyses.presenters.releases import release_as_json
from analyses.services.policy import analysis_approve, analysis_create, analysis_spent
from analyses.services.rounds import round_create_and_start
from devices.fleet_io import fleet_create
from devices.models import ShardLedger
from pfs_base.errors import ValidationFailed
from pfs_device.columns import unpack
from privacy.encoding import CombinationType, content_encoding

FIGURE_4_TYPES = {
    "age": {"dataType": "BucketedType", "boundaries": [20, 30, 40, 50, 60, 70, 80]},
    "ngrams": {
        "dataType": "PrefixTree",
        "tree": {"root": ["null", "hello", "i"], "hello": ["null", "world"], "i": ["went", "got"]},
        "tokens": ["a", "and", "got", "hello", "home", "i", "school", "went", "world"],
    },
    "combinations": {"dataType": "CombinationType", "structure": ["age", "ngrams"]},
}


def test_figure_4_has_eight_times_thirty_four_bins() -> None:
    fields, encoding = content_encoding(FIGURE_4_TYPES)
    assert fields == ("age", "ngrams")
    assert isinstance(encoding, CombinationType)
    assert encoding.size == (1 + 7) * (1 + 3 * (1 + 1 + 9))
    assert encoding.labels[1] == "OOV × hello world </s>"
    # Mixed radix, the last field fastest: (age bucket 2, n-gram bucket 5).
    assert encoding.combine([np.array([2]), np.array([5])]).tolist() == [2 * 34 + 5]


def client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def joint(db, analyst, officer):
    fleet_create(name="joint", size=40_000, seed=9, shard_size=10_000)
    spec = {
        "identifier": "t.joint",
        "fleet": "joint",
        "queryClass": {"stream": "KeyboardNGrams", "fields": ["age", "ngrams"], "cohortFields": ["locale"]},
        "budget": {"epsilon": 2.0, "reports": 2, "delta": 1e-5},
        "fields": {
            "age": {"localEpsilon": 4.0, "epsilon": 1.0, "reports": 1},
            "ngrams": {"localEpsilon": 4.0, "epsilon": 2.0, "reports": 2},
        },
    }
    return analysis_approve(analysis=analysis_create(spec=spec, owner=analyst), officer=officer)


def _recipe(**privacy) -> dict:
    return {
        "recipeIdentifier": "joint",
        "query": "select age, ngrams from KeyboardNGrams",
        "cohorts": ["locale"],
        "dataTypeContent": FIGURE_4_TYPES,
        "privacy": {"mechanism": "asymmetric_ohe", "epsilon0": 4.0, "epsilon": 1.0, "delta": 1e-6, **privacy},
    }


def test_a_joint_recipe_releases_per_locale_and_charges_both_fields(
    joint, analyst, django_capture_on_commit_callbacks
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        # A minimum cohort of 8,762, raised by the recipe: only en_US (half of 30,000 devices) meets it.
        content = _recipe(minCohort=8762)
        round_ = round_create_and_start(analysis=joint, content=content, user=analyst, confirm_small_cohorts=True)
    round_.refresh_from_db()
    release = release_as_json(round_.release)
    assert release["field"] == "age,ngrams"
    assert release["joint"]["fields"] == ["age", "ngrams"]
    assert [len(labels) for labels in release["joint"]["labels"]] == [8, 34]
    batches = {b["cohort"]: b for b in release["batches"]}
    # en_US holds half the fleet and meets the minimum cohort of 8,762; the smaller locales do not.
    assert not batches["locale=en_US"]["suppressed"]
    assert len(batches["locale=en_US"]["buckets"]) == 8 * 34
    assert batches["locale=de_DE"]["suppressed"]
    ledger = unpack(ShardLedger.objects.filter(analysis_identifier="t.joint").first().state)
    assert ledger["field:age:reports_used"].max() == 1 and ledger["field:ngrams:reports_used"].max() == 1
    page = client_for(analyst).get(f"/rounds/{round_.pk}/").content.decode()
    assert "Heatmap of debiased counts of age × ngrams" in page
    assert analysis_spent(joint)["fields"] == {
        "age": {"epsilon": 1.0, "reports": 1},
        "ngrams": {"epsilon": 1.0, "reports": 1},
    }


def test_a_joint_recipe_is_refused_by_the_field_that_cannot_pay(joint, analyst, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        round_create_and_start(analysis=joint, content=_recipe(), user=analyst, confirm_small_cohorts=True)
    with pytest.raises(ValidationFailed) as refused:
        round_create_and_start(
            analysis=joint, content={**_recipe(), "recipeIdentifier": "again"}, user=analyst, confirm_small_cohorts=True
        )
    assert refused.value.errors == {
        "budget.reports": [
            "Field age has used its only report: each device answers it once, and a round has already asked."
        ]
    }


@pytest.mark.parametrize(
    ("change", "key"),
    [
        (
            {"combinations": {"dataType": "CombinationType", "structure": ["age"]}},
            "dataTypeContent.combinations.structure",
        ),
        (
            {"combinations": {"dataType": "CombinationType", "structure": ["age", "locale"]}},
            "dataTypeContent.combinations.structure",
        ),
        ({"combinations": None}, "dataTypeContent"),  # two fields and no combination
        ({"age": {"dataType": "PrefixTree", "tokens": ["a"]}}, "dataTypeContent.age.dataType"),
    ],
)
def test_bad_combinations_are_refused_at_their_key(joint, analyst, change, key) -> None:
    data_types = {**FIGURE_4_TYPES, **change}
    data_types = {k: v for k, v in data_types.items() if v is not None}
    with pytest.raises(ValidationFailed) as refused:
        round_create_and_start(
            analysis=joint,
            content={**_recipe(), "dataTypeContent": data_types},
            user=analyst,
            confirm_small_cohorts=True,
        )
    assert key in refused.value.errors, refused.value.errors
