"""In a real Chromium: the start form of an adaptive run keeps its fields and the spec JSON in sync,
reads a vocabulary file, shows the budget plan as you type, and checks it on the server before any
start."""

from __future__ import annotations

import copy
import json
import re

import pytest
from playwright.sync_api import expect

from analyses.models import AdaptiveRun, Round
from analyses.services.policy import analysis_approve, analysis_create
from devices.fleet_io import fleet_create
from devices.synthetic import TOKENS
from tests.e2e.screenshots import shot
from tests.heavy_hitters import POLICY as HH_POLICY

pytestmark = pytest.mark.e2e


def sign_in(page, url: str) -> None:
    page.goto(url)
    page.get_by_label("Username").fill("alice")
    page.get_by_label("Password").fill("alice-password")
    page.get_by_role("button", name="Sign in").click()


def spec_of(page) -> dict:
    return json.loads(page.get_by_label("Spec (JSON)").input_value())


def test_the_form_and_the_json_stay_in_sync_and_the_plan_shows_before_start(discovery, live_server, page) -> None:
    sign_in(page, f"{live_server.url}/analyses/t.discovery/adaptive/")
    rounds = page.get_by_label("Rounds", exact=True)
    per_round = page.get_by_label("Aggregate epsilon per round (ε)")
    plan = page.locator("#plan-preview")
    expect(rounds).to_have_value("3")
    assert spec_of(page)["vocabulary"] == list(TOKENS)
    expect(page.locator("#plan-sum")).to_contain_text("3 rounds: ε 3 of the 3 left for the analysis")

    # Fields write the JSON, and the plan follows.
    rounds.fill("2")
    expect(plan.locator("tbody tr")).to_have_count(2)
    expect(page.locator("#plan-sum")).to_contain_text(
        "2 rounds: ε 2 of the 3 left for the analysis and of the 3 left for field ngrams"
    )
    assert spec_of(page)["maxLength"] == 2
    per_round.fill("2")
    # ε 4 over the plain sum of 3 left, within the reports: the devices' accountant (tightest)
    # composes tighter, so the page leaves the verdict to the server's check, never "refused" when
    # the server would accept it.
    expect(page.locator("#plan-sum")).to_contain_text(
        "Over the plain sums of what is left; the tightest accountant devices use composes tighter"
    )
    rounds.fill("4")  # more rounds than reports left: refused whatever the accountant
    expect(page.locator("#plan-sum")).to_contain_text("Over what is left: the start would be refused.")
    rounds.fill("2")

    # The JSON writes the fields.
    box = page.get_by_label("Spec (JSON)")
    box.fill(box.input_value().replace('"epsilonPerRound": 2', '"epsilonPerRound": 0.5'))
    expect(per_round).to_have_value("0.5")
    expect(page.locator("#plan-sum")).to_contain_text("2 rounds: ε 1 of the 3 left")

    # A vocabulary file replaces the list.
    page.get_by_label("…or a vocabulary file").set_input_files(
        files=[{"name": "words.txt", "mimeType": "text/plain", "buffer": "\n".join(TOKENS[:40]).encode()}]
    )
    expect(page.get_by_label("Vocabulary", exact=True)).to_have_value(", ".join(TOKENS[:40]))
    assert spec_of(page)["vocabulary"] == list(TOKENS[:40])

    # The server checks the plan: each round with its minimum cohort; nothing starts.
    page.get_by_role("button", name="Check the plan").click()
    checked = page.locator("#plan-checked")
    expect(checked.locator("tbody tr")).to_have_count(2)
    expect(page.locator("#plan-verdict")).to_contain_text("The plan fits: it spends ε 1 of the 3 left")
    shot(page, "adaptive_start", page.locator("section", has=page.locator("#adaptive-form")))
    expect(page.get_by_label("Rounds", exact=True)).to_have_value("2")
    assert spec_of(page)["vocabulary"] == list(TOKENS[:40])
    assert not AdaptiveRun.objects.exists() and not Round.objects.exists()


