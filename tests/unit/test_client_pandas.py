"""The client's pandas extra: Release.to_dataframe, the CSV's rows as a DataFrame (pandas is in the
development lock; the client itself needs only the standard library)."""

from __future__ import annotations

import io
import sys

import pandas
import pytest

from pfs_client import Release
from pfs_client.models import CSV_COLUMNS
from tests.unit.test_python_client_unit import RELEASE


def test_to_dataframe_has_the_csvs_columns_rows_and_types() -> None:
    release = Release(round_id=7, data=RELEASE)
    frame = release.to_dataframe()
    assert list(frame.columns) == CSV_COLUMNS
    assert len(frame) == 2  # the suppressed batch has no rows, as in the CSV
    assert frame["bucket"].tolist() == ["OOV", "[20, 30)"]
    assert frame["estimate"].dtype.kind == "f" and frame["ci_high"].tolist() == [18.87, 2.92]
    # The very table the CSV holds.
    from_csv = pandas.read_csv(io.StringIO(release.to_csv()))
    pandas.testing.assert_frame_equal(frame, from_csv)


def test_an_empty_release_is_an_empty_frame_with_the_columns() -> None:
    frame = Release(round_id=7, data={"batches": []}).to_dataframe()
    assert list(frame.columns) == CSV_COLUMNS and frame.empty


def test_without_pandas_to_dataframe_says_how_to_get_it(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "pandas", None)  # as if it were not installed
    with pytest.raises(ImportError, match=r"pip install pandas"):
        Release(round_id=7, data=RELEASE).to_dataframe()
