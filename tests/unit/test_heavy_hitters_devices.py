"""Real devices in a heavy-hitters walk: each uploads one Poplar1 report of its word, sealed to each
aggregator's key under its token; both aggregators keep it (aggregation.heavy_hitters_uploads at the
leader, the helper's /poplar1_uploads), and closing the round walks the tree.

The devices are the test itself, speaking the wire format with the device code
(pfs_device.report_client.word_report_seal) through DRF's APIClient, as tests/unit/test_device_http.py
does; one device goes through the SDK (pfs_device.sdk.device.task_answer) against a fake service
that opens both shares and evaluates the IDPF, to show what the SDK sends is the word it typed.
"""

from __future__ import annotations

import copy
import json
import types
from dataclasses import replace

import numpy as np
import pytest

from aggregation import heavy_hitters as hh
from aggregation.aggregators import HELPER, LEADER
from aggregation.models import CollectionRules, PendingReport, Poplar1Report
from aggregation.reports import rejections
from analyses.models import Round
from analyses.services import rounds
from analyses.services.policy import analysis_approve, analysis_create
from pfs_device import hpke, wire
from pfs_device.decision import DeviceTask, snapshot_digest
from pfs_device.report_client import AggregatorKeys, word_report_seal
from pfs_device.sdk.device import Offer, data_read, task_answer
from pfs_device.sdk.ledger import Ledger
from pfs_device.tokens import Token, issuer_key_generate, sign_blinded
from privacy.heavy_hitters import prefix_extend, report_context, word_bits
from privacy.parameters import PrivacyParameters
from privacy.report_vdaf import report_nonce
from privacy.vdaf.poplar1 import Poplar1
from tests.attest import devices_enrol
from tests.unit.test_device_http import Device, start, upload, verify, with_close
from tests.unit.test_device_sdk import Aggregators

pytestmark = pytest.mark.django_db

BITS = 16
POLICY = {
    "identifier": "t.phones",
    "fleet": "phones",
    "queryClass": {"stream": "KeyboardNGrams", "fields": ["ngrams"], "cohortFields": ["locale"]},
    # The officer lets this test fleet release prefixes of 3 devices (the default floor is 1,000).
    "budget": {"epsilon": 20.0, "reports": 4, "delta": 1e-5, "minCohort": 3},
    "fields": {"ngrams": {"localEpsilon": 4.0, "epsilon": 20.0, "reports": 4, "aggregatorNoise": True}},
}
WALK = {
    "recipeIdentifier": "walk",
    "AnalysisIdentifier": "t.phones",
    "query": "select ngrams from KeyboardNGrams",
    "cohorts": [],
    "dataTypeContent": {"ngrams": {"dataType": "Poplar1Words", "bits": BITS, "zScore": 4, "maxPerLevel": 4}},
    # A large epsilon: a unit test's handful of devices must clear the noise. Each aggregator's sigma
    # is then 1.31, so a count's standard error is 1.86 and the threshold 7.4 (z = 4): a word of 15
    # devices clears it by 4 standard errors, a prefix no device holds stays 4 below it.
    "privacy": {"noise": "aggregator", "epsilon": 8.0, "delta": 1e-6, "minCohort": 3},
}
WORDS = ["hi"] * 15 + ["ok"] * 15


@pytest.fixture(autouse=True)
def seeded_noise(monkeypatch):
    rng = np.random.default_rng(7)
    monkeypatch.setattr(hh, "noise_rng", lambda: rng)
    monkeypatch.setattr(rounds, "secrets", types.SimpleNamespace(randbits=lambda bits: 11))


@pytest.fixture
def phones(db):
    fleet, enrolled = devices_enrol(fleet_name="phones", count=1000)
    return fleet, [Device.of(e) for e in enrolled[:32]]


@pytest.fixture
def walk_round(api, phones, analyst, officer) -> Round:
    analysis_approve(analysis=analysis_create(spec=copy.deepcopy(POLICY), owner=analyst), officer=officer)
    return start(api, copy.deepcopy(WALK))


def _keys() -> AggregatorKeys:
    return AggregatorKeys(leader=LEADER.public_key(), helper=HELPER.public_key())


def _report(device: Device, key: str, word: str, *, keys: AggregatorKeys | None = None) -> wire.Report:
    sealed = word_report_seal(collection_key=key, batch_key="", word=word, bits=BITS, keys=keys or _keys())
    return device.sign(sealed)


