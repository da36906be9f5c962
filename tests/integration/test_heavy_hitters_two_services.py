"""Poplar1 heavy hitters with the leader and the helper as two processes (aggregation.heavy_hitters_leader
here, the helper's own service as `make helper` runs it), and the faults between them: the helper
killed in the middle of a level and restarted (each report counted exactly once, by both), the helper
down at a level's release (nothing released by the leader alone; a retry releases the same level),
a wrong auth token (refused and logged); and real devices' reports, each share sealed to its
aggregator's key, kept by the helper's own service (the helper down meanwhile: none lost)."""

from __future__ import annotations

import math
import threading
import time

import pytest
from django.db import connections

from aggregation import heavy_hitters_leader as leader
from aggregation import helper_client
from aggregation.aggregators import LEADER
from aggregation.ingest import reports_ingest
from aggregation.issuer import issuer_public_key, token_issue
from aggregation.models import PendingReport, Poplar1Level, Poplar1Report
from pfs_device.report_client import AggregatorKeys, report_token_obtain, word_report_seal
from privacy.heavy_hitters import word_bits
from tests.integration.test_two_services import helper  # noqa: F401 (the helper's process, a fixture)
from tests.unit.test_report_ingest import receive

pytestmark = [pytest.mark.integration, pytest.mark.django_db]

BITS = 16
WORDS = ["ab"] * 120 + ["cd"] * 60 + ["ef"] * 20  # 200 devices


def _open(key: str) -> object:
    rules = leader.collection_open(collection_key=key, bits=BITS, min_cohort=10, epsilon=8.0, delta=1e-6, levels=2)
    leader.simulated_reports(rules, [word_bits(word, BITS) for word in WORDS])
    return rules


def _param(*texts: str) -> tuple[int, list[tuple[bool, ...]]]:
    prefixes = sorted(word_bits(text, 8 * len(text)) for text in texts)
    return len(prefixes[0]) - 1, prefixes


def _near(release: leader.LevelRelease, key: str, expected: int) -> bool:
    bits = "".join("1" if b else "0" for b in word_bits(key, 8 * len(key)))
    return abs(release.counts[bits] - expected) <= 4 * release.sigma * math.sqrt(2)


def test_a_walk_through_two_processes_counts_with_both_noises(helper) -> None:  # noqa: F811
    rules = _open("hh/two/1")
    first = leader.level_run(rules.key, _param("a", "c", "e", "z"))
    assert first.reports == 200 and _near(first, "a", 120) and _near(first, "c", 60) and _near(first, "z", 0)
    second = leader.level_run(rules.key, _param("ab", "cd"))
    assert second.reports == 200 and _near(second, "ab", 120) and _near(second, "cd", 60)
    # The helper's store: both levels released, and, the collection's levels spent, no share left.
    assert helper.rows("SELECT level, released FROM aggregation_poplar1level ORDER BY level") == [(7, 1), (15, 1)]
    assert helper.rows("SELECT COUNT(*) FROM aggregation_poplar1report") == [(0,)]


@pytest.mark.django_db(transaction=True)  # the level runs in a thread of its own: committed rows
def test_the_helper_killed_mid_level_and_restarted_counts_each_report_exactly_once(helper, monkeypatch) -> None:  # noqa: F811
    rules = _open("hh/two/2")
    monkeypatch.setattr(leader, "JOB_REPORTS", 10)  # twenty jobs: many still to go when the helper dies
    errors: list[BaseException] = []

    def level() -> None:
        try:
            leader.level_run(rules.key, _param("a", "c"))
        except helper_client.HelperUnavailable as error:
            errors.append(error)
        finally:
            connections.close_all()

    worker = threading.Thread(target=level)
    worker.start()
    deadline = time.monotonic() + 60
    while helper.rows("SELECT COUNT(*) FROM aggregation_poplar1job")[0][0] < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    helper.kill()
    worker.join(timeout=120)
    assert errors, "the level should have met the dead helper"
    helper.start()
    release = leader.level_run(rules.key, _param("a", "c"))
    # Both aggregators counted each report once: the jobs the helper had finished were answered again
    # from its record, the one in flight was finished, the rest ran anew.
    assert release.reports == 200 and release.refused == {}
    assert helper.rows("SELECT reports FROM aggregation_poplar1level") == [(200,)]
    assert _near(release, "a", 120) and _near(release, "c", 60)


