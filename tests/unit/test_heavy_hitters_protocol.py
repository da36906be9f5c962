"""Heavy hitters with Poplar1 across the two aggregators (aggregation.heavy_hitters_leader and
aggregation.heavy_hitters_helper), the helper's views reached through the leader's one door
(aggregation.helper_client, in-process here; tests/integration/test_heavy_hitters_two_services.py runs
the helper as its own process).

Each attack is tried twice: through the leader (which refuses on its own record), and as a leader
that lies would send it straight to the helper, with the collection's auth token (which the helper
refuses on its own record). A refusal writes nothing at the helper.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from aggregation import dap, dap_poplar1, helper_client
from aggregation import heavy_hitters as hh
from aggregation import heavy_hitters_leader as leader
from aggregation.models import CollectionRules, Poplar1Job, Poplar1Level, Poplar1Report
from pfs_base.errors import NotAllowed
from privacy.heavy_hitters import level_sigma, prefix_text, word_bits
from privacy.vdaf.poplar1 import Poplar1

pytestmark = pytest.mark.django_db

BITS = 16
MIN_COHORT = 10
EPSILON, DELTA, LEVELS = 8.0, 1e-6, 2
WORDS = ["ab"] * 20 + ["ac"] * 8 + ["cd"] * 15 + ["ef"]  # 44 devices
HELPER = "helper"


def _prefix(text: str) -> tuple[bool, ...]:
    return word_bits(text, 8 * len(text))


def _param(*texts: str) -> tuple[int, list[tuple[bool, ...]]]:
    prefixes = sorted(_prefix(text) for text in texts)
    return len(prefixes[0]) - 1, prefixes


@pytest.fixture(autouse=True)
def seeded_noise(monkeypatch):
    """Each aggregator's noise from a seeded generator: the same draw on every run."""
    rng = np.random.default_rng(20261126)
    monkeypatch.setattr(hh, "noise_rng", lambda: rng)


@pytest.fixture
def collection(db) -> CollectionRules:
    rules = leader.collection_open(
        collection_key="hh/t/1", bits=BITS, min_cohort=MIN_COHORT, epsilon=EPSILON, delta=DELTA, levels=LEVELS
    )
    assert leader.simulated_reports(rules, [word_bits(word, BITS) for word in WORDS]) == len(WORDS)
    return rules


def _send(collection: CollectionRules, method: str, path: str, message: str, request) -> bytes:  # noqa: ANN001
    """What a leader that lies sends the helper: any message, with the collection's own auth token."""
    return helper_client.call(method, collection.key, path, message, dap.encode(request), expect=(200, 204))


def _helper_state(key: str) -> tuple:
    levels = list(Poplar1Level.objects.using(HELPER).filter(collection_key=key).values_list("level", "released"))
    reports = sorted(
        Poplar1Report.objects.using(HELPER).filter(collection_key=key).values_list("last_level", "refused")
    )
    return levels, reports, Poplar1Job.objects.using(HELPER).filter(collection_key=key).count()


def _within(counts: dict[str, int], expected: dict[str, int], sigma: float) -> None:
    # Two aggregators' independent noise: standard deviation at most sigma sqrt 2; 4 of them.
    tolerance = 4 * sigma * math.sqrt(2)
    for key, value in expected.items():
        assert abs(counts[hh.prefix_key(_prefix(key))] - value) <= tolerance, (key, counts)


# ------------------------------------------------------------------ an honest walk