def test_devices_words_are_walked_once_the_round_closes(
    api, phones, walk_round, django_capture_on_commit_callbacks
) -> None:
    _, devices = phones
    key = walk_round.task_key
    task = devices[0].tasks()["tasks"][0]
    assert task["report_length"] == BITS  # the SDK checks it against the recipe's Poplar1Words bits
    sealed = [_report(device, key, word) for device, word in zip(devices, WORDS, strict=False)]
    for report in sealed:
        assert upload(report).status_code == 202
    assert upload(sealed[0]).status_code == 202  # a replay: rejected once verified
    assert verify(key) == len(WORDS) + 1
    # Both aggregators keep each report whole, under the same id (its token's VDAF nonce).
    ids = {report_nonce(r.token.nonce).hex() for r in sealed}
    for store in ("default", "helper"):
        held = set(Poplar1Report.objects.using(store).filter(collection_key=key).values_list("report_id", flat=True))
        assert held == ids, store
    assert rejections(key) == {"leader": {"token_reused": 1}}

    with django_capture_on_commit_callbacks(execute=True):
        with_close(api, walk_round)
    round_ = Round.objects.get(pk=walk_round.pk)
    assert round_.status == Round.Status.RELEASED, round_.error
    walk = round_.release.content["walk"]
    assert {w["word"] for w in walk["words"]} == {"hi", "ok"}
    assert walk["levels"][0]["reports"] == len(WORDS)
    for store in ("default", "helper"):
        assert not Poplar1Report.objects.using(store).filter(collection_key=key).exists()


def test_a_report_sealed_to_a_key_the_helper_does_not_hold_is_kept_by_neither(phones, walk_round) -> None:
    """A leader (or a proxy) that hands a device its own helper key could open both shares: the
    SDK refuses such a task (tests/unit/test_device_keys.py). A report sealed so anyway reaches the
    helper, which cannot open it: neither aggregator keeps it, and its token is not spent at either."""
    _, devices = phones
    key = walk_round.task_key
    _, forged = hpke.key_pair_generate()
    report = _report(devices[0], key, "hi", keys=AggregatorKeys(leader=LEADER.public_key(), helper=forged))
    assert upload(report).status_code == 202
    verify(key)
    assert rejections(key) == {"helper": {"share_unopened": 1}}
    for store in ("default", "helper"):
        assert not Poplar1Report.objects.using(store).filter(collection_key=key).exists(), store


def test_a_stolen_token_on_another_report_is_refused_by_the_leader(phones, walk_round) -> None:
    _, devices = phones
    key = walk_round.task_key
    honest = _report(devices[0], key, "hi")
    thief = word_report_seal(
        collection_key=key, batch_key="", word="ok", bits=BITS, keys=_keys(), nonce=honest.token.nonce
    )
    assert upload(replace(thief, token=honest.token)).status_code == 202
    assert upload(honest).status_code == 202
    verify(key)
    # The thief's report is refused (its token signs another report) and spends nothing: the honest one is kept.
    assert rejections(key) == {"leader": {"token_invalid": 1}}
    assert Poplar1Report.objects.using("helper").filter(collection_key=key).count() == 1


def test_a_forged_share_is_kept_until_its_sketch_fails_at_both_aggregators(
    api, phones, walk_round, django_capture_on_commit_callbacks
) -> None:
    """Shares the right size but not an IDPF of one word (here: the helper's share of another
    report, spliced) pass the upload; the first level's sketch refuses the report at both."""
    _, devices = phones
    key = walk_round.task_key
    for device, word in zip(devices[:30], WORDS, strict=True):
        assert upload(_report(device, key, word)).status_code == 202
    vdaf = Poplar1(BITS)
    nonce = Token(nonce=b"\x01" * 32, signature=b"").nonce
    public, shares = vdaf.shard(report_context(key), word_bits("hi", BITS), report_nonce(nonce), bytes(vdaf.RAND_SIZE))
    _, other = vdaf.shard(report_context(key), word_bits("ok", BITS), report_nonce(nonce), b"\x02" * vdaf.RAND_SIZE)
    from pfs_device.report_client import shares_seal  # noqa: PLC0415 - the sealing step alone

    spliced = shares_seal(
        collection_key=key,
        batch_key="",
        nonce=nonce,
        keys=_keys(),
        public=vdaf.encode_public_share(public),
        leader=vdaf.encode_input_share(shares[0]),
        helper=vdaf.encode_input_share(other[1]),
    )
    assert upload(devices[30].sign(spliced)).status_code == 202
    verify(key)
    assert Poplar1Report.objects.using("helper").filter(collection_key=key).count() == 31
    with django_capture_on_commit_callbacks(execute=True):
        with_close(api, walk_round)
    round_ = Round.objects.get(pk=walk_round.pk)
    walk = round_.release.content["walk"]
    assert walk["levels"][0]["reports"] == 30  # the spliced report counts nowhere
    # Refused at the first level, by the leader's sketch check (and the helper's), then nowhere again.
    assert rejections(key) == {"leader": {"proof_invalid": 1}}
    assert {w["word"] for w in walk["words"]} == {"hi", "ok"}