def test_the_kind_shows_its_own_fields(analysis, live_server, page) -> None:
    sign_in(page, f"{live_server.url}/analyses/test.ages/adaptive/")
    vocabulary = page.get_by_label("Vocabulary", exact=True)
    boundaries = page.get_by_label("First bucket boundaries")
    expect(vocabulary).to_be_visible()
    expect(boundaries).to_be_hidden()
    page.get_by_label("bucket refinement (numbers)").check()
    expect(boundaries).to_be_visible()
    expect(vocabulary).to_be_hidden()
    expect(page.get_by_label("Field", exact=True)).to_have_value("age")
    boundaries.fill("0, 20, 40, 60, 80, 100")
    spec = spec_of(page)
    assert (spec["kind"], spec["field"], spec["boundaries"]) == ("bucket_refinement", "age", [0, 20, 40, 60, 80, 100])
    assert "vocabulary" not in spec and re.fullmatch(r"\d+", str(spec["maxRounds"]))


def test_each_kind_reads_help_in_its_own_words(analysis, live_server, page) -> None:
    # Issue 31, item 8: an analyst refining buckets read of n-grams and of pruning a tree.
    sign_in(page, f"{live_server.url}/analyses/test.ages/adaptive/")
    page.get_by_label("bucket refinement (numbers)").check()
    form = page.locator("#adaptive-form")
    expect(form.get_by_text("How many rounds of splitting, at most.")).to_be_visible()
    expect(
        form.get_by_text("A bucket is split when its estimate is this many standard errors above 0.")
    ).to_be_visible()
    visible_help = " ".join(form.locator("small:visible").all_inner_texts())
    assert "n-gram" not in visible_help, visible_help
    page.get_by_label("n-gram discovery (text)").check()
    expect(form.get_by_text("The longest n-gram: one word (or letter) a round.")).to_be_visible()
    expect(form.get_by_text("How many rounds of splitting, at most.")).to_be_hidden()


@pytest.fixture
def hh_analysis(analyst, officer):
    """t.hh: its text field ngrams allows aggregator noise, so a heavy-hitters walk can run on it."""
    fleet_create(name="hh", size=2_000, seed=5, shard_size=1_000)
    return analysis_approve(analysis=analysis_create(spec=copy.deepcopy(HH_POLICY), owner=analyst), officer=officer)


def test_a_walk_hides_the_local_randomizer_and_plans_one_round(hh_analysis, live_server, page) -> None:
    sign_in(page, f"{live_server.url}/analyses/t.hh/adaptive/")
    randomizer = page.get_by_label("Local randomizer")
    local_epsilon = page.get_by_label("Local epsilon (ε₀)")
    longest = page.get_by_label("Longest word (bytes)")
    expect(randomizer).to_be_visible()
    expect(longest).to_be_hidden()

    page.get_by_label("heavy hitters, Poplar1 (text, no local noise)").check()
    for hidden in (
        randomizer,
        local_epsilon,
        page.get_by_label("Aggregate epsilon per round (ε)"),
        page.get_by_label("Rounds", exact=True),
        page.get_by_label("Vocabulary", exact=True),
    ):
        expect(hidden).to_be_hidden()
    expect(longest).to_have_value("8")
    expect(page.get_by_label("Alphabet")).to_have_value("abcdefghijklmnopqrstuvwxyz")
    spec = spec_of(page)
    assert spec["kind"] == "heavy_hitters" and spec["maxLength"] == 8
    assert set(spec["privacy"]) == {"epsilon", "delta", "samplingRate"} and "vocabulary" not in spec
    expect(page.locator("#plan-sum")).to_contain_text("1 round: ε 3 of the 3 left for the analysis")

    page.get_by_label("n-gram discovery (text)").check()
    expect(randomizer).to_be_visible()
    expect(longest).to_be_hidden()
    assert "epsilon" not in spec_of(page)["privacy"]