def test_a_walk_counts_each_prefix_with_both_aggregators_noise(collection) -> None:
    first = leader.level_run(collection.key, _param("a", "c", "e", "z"))
    sigma = level_sigma(EPSILON, DELTA, LEVELS)
    assert first.sigma == sigma and first.reports == len(WORDS) and first.refused == {}
    _within(first.counts, {"a": 28, "c": 15, "e": 1, "z": 0}, sigma)
    # The next level looks only under prefixes released with at least the minimum cohort.
    second = leader.level_run(collection.key, _param("ab", "ac", "cd", "ce"))
    _within(second.counts, {"ab": 20, "ac": 8, "cd": 15, "ce": 0}, sigma)
    assert {prefix_text(_prefix("ab")), prefix_text(_prefix("cd"))} == {"ab", "cd"}
    # The helper learnt the released counts and nothing else; once the collection's last level is
    # released, neither aggregator keeps a share of a device's word.
    levels, reports, jobs = _helper_state(collection.key)
    assert levels == [(7, True), (15, True)] and reports == [] and jobs == 0
    assert not Poplar1Report.objects.filter(collection_key=collection.key).exists()


def test_the_first_level_closes_the_collection_to_new_reports(collection) -> None:
    leader.level_run(collection.key, _param("a", "c"))
    with pytest.raises(helper_client.HelperRefused, match="takes no more reports"):
        leader.simulated_reports(collection, [word_bits("zz", BITS)])


# ------------------------------------------------------------------ malformed reports


def _tampered(collection: CollectionRules, word: str, *, splice: bool) -> str:
    """A report whose IDPF is not one path with a count of one: a flipped byte in the public share's
    correction words (a wrong correction word), or the helper's key of another report (two paths)."""
    vdaf, ctx = Poplar1(BITS), hh.context(collection.key)
    nonce = hh.nonce_new()
    public, shares = vdaf.shard(ctx, word_bits(word, BITS), nonce, bytes(range(vdaf.RAND_SIZE)))
    encoded = bytearray(vdaf.encode_public_share(public))
    helper_share = vdaf.encode_input_share(shares[1])
    if splice:
        _, other = vdaf.shard(ctx, word_bits("cd", BITS), nonce, bytes(reversed(range(vdaf.RAND_SIZE))))
        helper_share = vdaf.encode_input_share(other[1])[: vdaf.idpf.KEY_SIZE] + helper_share[vdaf.idpf.KEY_SIZE :]
    else:
        encoded[1] ^= 0x01  # inside level 0's seed correction word (after the packed control bits)
    request = dap_poplar1.Poplar1ReportsReq(
        collection=collection.key,
        reports=[
            dap_poplar1.Poplar1Report(nonce.hex(), dap.b64(bytes(encoded)), dap.b64(helper_share)),
        ],
    )
    _send(collection, "POST", "/poplar1_reports", dap_poplar1.REPORTS, request)
    Poplar1Report.objects.create(
        collection_key=collection.key,
        report_id=nonce.hex(),
        nonce=nonce,
        public_share=bytes(encoded),
        input_share=vdaf.encode_input_share(shares[0]),
    )
    return nonce.hex()


@pytest.mark.parametrize("splice", [False, True], ids=["wrong-correction-word", "two-paths"])
def test_a_malformed_idpf_key_is_refused_by_both_aggregators_and_counts_nowhere(collection, splice) -> None:
    bad = _tampered(collection, "ab", splice=splice)
    release = leader.level_run(collection.key, _param("a", "c"))
    assert release.reports == len(WORDS) and release.refused == {"proof_invalid": 1}
    for store in ("default", HELPER):
        row = Poplar1Report.objects.using(store).get(collection_key=collection.key, report_id=bad)
        assert row.refused, store
    # At the next level neither aggregator verifies it again.
    second = leader.level_run(collection.key, _param("ab", "cd"))
    assert second.reports == len(WORDS)


# ------------------------------------------------------------------ the aggregation parameter


