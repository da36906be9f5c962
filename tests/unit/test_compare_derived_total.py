"""Comparing a release split by cohort with an unsplit one: the split one's total over cohorts is
derived, with its standard error sqrt(Σ se²), and said to be derived (issue 31, item 5)."""

from __future__ import annotations

import math
import re

import pytest

from analyses.presenters.releases import release_as_json, release_total_over_cohorts
from tests.unit.test_budget_pages import budget_analysis, recipe_for, run  # noqa: F401 (a fixture)

Z95 = 1.959963984540054


def batch(cohort: str, estimates: list[float], errors: list[float], reports: int = 700) -> dict:
    return {
        "cohort": cohort,
        "reports": reports,
        "min_cohort": 206,
        "suppressed": False,
        "buckets": [
            {"label": label, "estimate": x, "standard_error": se, "ci95": [x - Z95 * se, x + Z95 * se]}
            for label, x, se in zip(["OOV", "[20, 30)"], estimates, errors, strict=True)
        ],
    }


def test_the_total_over_cohorts_sums_estimates_and_adds_variances() -> None:
    total = release_total_over_cohorts(
        [batch("locale=en_US", [100.0, -4.0], [3.0, 5.0], 900), batch("locale=fr_FR", [20.0, 9.0], [4.0, 12.0], 400)],
        z=Z95,
    )
    assert total["cohort"] == "" and total["reports"] == 1300 and total["suppressed"] is False
    assert [b["label"] for b in total["buckets"]] == ["OOV", "[20, 30)"]
    assert [b["estimate"] for b in total["buckets"]] == [120.0, 5.0]
    # sqrt(3² + 4²) = 5 and sqrt(5² + 12²) = 13, not 3 + 4 and 5 + 12.
    assert [b["standard_error"] for b in total["buckets"]] == [5.0, 13.0]
    assert total["buckets"][1]["ci95"] == pytest.approx([5 - Z95 * 13, 5 + Z95 * 13])
    assert total["derived"] == {"from": ["locale=en_US", "locale=fr_FR"], "missing": []}


def test_a_suppressed_cohort_is_named_missing_and_with_none_released_there_is_no_total() -> None:
    suppressed = {"cohort": "locale=de_DE", "reports": None, "min_cohort": 206, "suppressed": True, "reason": "few"}
    total = release_total_over_cohorts([batch("locale=en_US", [100.0, 1.0], [3.0, 4.0]), suppressed], z=Z95)
    assert total["derived"] == {"from": ["locale=en_US"], "missing": ["locale=de_DE"]}
    assert [b["estimate"] for b in total["buckets"]] == [100.0, 1.0]
    assert release_total_over_cohorts([suppressed], z=Z95) is None


@pytest.mark.django_db
def test_compare_derives_the_split_releases_total_and_differences_it_with_the_unsplit_one(
    api,
    client,
    analyst,
    budget_analysis,  # noqa: F811
    django_capture_on_commit_callbacks,
) -> None:
    # epsilon0 = 2 at epsilon = 1 needs 206 reports: every locale of the 5,000 devices is released.
    split = run(
        budget_analysis,
        recipe_for("by-locale", 1.0, epsilon0=2.0, cohorts=["locale"]),
        analyst,
        django_capture_on_commit_callbacks,
    )
    whole = run(budget_analysis, recipe_for("whole", 1.0), analyst, django_capture_on_commit_callbacks)
    cohorts = release_as_json(split.release)["batches"]
    assert len(cohorts) > 1 and not any(c["suppressed"] for c in cohorts)
    [unsplit] = release_as_json(whole.release)["batches"]

    body = api.get(f"/api/compare/?a={split.pk}&b={whole.pk}").json()
    total = body["cohorts"][0]
    assert total["cohort"] == "" and total["a"]["derived"]["from"] == [c["cohort"] for c in cohorts]
    assert total["b"]["derived"] is None
    for i, row in enumerate(total["buckets"]):
        estimate = math.fsum(c["buckets"][i]["estimate"] for c in cohorts)
        error = math.sqrt(math.fsum(c["buckets"][i]["standard_error"] ** 2 for c in cohorts))
        assert row["a"]["estimate"] == pytest.approx(estimate) and row["a"]["standard_error"] == pytest.approx(error)
        b = unsplit["buckets"][i]
        assert row["difference"] == pytest.approx(b["estimate"] - estimate)
        assert row["standard_error"] == pytest.approx(math.hypot(error, b["standard_error"]))
        assert row["significant"] is not None
    assert any("its total over all devices is derived" in note for note in body["notes"])

    client.force_login(analyst)
    page = client.get(f"/compare/?a={split.pk}&b={whole.pk}").content.decode()
    table = page.split('id="compare-table-0"')[1].split("</table>")[0]
    assert "derived" in page.split('id="cohort-h-0"')[1].split("<table")[0]
    rows = table.split("<tbody>")[1].split("</tr>")[:-1]
    assert rows and all(row.count("—") == 0 for row in rows)  # every bucket differenced


@pytest.mark.django_db
def test_the_chooser_groups_rounds_by_analysis_the_one_at_hand_first(
    client,
    analyst,
    analysis,
    recipe,
    budget_analysis,  # noqa: F811
    django_capture_on_commit_callbacks,
) -> None:
    ages = run(analysis, recipe, analyst, django_capture_on_commit_callbacks)  # test.ages, older
    budget = [
        run(budget_analysis, recipe_for(name, 1.0), analyst, django_capture_on_commit_callbacks) for name in ("x", "y")
    ]
    client.force_login(analyst)

    def groups(query: str) -> list[tuple[str, list[str]]]:
        chooser = client.get(f"/compare/{query}").content.decode().split('id="compare-b"')[1].split("</select>")[0]
        return [
            (group.split('"')[0], re.findall(r'<option value="(\d+)"', group))
            for group in chooser.split('<optgroup label="')[1:]
        ]

    # Nothing chosen: the analyses by their newest round, each newest first.
    assert groups("") == [
        ("test.budget", [str(budget[1].pk), str(budget[0].pk)]),
        ("test.ages", [str(ages.pk)]),
    ]
    # Comparing from a test.ages round: test.ages first, said to be the one at hand.
    assert groups(f"?a={ages.pk}") == [
        ("test.ages (this analysis)", [str(ages.pk)]),
        ("test.budget", [str(budget[1].pk), str(budget[0].pk)]),
    ]
