"""Every chart legible in a real Chromium at 390 px and at 1280 px (issue 31, items 4, 5 and 12): the
plot at least 300 px wide, no text of the SVG over another, the legend clear of the axis titles;
the burn-down's rounds started seconds apart still one step each; a split release compared with an
unsplit one through its derived total; cohort panels on one y scale, in counts or percent."""

from __future__ import annotations

import copy
import math
import re

import pytest
from playwright.sync_api import expect

from analyses.adaptive.chain import adaptive_start
from analyses.services.rounds import round_create_and_start
from tests.conftest import DISCOVERY_SPEC

pytestmark = pytest.mark.e2e

WIDTHS = (390, 1280)

# The text plotly draws into a chart, each box in page pixels: tick labels, axis titles, legend
# entries, panel titles. Tick labels of one axis drawn at an angle are compared along the axis
# (their boxes, upright, overlap where the slanted text does not): slanted lines of text whose
# anchors are d apart along the axis are d·sin(angle) apart, clear of each other from a font size.
TEXTS = r"""(id) => {
  const chart = document.getElementById(id);
  const box = (e) => { const r = e.getBoundingClientRect(); return {x: r.left, y: r.top, w: r.width, h: r.height}; };
  const shown = (e) => e.textContent.trim() && box(e).w > 0 && box(e).h > 0;
  const items = [];
  chart.querySelectorAll('.xtick text, .ytick text').forEach((e) => {
    if (!shown(e)) return;
    const layer = e.closest('.xaxislayer-above, .yaxislayer-above');
    const subplot = e.closest('g.subplot');
    const angle = /rotate\((-?[\d.]+)/.exec(e.getAttribute('transform') || '');
    items.push({kind: 'tick', axis: (subplot ? subplot.getAttribute('class') : '') + layer.getAttribute('class'),
                angle: angle ? Number(angle[1]) : 0, text: e.textContent, ...box(e),
                anchor: Number((/translate\((-?[\d.]+)/.exec(e.getAttribute('transform') || '') || [0, e.getAttribute('x')])[1]),
                size: parseFloat(getComputedStyle(e).fontSize)});
  });
  chart.querySelectorAll('.infolayer g[class$="title"] text, .legendtext, .annotation-text').forEach((e) => {
    if (shown(e)) items.push({kind: e.classList.contains('legendtext') ? 'legend' : 'title', text: e.textContent, ...box(e)});
  });
  const legend = chart.querySelector('.legend .bg');
  const svg = chart.querySelector('svg.main-svg');
  const areas = [...chart.querySelectorAll('.draglayer .nsewdrag')].map(box);
  return {items, legend: legend ? box(legend) : null, svg: box(svg), areas};
}"""


def overlap(a: dict, b: dict, slack: float = 1.0) -> bool:
    return (
        a["x"] + slack < b["x"] + b["w"]
        and b["x"] + slack < a["x"] + a["w"]
        and a["y"] + slack < b["y"] + b["h"]
        and b["y"] + slack < a["y"] + a["h"]
    )


def assert_legible(page, chart_id: str, width: int) -> None:
    """The chart ``chart_id`` as drawn: wide enough, no text over another, the legend off the titles."""
    drawn = page.evaluate(TEXTS, chart_id)
    assert drawn["svg"]["w"] >= 300, f"{chart_id} at {width} px is {drawn['svg']['w']} px wide"
    assert drawn["svg"]["x"] >= 0 and drawn["svg"]["x"] + drawn["svg"]["w"] <= width, f"{chart_id} leaves the screen"
    for area in drawn["areas"]:  # the plot itself, not a sliver beside its legend
        assert area["w"] >= 0.55 * drawn["svg"]["w"], f"{chart_id}: a plot area {area['w']} px of {drawn['svg']['w']}"
    items = drawn["items"]
    for i, a in enumerate(items):
        assert a["x"] >= drawn["svg"]["x"] - 1 and a["x"] + a["w"] <= drawn["svg"]["x"] + drawn["svg"]["w"] + 1, (
            f"{chart_id} at {width} px: {a['text']!r} is cut at the chart's edge"
        )
        for b in items[i + 1 :]:
            if a["kind"] == b["kind"] == "tick" and a["angle"] and a["angle"] == b["angle"]:
                continue  # slanted labels of one axis: checked by their spacing below
            assert not overlap(a, b), f"{chart_id} at {width} px: {a['text']!r} overlaps {b['text']!r}"
    slanted = [t for t in items if t["kind"] == "tick" and t["angle"]]
    for a, b in zip(slanted, slanted[1:], strict=False):
        if a["axis"] == b["axis"]:
            apart = abs(a["anchor"] - b["anchor"]) * abs(math.sin(math.radians(a["angle"])))
            assert apart >= a["size"], f"{chart_id}: slanted {a['text']!r} and {b['text']!r} overlap"
    if drawn["legend"]:
        for title in (t for t in items if t["kind"] == "title"):
            assert not overlap(drawn["legend"], title), f"{chart_id} at {width} px: the legend covers {title['text']!r}"


