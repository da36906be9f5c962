"""A heavy-hitters walk over a Poplar1 collection (analyses.services.heavy_hitters): the words it
finds, what it keeps at each level, and its plan (privacy.heavy_hitters.WalkPlan).

The fleet: 150 devices, four frequent words of at most three letters and 35 rare ones (one device
each). The tolerances are the noise's own: a frequent word's count is at least 20, more than 8
standard deviations of the two aggregators' noise (sigma sqrt 2 = 2.3 here) above the threshold
of 4 of them; a rare one would need 4 standard deviations of noise to pass. Each aggregator's noise
is drawn from a seeded generator, so the run is the same every time.
"""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from aggregation import heavy_hitters as hh
from aggregation import heavy_hitters_leader as leader
from aggregation import helper_client
from aggregation.models import Poplar1Level, Poplar1Report
from analyses.services.heavy_hitters import heavy_hitters_walk
from privacy.heavy_hitters import WalkPlan, finished, prefix_extend, prefix_text, word_bits

pytestmark = pytest.mark.django_db

BITS = 24
FREQUENT = {"the": 40, "to": 30, "and": 25, "you": 20}
ALPHABET = b"abcdefghijklmnopqrstuvwxyz"


def _rare(count: int, rng: random.Random) -> list[str]:
    words: set[str] = set()
    while len(words) < count:
        word = "".join(rng.choice("qwxzjvk") for _ in range(rng.randint(2, 3)))
        words.add(word)
    return sorted(words)


@pytest.fixture(autouse=True)
def seeded_noise(monkeypatch):
    rng = np.random.default_rng(32)
    monkeypatch.setattr(hh, "noise_rng", lambda: rng)


def test_a_walk_finds_the_frequent_words_and_none_of_the_rare_ones(db) -> None:
    rare = _rare(35, random.Random(7))
    words = [word for word, count in FREQUENT.items() for _ in range(count)] + rare
    rules = leader.collection_open(
        collection_key="hh/walk/1", bits=BITS, min_cohort=10, epsilon=8.0, delta=1e-6, levels=BITS // 8
    )
    leader.simulated_reports(rules, [word_bits(word, BITS) for word in words])
    plan = WalkPlan(bits=BITS, alphabet=ALPHABET, z=4.0, max_per_level=16)

    walk = heavy_hitters_walk(rules.key, plan)

    assert set(walk.words) == set(FREQUENT)
    for word, count in FREQUENT.items():
        assert abs(walk.words[word] - count) <= 4 * walk.sigma * math.sqrt(2), word
    # Three levels, a byte each, every device verified at each; no rare prefix kept anywhere.
    assert [level.level for level in walk.levels] == [7, 15, 23]
    assert all(level.reports == len(words) for level in walk.levels)
    # A first letter shared by several rare words may be kept (its count is theirs together); its
    # children, each a rare word's, are not.
    assert {"t", "a", "y"} <= set(walk.levels[0].kept)
    kept_first = len(walk.levels[0].kept)
    assert walk.levels[0].asked == len(ALPHABET) and walk.levels[1].asked == kept_first * (len(ALPHABET) + 1)
    # "to" ends at the third byte (its END asked there); "the", "and", "you" fill every byte.
    assert set(walk.levels[2].kept) == set(FREQUENT)
    # The aggregators released exactly those levels, and the collection's levels are spent.
    assert list(Poplar1Level.objects.filter(collection_key=rules.key).values_list("level", flat=True)) == [7, 15, 23]
    # The walk is over: neither aggregator keeps a share of a device's word.
    for store in ("default", "helper"):
        assert not Poplar1Report.objects.using(store).filter(collection_key=rules.key).exists(), store


def test_a_walk_ends_when_nothing_is_kept(db) -> None:
    rules = leader.collection_open(
        collection_key="hh/walk/2", bits=BITS, min_cohort=10, epsilon=8.0, delta=1e-6, levels=BITS // 8
    )
    rare = _rare(30, random.Random(8))
    leader.simulated_reports(rules, [word_bits(word, BITS) for word in rare])
    walk = heavy_hitters_walk(rules.key, WalkPlan(bits=BITS, alphabet=b"abc", z=4.0))
    # No first byte of a rare word is in this alphabet: nothing above the threshold, one level asked.
    assert walk.words == {} and len(walk.levels) == 1 and walk.levels[0].kept == {}
    for store in ("default", "helper"):
        assert not Poplar1Report.objects.using(store).filter(collection_key=rules.key).exists(), store
    with pytest.raises(helper_client.HelperRefused, match="takes no more reports"):
        leader.simulated_reports(rules, [word_bits("abc", BITS)])


def test_a_plan_asks_each_kept_prefix_once_per_byte_and_closes_words() -> None:
    plan = WalkPlan(bits=16, alphabet=b"ba", z=3.0, max_per_level=2)
    first = plan.first()
    assert [prefix_text(p) for p in first] == ["a", "b"]
    a = prefix_extend((), ord("a"))
    assert [prefix_text(p) for p in plan.next([a])] == ["a", "aa", "ab"]
    assert finished(prefix_extend(a, 0)) and not finished(a)
    # A whole word is not extended; the largest counts are kept, ties by prefix.
    assert plan.next([prefix_extend(a, 0)]) == []
    counts = {prefix_extend((), b): n for b, n in ((97, 5), (98, 9), (99, 9))}
    assert [prefix_text(p) for p in plan.keep(counts, threshold=6)] == ["b", "c"]
    assert plan.threshold(sigma=2.0, min_cohort=100) == 100.0
    assert plan.threshold(sigma=2.0, min_cohort=1) == pytest.approx(3 * 2 * math.sqrt(2))


@pytest.mark.parametrize(
    ("bits", "alphabet", "z", "per_level"),
    [(12, b"a", 3.0, 4), (16, b"", 3.0, 4), (16, b"a\0", 3.0, 4), (16, b"a", 0.0, 4), (16, b"a", 3.0, 0)],
)
def test_a_plan_refuses_what_it_cannot_walk(bits, alphabet, z, per_level) -> None:
    with pytest.raises(ValueError):
        WalkPlan(bits=bits, alphabet=alphabet, z=z, max_per_level=per_level)


def test_a_walk_refuses_a_plan_of_other_bits_than_the_collections(db) -> None:
    rules = leader.collection_open(
        collection_key="hh/walk/3", bits=BITS, min_cohort=10, epsilon=8.0, delta=1e-6, levels=BITS // 8
    )
    with pytest.raises(ValueError, match="the collection's"):
        heavy_hitters_walk(rules.key, WalkPlan(bits=32, alphabet=ALPHABET))