def test_the_helper_down_at_the_release_releases_nothing_and_a_retry_releases_the_level(helper) -> None:  # noqa: F811
    rules = _open("hh/two/3")
    real = leader._release

    def helper_dies_first(*args):  # noqa: ANN002, ANN202
        helper.stop()
        return real(*args)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(leader, "_release", helper_dies_first)
        with pytest.raises(helper_client.HelperUnavailable):
            leader.level_run(rules.key, _param("a", "c"))
    assert not Poplar1Level.objects.filter(collection_key=rules.key, released=True).exists()
    helper.start()
    release = leader.level_run(rules.key, _param("a", "c"))
    assert release.reports == 200 and _near(release, "a", 120)


def test_a_poplar1_leader_with_a_wrong_auth_token_is_refused_and_logged(helper, settings) -> None:  # noqa: F811
    rules = _open("hh/two/4")
    settings.PFS_AGGREGATOR_AUTH_SECRET = b"not-the-secret-we-exchanged"
    with pytest.raises(helper_client.HelperRefused) as refused:
        leader.level_run(rules.key, _param("a", "c"))
    assert refused.value.status == 401 and "wrong aggregator auth token" in helper.log()
    assert helper.rows("SELECT COUNT(*) FROM aggregation_poplar1level") == [(0,)]


# ---------------------------------------------------------------- real devices' reports, sealed


def _devices_upload(key: str, words: list[str], *, first: int = 0) -> None:
    """Devices' Poplar1 reports received by the leader: each word sharded and sealed to each
    aggregator's key (the helper's as the helper serves it), under a token issued for its report."""
    keys = AggregatorKeys(leader=LEADER.public_key(), helper=helper_client.public_key())
    for i, word in enumerate(words, start=first):
        sealed = word_report_seal(collection_key=key, batch_key="", word=word, bits=BITS, keys=keys)
        receive(
            report_token_obtain(
                report=sealed,
                issuer=issuer_public_key(key),
                issue=lambda blinded, device=f"device-{i}": token_issue(
                    collection_key=key, device_identity=device, blinded=blinded
                ),
            )
        )


def _open_for_devices(key: str) -> object:
    return leader.collection_open(
        collection_key=key,
        bits=BITS,
        min_cohort=10,
        epsilon=8.0,
        delta=1e-6,
        levels=2,
        token_key=issuer_public_key(key),
    )


def test_devices_reports_reach_the_helper_sealed_and_are_walked(helper) -> None:  # noqa: F811
    rules = _open_for_devices("hh/two/devices-1")
    words = ["ab"] * 30 + ["cd"] * 20
    _devices_upload(rules.key, words)
    assert reports_ingest(collection_key=rules.key).accepted == len(words)
    # The helper opened its own shares with its own key and keeps them, and its spent tokens, in its
    # own file; a replay of the same job is answered from its record.
    assert helper.rows("SELECT COUNT(*) FROM aggregation_poplar1report") == [(len(words),)]
    assert helper.rows("SELECT COUNT(*) FROM aggregation_spenttoken") == [(len(words),)]
    assert not Poplar1Report.objects.using("helper").exists()  # nothing of the helper's in this process
    first = leader.level_run(rules.key, _param("a", "c"))
    assert first.reports == len(words) and _near(first, "a", 30) and _near(first, "c", 20)


def test_the_helper_down_during_devices_uploads_loses_none_and_counts_each_once(helper) -> None:  # noqa: F811
    rules = _open_for_devices("hh/two/devices-2")
    _devices_upload(rules.key, ["ab"] * 12)
    helper.stop()
    with pytest.raises(helper_client.HelperUnavailable):
        reports_ingest(collection_key=rules.key)
    assert PendingReport.objects.filter(collection_key=rules.key).count() == 12
    assert not Poplar1Report.objects.filter(collection_key=rules.key).exists()
    helper.start()
    assert reports_ingest(collection_key=rules.key).accepted == 12
    assert helper.rows("SELECT COUNT(*) FROM aggregation_poplar1report") == [(12,)]
    assert Poplar1Report.objects.filter(collection_key=rules.key).count() == 12