@pytest.fixture
def two_releases(transactional_db, analysis, analyst, recipe):
    """Two rounds of test.ages started seconds apart (tasks inline): split by locale (every locale
    released: epsilon0 2 needs 206 reports), and unsplit."""
    split = copy.deepcopy(recipe)
    split.update(recipeIdentifier="by-locale", cohorts=["locale"])
    split["privacy"]["epsilon0"] = 2.0
    by_locale = round_create_and_start(analysis=analysis, content=split, user=analyst, confirm_small_cohorts=True)
    whole = round_create_and_start(analysis=analysis, content=recipe, user=analyst, confirm_small_cohorts=True)
    by_locale.refresh_from_db()
    whole.refresh_from_db()
    assert by_locale.status == whole.status == "released"
    return by_locale, whole


def sign_in(page, base: str, path: str) -> None:
    page.goto(f"{base}/login/?next={path}")
    page.get_by_label("Username").fill("alice")
    page.get_by_label("Password").fill("alice-password")
    page.get_by_role("button", name="Sign in").click()


@pytest.mark.parametrize("width", WIDTHS)
def test_the_budget_burndown_is_legible_with_one_step_per_round(two_releases, live_server, page, width) -> None:
    page.set_viewport_size({"width": width, "height": 900})
    sign_in(page, live_server.url, "/analyses/test.ages/budget/")
    for chart in ("epsilon-chart", "reports-chart"):
        expect(page.locator(f"#{chart} .scatterlayer .trace").first).to_be_attached(timeout=15_000)
        assert_legible(page, chart, width)
    # The two rounds started within seconds: each is its own step, well apart (start, #a, #b, now),
    # its time in the hover.
    by_locale, whole = two_releases
    xs = page.evaluate(
        """() => [...document.querySelectorAll('#epsilon-chart .scatterlayer .trace:first-child .points path')]
                 .map((p) => { const r = p.getBoundingClientRect(); return r.left + r.width / 2; })"""
    )
    assert len(xs) == 4 and min(b - a for a, b in zip(xs, xs[1:], strict=False)) >= 40
    hover = page.evaluate("() => document.getElementById('epsilon-chart').data[0].text")
    assert f"round {by_locale.pk} (by-locale, released)<br>started 20" in hover[1]
    assert page.evaluate("() => document.getElementById('epsilon-chart').data[0].x") == [
        "start",
        f"#{by_locale.pk}",
        f"#{whole.pk}",
        "now",
    ]
    used = page.evaluate("() => document.getElementById('epsilon-chart').data[0].y")
    assert used == [0, 1.0, 2.0, 2.0]


@pytest.mark.parametrize("width", WIDTHS)
def test_compare_derives_the_split_total_and_its_charts_are_legible(two_releases, live_server, page, width) -> None:
    by_locale, whole = two_releases
    page.set_viewport_size({"width": width, "height": 900})
    sign_in(page, live_server.url, f"/compare/%3Fa%3D{by_locale.pk}%26b%3D{whole.pk}")
    expect(page.locator("#derived-a")).to_contain_text("derived total over its cohorts locale=")
    rows = page.locator("#compare-table-0 tbody tr")
    expect(rows).to_have_count(8)
    for i in range(8):
        expect(rows.nth(i).locator("td").nth(2)).not_to_have_text("—")  # B − A, from the derived total
    charts = page.locator(".compare-chart")
    for i in range(charts.count()):
        chart_id = f"compare-chart-{i}"
        page.locator(f"#{chart_id}").scroll_into_view_if_needed()
        expect(page.locator(f"#{chart_id} .legendtext")).to_have_count(2, timeout=15_000)
        assert_legible(page, chart_id, width)