def _job(collection, job: str, agg_param, ids=None) -> dap_poplar1.Poplar1JobResp:  # noqa: ANN001
    """A job's first step as a lying leader sends it: honest first shares of its reports at any
    parameter, computed whatever its own record says."""
    vdaf = Poplar1(collection.length)
    rows = Poplar1Report.objects.filter(collection_key=collection.key).order_by("report_id")
    rows = [row for row in rows if ids is None or row.report_id in ids]
    shares = []
    for row in rows:
        _, share = vdaf.verify_init(
            bytes(collection.verify_key),
            hh.context(collection.key),
            hh.LEADER,
            agg_param,
            bytes(row.nonce),
            vdaf.decode_public_share(bytes(row.public_share)),
            vdaf.decode_input_share(hh.LEADER, bytes(row.input_share)),
        )
        shares.append(dap_poplar1.Poplar1Share(row.report_id, dap.b64(vdaf.encode_verifier_share(agg_param, share))))
    # Once a collection's levels are spent its reports are gone: a made-up one asks all the same.
    shares = shares or [dap_poplar1.Poplar1Share("00" * 16, dap.b64(bytes(24)))]
    request = dap_poplar1.Poplar1JobInitReq(
        collection=collection.key, agg_param=dap.b64(vdaf.encode_agg_param(agg_param)), shares=shares
    )
    return dap_poplar1.Poplar1JobResp.parse(
        _send(collection, "PUT", f"/poplar1_jobs/{job}", dap_poplar1.JOB_INIT, request)
    )


def test_a_released_level_is_never_verified_again(collection) -> None:
    first = leader.level_run(collection.key, _param("a", "c"))
    before = _helper_state(collection.key)
    # The same question again at the leader (a walk resumed after a stop) reads its release back:
    # the same noisy counts, nothing verified or asked of the helper; another question is refused.
    assert leader.level_run(collection.key, _param("a", "c")).counts == first.counts
    assert _helper_state(collection.key) == before
    with pytest.raises(NotAllowed, match="released already"):
        leader.level_run(collection.key, _param("a", "e"))
    with pytest.raises(helper_client.HelperRefused, match="released already") as refused:
        _job(collection, "again", _param("a", "c"))
    assert refused.value.status == 403 and _helper_state(collection.key) == before


def test_another_prefix_set_at_an_open_level_is_a_conflict_at_the_helper(collection) -> None:
    ids = sorted(Poplar1Report.objects.filter(collection_key=collection.key).values_list("report_id", flat=True))
    _job(collection, "first", _param("a", "c"), ids[:10])
    before = _helper_state(collection.key)
    with pytest.raises(helper_client.HelperRefused, match="another prefix set") as refused:
        _job(collection, "second", _param("a", "e"), ids[10:])
    assert refused.value.status == 409 and _helper_state(collection.key) == before


def test_a_report_replayed_at_its_level_in_another_job_is_rejected(collection) -> None:
    ids = sorted(Poplar1Report.objects.filter(collection_key=collection.key).values_list("report_id", flat=True))
    first = _job(collection, "first", _param("a", "c"), ids[:10])
    assert {r.type for r in first.resps} == {dap.CONTINUE}
    again = _job(collection, "second", _param("a", "c"), ids[5:15])
    assert [r.report_error for r in again.resps[:5]] == [hh.REPORT_REPLAYED] * 5
    assert {r.type for r in again.resps[5:]} == {dap.CONTINUE}


def test_a_shallower_level_after_a_deeper_one_is_refused_by_both(collection) -> None:
    leader.level_run(collection.key, _param("a", "c"))
    leader.level_run(collection.key, _param("ab", "cd"))
    before = _helper_state(collection.key)
    with pytest.raises(NotAllowed, match="never revisited"):
        leader.level_run(collection.key, (11, [_prefix("a")[:7] + (False,) * 5]))
    with pytest.raises(helper_client.HelperRefused, match="never revisited"):
        _job(collection, "lower", (11, [_prefix("a")[:7] + (False,) * 5]))
    assert _helper_state(collection.key) == before


