"""The client's pandas extra: Release.to_dataframe (pandas is in the development lock; the client itself
needs it only for this). Buckets are an ordered Categorical in the release's order, what is missing is
pd.NA, and the release's metadata rides along in DataFrame.attrs."""

from __future__ import annotations

import copy
import sys

import pandas
import pytest

from pfs_client import Release
from pfs_client.models import FRAME_COLUMNS
from tests.unit.test_python_client_unit import RELEASE

SPENT = {"epsilon": 1.5, "delta": 2e-9, "account": "analysis", "accountant": "rdp", "rounds": 2}
NO_COHORTS = {
    "analysis": "test.ages",
    "recipe": "ages",
    "mechanism": "rappor",
    "min_cohort": 100,
    "delta": 1e-9,
    "epsilon_spent": 1.0,
    "analysis_spent": SPENT,
    "batches": [
        {
            "cohort": "",
            "reports": 500,
            "min_cohort": 100,
            "suppressed": False,
            "buckets": [
                {"label": "[0, 10)", "estimate": 10.0, "standard_error": 1.0, "ci95": [8.0, 12.0]},
                {"label": "[10, 20)", "estimate": 20.0, "standard_error": 1.0, "ci95": [18.0, 22.0]},
                {"label": "OOV", "estimate": 1.0, "standard_error": 1.0, "ci95": [-1.0, 3.0]},
            ],
        }
    ],
}


def test_buckets_are_an_ordered_categorical_in_the_releases_order() -> None:
    # Not alphabetical: "OOV" stays where the release has it, and sorting keeps the histogram's order.
    release = Release(round_id=7, data=copy.deepcopy(NO_COHORTS))
    release.data["batches"][0]["buckets"].insert(0, release.data["batches"][0]["buckets"].pop())
    frame = release.to_dataframe()
    assert isinstance(frame["bucket"].dtype, pandas.CategoricalDtype) and frame["bucket"].cat.ordered
    assert frame["bucket"].cat.categories.tolist() == ["OOV", "[0, 10)", "[10, 20)"]
    assert frame.sort_values("bucket")["bucket"].tolist() == ["OOV", "[0, 10)", "[10, 20)"]
    assert frame["bucket"].min() == "OOV"


def test_a_missing_cohort_is_na_not_an_empty_string() -> None:
    frame = Release(round_id=7, data=NO_COHORTS).to_dataframe()
    assert frame["cohort"].isna().all() and frame["cohort"].tolist() == [pandas.NA] * 3
    assert frame["cohort"].dtype == "string"
    assert frame["estimate"].dtype == "Float64" and frame["estimate"].tolist() == [10.0, 20.0, 1.0]


def test_a_suppressed_batch_has_its_buckets_with_na_cells() -> None:
    frame = Release(round_id=7, data=RELEASE).to_dataframe()
    assert list(frame.columns) == FRAME_COLUMNS
    assert frame["cohort"].tolist() == ["en", "en", "fr", "fr"]
    assert frame["bucket"].tolist() == ["OOV", "[20, 30)", "OOV", "[20, 30)"]
    suppressed = frame[frame["cohort"] == "fr"]
    assert suppressed["suppressed"].all() and not frame[frame["cohort"] == "en"]["suppressed"].any()
    for column in ("estimate", "standard_error", "ci_low", "ci_high"):
        assert suppressed[column].isna().all() and suppressed[column].iloc[0] is pandas.NA
    # The released cells are the CSV's rows.
    released = frame[~frame["suppressed"]]
    assert released["ci_high"].tolist() == [row["ci_high"] for row in Release(round_id=7, data=RELEASE).to_rows()]


def test_the_releases_metadata_is_in_the_frames_attrs() -> None:
    frame = Release(round_id=7, data=NO_COHORTS).to_dataframe()
    assert frame.attrs["round_id"] == 7
    assert (frame.attrs["analysis"], frame.attrs["recipe"], frame.attrs["mechanism"]) == ("test.ages", "ages", "rappor")
    assert (frame.attrs["epsilon_spent"], frame.attrs["delta_spent"]) == (1.0, 1e-9)
    assert frame.attrs["analysis_spent"] == SPENT and frame.attrs["accountant"] == "rdp"
    assert frame.attrs["min_cohort"] == 100


def test_a_round_that_charged_no_device_spent_no_delta() -> None:
    release = Release(round_id=7, data={**NO_COHORTS, "epsilon_spent": 0.0})
    assert (release.epsilon_spent, release.delta_spent) == (0.0, 0.0)


def test_a_release_stored_before_the_spend_statement_has_none_in_its_attrs() -> None:
    old = {k: v for k, v in NO_COHORTS.items() if k != "analysis_spent"}
    frame = Release(round_id=7, data=old).to_dataframe()
    assert frame.attrs["analysis_spent"] is None and frame.attrs["accountant"] is None


def test_an_empty_release_is_an_empty_frame_with_the_columns() -> None:
    frame = Release(round_id=7, data={"batches": []}).to_dataframe()
    assert list(frame.columns) == FRAME_COLUMNS and frame.empty


def test_without_pandas_to_dataframe_says_how_to_get_it(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "pandas", None)  # as if it were not installed
    with pytest.raises(ImportError, match=r"pip install pandas"):
        Release(round_id=7, data=RELEASE).to_dataframe()