@pytest.mark.parametrize("width", WIDTHS)
def test_cohort_panels_share_one_scale_in_counts_and_in_percent(two_releases, live_server, page, width) -> None:
    by_locale, _ = two_releases
    page.set_viewport_size({"width": width, "height": 900})
    sign_in(page, live_server.url, f"/rounds/{by_locale.pk}/")
    chart = page.locator("#chart")
    expect(chart.locator(".bars .point").first).to_be_attached(timeout=15_000)
    assert_legible(page, "chart", width)
    ranges = "() => { const l = document.getElementById('chart')._fullLayout; return Object.keys(l).filter((k) => /^yaxis\\d*$/.test(k)).sort().map((k) => l[k].range); }"
    counts = page.evaluate(ranges)
    assert len(counts) == 5 and all(r == counts[0] for r in counts)  # five locales, one y scale

    page.get_by_label("percent of each cohort's reports").check()
    expect(chart.locator(".g-ytitle")).to_contain_text("%")
    percent = page.evaluate(ranges)
    assert all(r == percent[0] for r in percent) and percent[0][1] < counts[0][1]
    shown = page.evaluate(
        """() => { const release = JSON.parse(document.getElementById('release-data').textContent);
                   const gd = document.getElementById('chart');
                   return release.batches.map((b, k) => [b.reports, b.buckets.map((x) => x.estimate), gd.data[k].y]); }"""
    )
    for reports, estimates, y in shown:
        assert y == pytest.approx([100 * e / reports for e in estimates])
    assert_legible(page, "chart", width)
    page.get_by_label("counts", exact=True).check()
    expect(chart.locator(".g-ytitle")).to_contain_text("estimated devices")


@pytest.mark.parametrize("width", WIDTHS)
def test_the_editors_curve_keeps_its_legend_whole(analysis, live_server, page, width) -> None:
    page.set_viewport_size({"width": width, "height": 900})
    sign_in(page, live_server.url, f"/analyses/{analysis.identifier}/")
    # A valid recipe (ε0 3 with ε 1: ε0 3 with the default ε 0.3 needs more devices than the fleet
    # has, and the editor asks no calculator for a refused recipe), so the curve is redrawn.
    page.get_by_label("Aggregate epsilon (ε)").fill("1")
    page.get_by_label("Local epsilon (ε₀)").fill("3")
    expect(page.locator("#recipe-summary")).to_contain_text("Valid")
    expect(page.locator("#curve-chart .legendtext")).to_have_count(4, timeout=15_000)
    page.locator("#curve-chart").scroll_into_view_if_needed()
    assert_legible(page, "curve-chart", width)


@pytest.fixture
def discovered(transactional_db, discovery, analyst):
    """A finished n-gram discovery of t.discovery (tasks inline): "hello world" under "hello"."""
    run = adaptive_start(spec=copy.deepcopy(DISCOVERY_SPEC), user=analyst)
    run.refresh_from_db()
    assert run.status == "finished"
    return run


@pytest.mark.parametrize("width", WIDTHS)
def test_the_discovered_tree_reads_as_a_folding_table(discovered, live_server, page, width) -> None:
    page.set_viewport_size({"width": width, "height": 900})
    sign_in(page, live_server.url, f"/adaptive/{discovered.pk}/")
    tree = page.locator("#tree-table")
    hello = tree.locator('tr[data-id="hello"] th')
    hello_world = tree.locator('tr[data-id="hello world"] th')
    # The 1-grams first; an extension shows once its prefix is opened, from the keyboard too.
    expect(hello).to_be_visible()
    expect(hello_world).to_be_hidden()
    toggle = tree.get_by_role("button", name=re.compile(r"^hello: \d+ extensions?$"))
    expect(toggle).to_have_attribute("aria-expanded", "false")
    toggle.focus()
    page.keyboard.press("Enter")
    expect(toggle).to_have_attribute("aria-expanded", "true")
    expect(hello_world).to_be_visible()
    expect(hello_world).to_have_text("hello world")
    expect(tree.locator('tr[data-id="hello world"] td').nth(2)).to_contain_text("[")  # its interval
    # Indented under its prefix, and the table no wider than the screen (it scrolls in its box).
    text_left = """(id) => { const th = document.querySelector(`#tree-table tr[data-id="${id}"] th`);
        const text = [...th.childNodes].find((n) => n.nodeType === 3 && n.textContent.trim());
        const range = document.createRange(); range.selectNodeContents(text);
        return range.getBoundingClientRect().left; }"""
    assert page.evaluate(text_left, "hello world") >= page.evaluate(text_left, "hello") + 20
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    toggle.click()
    expect(hello_world).to_be_hidden()
    # The sunburst is still there for who wants it, drawn when opened.
    page.get_by_text("The tree as a sunburst").click()
    expect(page.locator("#tree-chart g.slice").first).to_be_attached(timeout=15_000)