def test_a_leap_of_more_than_a_byte_is_refused_by_both(collection) -> None:
    """From the root straight to whole strings, or from a popular first byte to guessed whole
    strings: each byte of a prefix must be released with the minimum cohort on the way down."""
    with pytest.raises(NotAllowed, match="more than 8 bits below the root"):
        leader.level_run(collection.key, _param("ab", "cd"))
    with pytest.raises(helper_client.HelperRefused, match="more than 8 bits below the root"):
        _job(collection, "leap", _param("ab", "cd"))
    rules = leader.collection_open(
        collection_key="hh/t/leap", bits=24, min_cohort=MIN_COHORT, epsilon=EPSILON, delta=DELTA, levels=2
    )
    leader.simulated_reports(rules, [word_bits(word, 24) for word in WORDS])
    leader.level_run(rules.key, _param("a", "c"))
    before = _helper_state(rules.key)
    with pytest.raises(NotAllowed, match="more than 8 bits below level 7"):
        leader.level_run(rules.key, _param("abc", "cde"))
    with pytest.raises(helper_client.HelperRefused, match="more than 8 bits below level 7"):
        _job(rules, "leap", _param("abc", "cde"))
    assert _helper_state(rules.key) == before


def test_more_levels_than_the_noise_covers_are_refused_by_both(db) -> None:
    rules = leader.collection_open(
        collection_key="hh/t/3", bits=24, min_cohort=MIN_COHORT, epsilon=EPSILON, delta=DELTA, levels=2
    )
    leader.simulated_reports(rules, [word_bits(word, 24) for word in WORDS])
    leader.level_run(rules.key, _param("a", "c"))
    leader.level_run(rules.key, _param("ab", "cd"))
    with pytest.raises(NotAllowed, match="2 levels are spent"):
        leader.level_run(rules.key, _param("abc", "cde"))
    with pytest.raises(helper_client.HelperRefused, match="2 levels are spent"):
        _job(rules, "third", _param("abc", "cde"))


def test_a_prefix_set_that_isolates_a_rare_prefix_is_refused_by_both(collection) -> None:
    first = leader.level_run(collection.key, _param("a", "c", "e"))  # "e": one device
    # 4 standard deviations of the two noises below the minimum cohort: released below it on any draw.
    assert 1 + 4 * first.sigma * math.sqrt(2) < MIN_COHORT
    before = _helper_state(collection.key)
    with pytest.raises(NotAllowed, match="minimum cohort of 10"):
        leader.level_run(collection.key, _param("ab", "ef"))
    with pytest.raises(helper_client.HelperRefused, match="minimum cohort of 10") as refused:
        _job(collection, "isolate", _param("ef"))
    assert refused.value.status == 403 and _helper_state(collection.key) == before
    assert not Poplar1Level.objects.filter(collection_key=collection.key, level=15).exists()


def test_prefixes_off_the_tree_or_unsorted_are_refused_by_the_helper(collection) -> None:
    vdaf = Poplar1(BITS)
    unsorted = vdaf.encode_agg_param((7, [_prefix("c"), _prefix("a")]))
    request = dap_poplar1.Poplar1JobInitReq(
        collection=collection.key,
        agg_param=dap.b64(unsorted),
        shares=[dap_poplar1.Poplar1Share("00" * 16, dap.b64(b"\0" * 24))],
    )
    with pytest.raises(helper_client.HelperRefused, match="distinct, sorted") as refused:
        _send(collection, "PUT", "/poplar1_jobs/x", dap_poplar1.JOB_INIT, request)
    assert refused.value.status == 403 and _helper_state(collection.key)[0] == []


# ------------------------------------------------------------------ the release


def test_a_level_below_the_minimum_cohort_is_not_released_by_either(db) -> None:
    rules = leader.collection_open(
        collection_key="hh/t/2", bits=BITS, min_cohort=50, epsilon=EPSILON, delta=DELTA, levels=LEVELS
    )
    leader.simulated_reports(rules, [word_bits(word, BITS) for word in WORDS])  # 44 devices
    with pytest.raises(NotAllowed, match="44 verified reports, fewer than the minimum cohort of 50"):
        leader.level_run(rules.key, _param("a", "c"))
    share = dap_poplar1.Poplar1ShareReq(collection=rules.key, level=7, reports=44, leader_share=dap.b64(bytes(16)))
    with pytest.raises(helper_client.HelperRefused, match="fewer than the minimum cohort of 50"):
        _send(rules, "POST", "/poplar1_aggregate_shares", dap_poplar1.SHARE_REQ, share)
    assert not Poplar1Level.objects.using(HELPER).filter(collection_key=rules.key, released=True).exists()