def test_an_upload_after_the_walk_started_is_refused(api, phones, walk_round, django_capture_on_commit_callbacks):
    _, devices = phones
    key = walk_round.task_key
    for device, word in zip(devices, WORDS, strict=False):
        upload(_report(device, key, word))
    with django_capture_on_commit_callbacks(execute=True):
        with_close(api, walk_round)
    # A token is no longer issued for the collection, and a report made before the close is refused.
    late = word_report_seal(collection_key=key, batch_key="", word="hi", bits=BITS, keys=_keys())
    assert devices[31].token_request(key, 12345).status_code == 409
    assert upload(late).status_code in (400, 409, 410)
    assert not PendingReport.objects.filter(collection_key=key).exists()
    assert CollectionRules.objects.get(key=key).closed


# ---------------------------------------------------------------- through the SDK


ISSUER = issuer_key_generate(bits=1024)


def test_the_sdk_uploads_one_poplar1_report_of_a_word_it_typed(tmp_path) -> None:
    policy = {
        "analysis": "t.phones",
        "fleet": "phones",
        "queryClass": {"stream": "KeyboardNGrams", "fields": ["ngrams"], "cohortFields": ["locale"]},
        "budget": {"epsilon": 4.0, "reports": 4, "delta": 1e-5, "accountant": "basic"},
        "fields": {"ngrams": {"localEpsilon": 4.0, "epsilon": 4.0, "reports": 4, "aggregatorNoise": True}},
    }
    task = DeviceTask(
        task_key="t.phones/walk/round-1",
        analysis="t.phones",
        snapshot_digest=snapshot_digest(policy),
        query="select ngrams from KeyboardNGrams",
        cohorts=(),
        encoded_field="ngrams",
        data_types=WALK["dataTypeContent"],
        privacy=PrivacyParameters(
            noise="aggregator", mechanism="", epsilon0=None, epsilon=2.0, delta=1e-6, sampling_rate=1.0, min_cohort=3
        ),
        seed=0,
        token_key=ISSUER.public.digest,
    )
    offer = Offer(
        task=task, policy=policy, policy_digest=snapshot_digest(policy), report_length=BITS, issuer=ISSUER.public
    )
    service = Aggregators()
    service.token = lambda collection_key, blinded: sign_blinded(ISSUER, blinded)
    uploaded: list[wire.Report] = []
    service.upload = lambda report: uploaded.append(report) or "accepted"
    (data,) = data_read([json.dumps({"id": "me", "keyboard": ["ok ok ok"]}).encode()])
    ledger = Ledger(tmp_path / "ledger.json")

    outcome = task_answer(offer=offer, data=data, fleet="phones", ledger=ledger, keys=service.keys(), service=service)

    assert (outcome.decision, outcome.upload) == ("answered", "accepted")
    (report,) = uploaded
    vdaf = Poplar1(BITS)
    aad = hpke.share_aad(task.task_key, batch_key="", token_digest=report.token.digest, public_share=report.public)
    shares = [
        vdaf.decode_input_share(
            i, hpke.open_sealed(private, sealed.enc, sealed.ciphertext, hpke.share_info(role), aad=aad)
        )
        for i, ((private, _), sealed, role) in enumerate(
            ((service.leader, report.leader, "leader"), (service.helper, report.helper, "helper"))
        )
    ]
    # Both aggregators' preparation at the last level, asking "ok" and "hi": the report counts 1 for "ok".
    prefixes = sorted([word_bits("ok", BITS), word_bits("hi", BITS)])
    agg_param = (BITS - 1, tuple(prefixes))
    ctx, nonce = report_context(task.task_key), report_nonce(report.token.nonce)
    public = vdaf.decode_public_share(report.public)
    states, firsts = zip(
        *(vdaf.verify_init(bytes(32), ctx, i, agg_param, nonce, public, shares[i]) for i in range(2)), strict=True
    )
    message = vdaf.verifier_shares_to_message(ctx, agg_param, list(firsts))
    seconds = [vdaf.verify_next(ctx, state, message) for state in states]
    states, checks = zip(*seconds, strict=True)
    final = vdaf.verifier_shares_to_message(ctx, agg_param, list(checks))
    outputs = [vdaf.verify_next(ctx, state, final) for state in states]
    counts = vdaf.unshard(agg_param, [vdaf.agg_update(agg_param, vdaf.agg_init(agg_param), out) for out in outputs], 1)
    assert dict(zip(prefixes, counts, strict=True)) == {word_bits("ok", BITS): 1, word_bits("hi", BITS): 0}
    # Charged the walk once: its (epsilon, delta) on the device's own ledger.
    assert ledger.decision(task.task_key)["epsilon"] == 2.0
    assert prefix_extend((), ord("o")) == word_bits("o", 8)