def test_a_level_is_released_once_and_a_retry_gets_the_same_noise(collection) -> None:
    leader.level_run(collection.key, _param("a", "c"))
    row = Poplar1Level.objects.get(collection_key=collection.key, level=7)
    same = dap_poplar1.Poplar1ShareReq(
        collection=collection.key, level=7, reports=len(WORDS), leader_share=dap.b64(bytes(row.release))
    )
    first = _send(collection, "POST", "/poplar1_aggregate_shares", dap_poplar1.SHARE_REQ, same)
    assert first == _send(collection, "POST", "/poplar1_aggregate_shares", dap_poplar1.SHARE_REQ, same)
    other = dap_poplar1.Poplar1ShareReq(
        collection=collection.key, level=7, reports=len(WORDS), leader_share=dap.b64(bytes(16))
    )
    with pytest.raises(helper_client.HelperRefused, match="released already") as refused:
        _send(collection, "POST", "/poplar1_aggregate_shares", dap_poplar1.SHARE_REQ, other)
    assert refused.value.status == 409


def test_a_retried_job_is_answered_as_before_and_counts_once(collection) -> None:
    ids = sorted(Poplar1Report.objects.filter(collection_key=collection.key).values_list("report_id", flat=True))
    first = _job(collection, "same", _param("a", "c"), ids)
    assert _job(collection, "same", _param("a", "c"), ids) == first


def test_a_leader_that_stops_after_the_helper_answered_counts_each_report_once(collection, monkeypatch) -> None:
    """The leader dies between the helper's commit of a job and its own: run again, the level sends
    the helper the same job (its id is the digest of what it holds), gets the same answers, and both
    aggregators count every report once."""
    real, calls = hh.share_add, []

    def dies_at_the_leaders_commit(*args):  # noqa: ANN002, ANN202
        calls.append(1)
        if len(calls) == 2:  # the helper's continue adds first (in this process), then the leader
            raise RuntimeError("the leader's process is killed")
        return real(*args)

    monkeypatch.setattr(hh, "share_add", dies_at_the_leaders_commit)
    with pytest.raises(RuntimeError, match="killed"):
        leader.level_run(collection.key, _param("a", "c"))
    release = leader.level_run(collection.key, _param("a", "c"))
    assert release.reports == len(WORDS)
    _within(release.counts, {"a": 28, "c": 15}, release.sigma)
    helper_level = Poplar1Level.objects.using(HELPER).get(collection_key=collection.key, level=7)
    assert helper_level.reports == len(WORDS) and Poplar1Job.objects.using(HELPER).count() == 1


# ------------------------------------------------------------------ the task


def test_the_helper_takes_no_poplar1_task_without_noise_or_levels(db) -> None:
    for change in ({"noise_epsilon": None}, {"noise_delta": 0.0}, {"levels": None}):
        config = dap.TaskConfig(
            collection="hh/t/noiseless",
            length=BITS,
            min_cohort=MIN_COHORT,
            weight_bound=1,
            vdaf=hh.VDAF,
            verify_key=dap.b64(bytes(32)),
            noise_epsilon=EPSILON,
            noise_delta=DELTA,
            token_key=None,
            levels=LEVELS,
        )
        config = dap.TaskConfig(**{**config.__dict__, **change})
        with pytest.raises(helper_client.HelperRefused, match="needs aggregator noise") as refused:
            helper_client.call("PUT", config.collection, "", dap.TASK_CONFIG, dap.encode(config), expect=(201,))
        assert refused.value.status == 403
    assert not CollectionRules.objects.using(HELPER).filter(key="hh/t/noiseless").exists()


def test_a_poplar1_collection_takes_no_prio3_job_or_release(collection) -> None:
    request = dap.AggregateShareReq(collection=collection.key, batches={"": []})
    with pytest.raises(helper_client.HelperRefused, match="takes no Prio3") as refused:
        helper_client.aggregate_shares(request)
    assert refused.value.status == 403


def test_a_poplar1_job_with_a_wrong_auth_token_is_refused(collection, client) -> None:
    task = dap.task_id(collection.key)
    answer = helper_client._send_in_process(
        "PUT",
        f"/tasks/{task}/poplar1_jobs/x",
        dap.encode(dap_poplar1.Poplar1JobContinueReq(collection=collection.key, shares=[])),
        {"Content-Type": dap.media_type(dap_poplar1.JOB_INIT), "Authorization": "Bearer wrong"},
    )
    assert answer.status == 401


def test_a_continue_for_a_job_never_started_is_unknown(collection) -> None:
    request = dap_poplar1.Poplar1JobContinueReq(
        collection=collection.key, shares=[dap_poplar1.Poplar1Share("00" * 16, dap.b64(bytes(8)))]
    )
    with pytest.raises(helper_client.HelperRefused) as refused:
        _send(collection, "POST", "/poplar1_jobs/never", dap_poplar1.JOB_CONTINUE, request)
    assert refused.value.status == 404 and refused.value.code == "unrecognized_aggregation_job"


def test_a_simulated_report_replayed_with_other_shares_is_a_conflict(collection) -> None:
    held, other = Poplar1Report.objects.using(HELPER).filter(collection_key=collection.key)[:2]
    request = dap_poplar1.Poplar1ReportsReq(
        collection=collection.key,
        reports=[
            dap_poplar1.Poplar1Report(
                held.report_id, dap.b64(bytes(held.public_share)), dap.b64(bytes(other.input_share))
            )
        ],
    )
    with pytest.raises(helper_client.HelperRefused, match="used once") as refused:
        _send(collection, "POST", "/poplar1_reports", dap_poplar1.REPORTS, request)
    assert refused.value.status == 409


def test_a_job_too_large_for_the_helpers_memory_is_refused_and_the_leader_sizes_its_jobs_under_it(
    collection, monkeypatch
) -> None:
    monkeypatch.setattr(dap_poplar1, "MAX_JOB_ELEMENTS", 20)  # 10 reports of 2 prefixes
    ids = sorted(Poplar1Report.objects.filter(collection_key=collection.key).values_list("report_id", flat=True))
    with pytest.raises(helper_client.HelperRefused, match="send smaller jobs") as refused:
        _job(collection, "big", _param("a", "c"), ids[:11])
    assert refused.value.status == 403 and _helper_state(collection.key)[0] == []
    release = leader.level_run(collection.key, _param("a", "c"))
    assert release.reports == len(WORDS) and Poplar1Job.objects.using(HELPER).count() == 5  # 44 reports, 10 a job


def test_a_report_that_cannot_be_verified_refuses_itself_only(collection) -> None:
    """verify_init runs batched over a job's reports; one the batch cannot take (here a stored nonce
    of the wrong length) is refused alone, and the others are verified all the same."""
    broken = Poplar1Report.objects.filter(collection_key=collection.key).order_by("report_id").first()
    Poplar1Report.objects.filter(pk=broken.pk).update(nonce=bytes(broken.nonce)[:15])
    ids = sorted(Poplar1Report.objects.filter(collection_key=collection.key).values_list("report_id", flat=True))
    prepared, _ = hh.prepare("default", collection, hh.LEADER, _param("a", "c"), ids)
    assert prepared.refused == {broken.report_id: "share_malformed"} and len(prepared.states) == len(WORDS) - 1
