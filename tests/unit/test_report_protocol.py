"""Individually uploaded reports: HPKE-sealed Prio3 shares, anonymous single-use tokens, validity proofs, rate rules.

Real crypto throughout (HPKE and RSA blind signatures from `cryptography`); the devices are pfs_device.report_client.
"""

from __future__ import annotations

import os
from dataclasses import replace
from datetime import timedelta

import numpy as np
import pytest
from django.utils import timezone

from aggregation.aggregators import HELPER, LEADER, rules_shape
from aggregation.issuer import TokenRefused, issuer_public_key, token_issue
from aggregation.models import CollectionRules, HelperShare, LeaderShare, ReportRejection, SpentToken
from aggregation.reports import rejections
from aggregation.services import collection_rules_open
from aggregation.upload import SealedShare
from analyses.services.collector import ClientNoiseEstimator, collection_release
from pfs_device import blind_rsa, hpke, wire
from pfs_device.report_client import (
    AggregatorKeys,
    report_seal,
    report_sign,
    report_token_obtain,
    report_vector,
    shares_seal,
)
from pfs_device.tokens import (
    VARIANT,
    Blinding,
    Token,
    nonce_generate,
    token_finalize,
    token_message_unbound,
    token_obtain,
)
from privacy.mechanisms import mechanism_get, report_weight_bound
from privacy.report_vdaf import ReportShape, context, input_share_sizes, report_nonce
from privacy.vdaf.field import Field128
from tests.report_path import report_submit

pytestmark = pytest.mark.django_db

KEY = "test-collection"
DOMAIN = 8
ORACLE = mechanism_get("asymmetric_ohe", 3.0)


def rules_open() -> CollectionRules:
    """The test collection, opened at both aggregators for real devices (the issuer's key in the task)."""
    return collection_rules_open(
        key=KEY,
        length=DOMAIN,
        min_cohort=3,
        weight_bound=report_weight_bound(ORACLE, DOMAIN, 1e-9),
        token_key=issuer_public_key(KEY),
    )


def rate_rules_open() -> CollectionRules:
    """The test collection with a weight bound any one-hot passes: rate validation, on for every
    collection of devices, reads the issuer's count of tokens and the aggregators' own pacing floor."""
    return collection_rules_open(
        key=KEY, length=DOMAIN, min_cohort=3, weight_bound=DOMAIN, token_key=issuer_public_key(KEY)
    )


# Devices enough that a burst can be told from chance: 40 tokens allow at most 29 in a minute
# (aggregation.batch_rules.rate_allowance, devices pacing over 600 s).
BURST = 40


@pytest.fixture
def rules():
    return rules_open()


def keys() -> AggregatorKeys:
    return AggregatorKeys(leader=LEADER.public_key(), helper=HELPER.public_key())


def _issue(device: str, key: str):
    return lambda blinded: token_issue(collection_key=key, device_identity=device, blinded=blinded)


def token(device: str, key: str = KEY) -> Token:
    """A token the issuer signed for ``device``, bound to a report no one holds (a made-up digest)."""
    return token_obtain(
        collection_key=key,
        nonce=nonce_generate(),
        report_digest=os.urandom(32),
        issuer=issuer_public_key(key),
        issue=_issue(device, key),
    )


def token_unbound(device: str, key: str = KEY) -> Token:
    """A token as devices had them before wire format v4: its message names the collection only."""
    issuer = issuer_public_key(key)
    input_msg = blind_rsa.prepare(token_message_unbound(key), VARIANT)
    blinded, inv = blind_rsa.blind(issuer.rsa(), input_msg, VARIANT)
    blinding = Blinding(input_msg=input_msg, blinded=int.from_bytes(blinded, "big"), inv=inv)
    return token_finalize(issuer=issuer, blinding=blinding, blind_sig=_issue(device, key)(blinding.blinded))


def signed(sealed: wire.Report, device: str) -> wire.Report:
    """``sealed`` with a token the issuer signed for ``device`` over exactly its content, under its
    nonce: what any device gets for a report it made, however it made it."""
    key = sealed.collection_key
    unsigned = replace(sealed, token=Token(nonce=sealed.token.nonce, signature=b""))
    return report_token_obtain(report=unsigned, issuer=issuer_public_key(key), issue=_issue(device, key))


def shape_for(key: str) -> ReportShape:
    """The Prio3 shape the collection's aggregators verify (multi-hot of weight DOMAIN where none exists)."""
    rules = CollectionRules.objects.filter(key=key).first()
    return rules_shape(rules) if rules else ReportShape("multihot", DOMAIN, DOMAIN)


def report(device: str, vector, key: str = KEY, tok: Token | None = None):
    """A device's report, signed for it; with ``tok``: sealed under that token's nonce and carrying
    it (a token taken from another report, which does not name this one)."""
    sealed = report_seal(
        collection_key=key,
        batch_key="",
        vector=np.asarray(vector),
        keys=keys(),
        shape=shape_for(key),
        nonce=None if tok is None else tok.nonce,
    )
    return signed(sealed, device) if tok is None else report_sign(sealed, tok)


def proven(device: str, encoded: list[int], key: str = KEY) -> wire.Report:
    """A malicious device's report: an encoded measurement it proves as it is (Prio3.shard_encoded,
    which skips the encoding's checks), sealed with the SDK's own function."""
    nonce = nonce_generate()
    vdaf = shape_for(key).vdaf()
    public, (leader, helper) = vdaf.shard_encoded(
        context(key), encoded, report_nonce(nonce), os.urandom(vdaf.RAND_SIZE)
    )
    sealed = shares_seal(
        collection_key=key,
        batch_key="",
        nonce=nonce,
        keys=keys(),
        public=vdaf.encode_public_share(public),
        leader=vdaf.encode_input_share(leader),
        helper=vdaf.encode_input_share(helper),
    )
    return signed(sealed, device)


def stored_total(model) -> list[int]:
    """The sum of the stored output shares of one aggregator (Field128 residues)."""
    p = Field128.MODULUS
    total = [0] * DOMAIN
    for share in model.objects.all():
        total = [(a + b) % p for a, b in zip(total, share.load_ints(), strict=True)]
    return total


def one_hot(value: int) -> np.ndarray:
    return np.eye(DOMAIN, dtype=np.int64)[value]


def test_a_report_is_accepted_and_each_aggregator_stores_only_its_own_share(rules) -> None:
    assert report_submit(report("d1", one_hot(2))).accepted
    leader, helper = LeaderShare.objects.get(), HelperShare.objects.get()
    assert leader.reports == helper.reports == 1 and leader.field == helper.field == "field128"
    # Neither output share alone is the report; their sum is.
    total = [(a + b) % Field128.MODULUS for a, b in zip(leader.load_ints(), helper.load_ints(), strict=True)]
    assert total == one_hot(2).tolist()
    assert leader.load_ints() != one_hot(2).tolist()


def test_each_aggregator_opens_only_the_share_sealed_to_it(rules) -> None:
    sealed = report("d1", one_hot(1))
    # The helper's share handed to the leader does not open: another key and another info.
    envelope = {"batch_key": sealed.batch_key, "token_digest": sealed.token.digest, "public_share": sealed.public}
    with pytest.raises(hpke.OpenFailed):
        LEADER.open_share(rules, sealed.helper.enc, sealed.helper.ciphertext, **envelope)
    leader_size, helper_size, _ = input_share_sizes(shape_for(KEY).vdaf())
    assert len(LEADER.open_share(rules, sealed.leader.enc, sealed.leader.ciphertext, **envelope)) == leader_size
    assert len(HELPER.open_share(rules, sealed.helper.enc, sealed.helper.ciphertext, **envelope)) == helper_size
    # The public share is authenticated too: another one does not open either share.
    with pytest.raises(hpke.OpenFailed):
        LEADER.open_share(rules, sealed.leader.enc, sealed.leader.ciphertext, **{**envelope, "public_share": b"x" * 64})


def test_the_issuer_signs_one_token_per_device_per_collection() -> None:
    token("d1")
    with pytest.raises(TokenRefused, match="already"):
        token("d1")
    token("d1", key="another-collection")  # another collection is another allowance
    token("d2")


def test_a_replayed_report_is_rejected_and_its_token_on_another_report_does_not_verify(rules) -> None:
    first = report("d1", one_hot(0))
    assert report_submit(first).accepted
    outcome = report_submit(first)
    assert (outcome.accepted, outcome.reason) == (False, "token_reused")
    # Its token on another report (the same device's, or a thief's) names the first report only:
    # refused before the spent record is read.
    outcome = report_submit(report("d1", one_hot(5), tok=first.token))
    assert (outcome.accepted, outcome.reason) == (False, "token_invalid")
    assert LeaderShare.objects.count() == HelperShare.objects.count() == 1
    # The leader refuses both first (DAP: a report it rejects never reaches the helper's job).
    assert rejections(KEY) == {"leader": {"token_invalid": 1, "token_reused": 1}}


def test_a_forged_token_or_one_for_another_round_is_rejected(rules) -> None:
    forged = Token(nonce=b"\x00" * 32, signature=b"\x01" * issuer_public_key(KEY).size)
    assert report_submit(report("d1", one_hot(0), tok=forged)).reason == "token_invalid"
    other_round = token("d2", key="another-collection")
    assert report_submit(report("d2", one_hot(0), tok=other_round)).reason == "token_invalid"
    assert not LeaderShare.objects.exists() and not SpentToken.objects.exists()


def test_a_report_sealed_for_another_round_does_not_open(rules) -> None:
    collection_rules_open(
        key="other", length=DOMAIN, min_cohort=1, weight_bound=DOMAIN, token_key=issuer_public_key("other")
    )
    sealed_for_other = report("d1", one_hot(0), key="other")
    moved = signed(replace(sealed_for_other, collection_key=KEY), "d1")  # a token of KEY's for it
    assert report_submit(moved).reason == "share_unopened"
    assert rejections(KEY) == {"leader": {"share_unopened": 1}}


@pytest.mark.parametrize(
    ("splice", "unopened_by"),
    [
        pytest.param(lambda a, b: replace(a, leader=b.leader), {"leader"}, id="another report's leader share"),
        pytest.param(lambda a, b: replace(a, helper=b.helper), {"helper"}, id="another report's helper share"),
        pytest.param(
            lambda a, b: replace(b, token=a.token), {"leader", "helper"}, id="both shares under another token"
        ),
        pytest.param(lambda a, b: replace(a, public=b.public), {"leader", "helper"}, id="another public share"),
        pytest.param(lambda a, b: replace(a, batch_key="locale=fr_FR"), {"leader", "helper"}, id="another batch"),
        pytest.param(lambda a, b: replace(a, leader=a.helper, helper=a.leader), {"leader", "helper"}, id="swapped"),
    ],
)
def test_a_share_moved_to_another_report_does_not_open(rules, splice, unopened_by: set[str]) -> None:
    # Spliced by whoever saw the reports, its token no longer names the report: refused at once.
    a, b = report("d1", one_hot(1)), report("d2", one_hot(6))
    outcome = report_submit(splice(a, b))
    assert (outcome.accepted, outcome.reason) == (False, "token_invalid")
    assert rejections(KEY) == {"leader": {"token_invalid": 1}}
    ReportRejection.objects.all().delete()
    # Spliced by a device that has the issuer sign the result: each share's aad is its report's
    # context and its info its aggregator's role, so spliced into another report, or handed to the
    # other aggregator, it does not open; the report is refused.
    outcome = report_submit(signed(splice(a, b), "d3"))
    assert (outcome.accepted, outcome.reason) == (False, "share_unopened")
    # The leader checks first; a report it refuses never reaches the helper (DAP).
    first = "leader" if "leader" in unopened_by else "helper"
    assert rejections(KEY) == {first: {"share_unopened": 1}}
    assert not LeaderShare.objects.exists() and not HelperShare.objects.exists() and not SpentToken.objects.exists()
    # Untouched, both reports are taken: the refusal spent neither token.
    assert report_submit(a).accepted and report_submit(b).accepted


def test_a_malformed_share_is_rejected_and_nothing_is_stored(rules) -> None:
    good = report("d1", one_hot(0))
    aad = hpke.share_aad(KEY, batch_key=good.batch_key, token_digest=good.token.digest, public_share=good.public)
    short = hpke.seal(HELPER.public_key(), b"\x00" * 63, hpke.share_info("helper"), aad=aad)  # a helper's is 64 bytes
    # A device's own malformed report: the issuer signs whatever blinded message it is sent.
    outcome = report_submit(signed(replace(good, helper=SealedShare(*short)), "d2"))
    assert outcome.reason == "share_malformed"
    assert rejections(KEY) == {"helper": {"share_malformed": 1}}
    assert not LeaderShare.objects.exists() and not SpentToken.objects.exists()
    # The token was not spent by the rejection: the device's honest retry goes through.
    assert report_submit(replace(good, collection_key=KEY)).accepted


def test_a_report_with_too_many_ones_is_rejected_by_the_weight_bound(rules) -> None:
    assert rules.weight_bound < DOMAIN
    with pytest.raises(ValueError, match="max_weight"):  # the SDK will not shard it
        report("d1", np.ones(DOMAIN, dtype=np.int64))
    # Proved as it is (the claimed weight within the bound, the count bits all set), the proof fails.
    vdaf = shape_for(KEY).vdaf()
    weight_bits = vdaf.flp.MEAS_LEN - DOMAIN
    outcome = report_submit(proven("d2", [1] * DOMAIN + [0] * weight_bits))
    assert outcome.reason == "proof_invalid"
    # The helper decides the proof from both verifier shares (DAP's ping-pong); the leader counts its answer.
    assert rejections(KEY) == {"helper": {"proof_invalid": 1}}
    assert not LeaderShare.objects.exists() and not SpentToken.objects.exists()


def test_a_report_for_an_unknown_or_closed_collection_is_rejected(rules) -> None:
    assert report_submit(report("d1", one_hot(0), key="nowhere")).reason == "unknown_collection"
    for device in ("a", "b", "c"):
        assert report_submit(report(device, one_hot(1))).accepted
    collection_release(
        collection_key=KEY, estimator=ClientNoiseEstimator(mechanism="kary_rr", epsilon0=3.0, domain_size=DOMAIN)
    )
    assert report_submit(report("late", one_hot(1))).reason == "collection_closed"


def test_uploaded_reports_release_an_unbiased_histogram(rules, settings) -> None:
    # 400 devices upload within seconds here: as devices run with --min-spread 1 would (a test's floor).
    settings.PFS_DEVICE_MIN_SPREAD = 1.0
    rng = np.random.default_rng(21)
    values = rng.choice(DOMAIN, size=400, p=[0.4, 0.2, 0.1, 0.1, 0.1, 0.05, 0.03, 0.02])
    for i, value in enumerate(values):
        vector = report_vector(ORACLE, int(value), DOMAIN, rng)
        assert report_submit(report(f"device-{i}", vector)).accepted
    (batch,) = collection_release(
        collection_key=KEY, estimator=ClientNoiseEstimator(mechanism="asymmetric_ohe", epsilon0=3.0, domain_size=DOMAIN)
    )
    truth = np.bincount(values, minlength=DOMAIN)
    errors = np.abs(np.array(batch.estimates) - truth) / np.array(batch.standard_errors)
    # 4 standard errors per bucket (seeded devices' coins).
    assert batch.reports == 400 and errors.max() < 4
    assert not LeaderShare.objects.exists() and not HelperShare.objects.exists()


def test_a_batch_that_arrived_faster_than_its_devices_pacing_allows_is_refused() -> None:
    rate_rules_open()
    for device in range(BURST):
        assert report_submit(report(f"d{device}", one_hot(device % DOMAIN))).accepted
    # 40 reports within a minute from 40 tokens: more than the 29 their pacing allows. Each aggregator refuses alone.
    (batch,) = collection_release(
        collection_key=KEY, estimator=ClientNoiseEstimator(mechanism="kary_rr", epsilon0=3.0, domain_size=DOMAIN)
    )
    assert batch.suppressed and "rate validation" in batch.reason and batch.reason.startswith("leader:")


def test_the_same_reports_spread_over_time_pass_rate_validation() -> None:
    rate_rules_open()
    for device in range(BURST):
        assert report_submit(report(f"d{device}", one_hot(device % DOMAIN))).accepted
    start = timezone.now()
    for model in (LeaderShare, HelperShare):
        for i, share in enumerate(model.objects.order_by("pk")):
            at = start + timedelta(seconds=10 * i)  # the helper keeps the arrival times the leader sent
            arrivals = np.asarray([at.timestamp()], dtype="<f8").tobytes() if model is HelperShare else b""
            model.objects.filter(pk=share.pk).update(created_at=at, arrivals=arrivals)
    (batch,) = collection_release(
        collection_key=KEY, estimator=ClientNoiseEstimator(mechanism="kary_rr", epsilon0=3.0, domain_size=DOMAIN)
    )
    assert not batch.suppressed and batch.reports == BURST


def test_a_binary_report_is_a_prio3_count_and_a_bit_of_two_is_rejected() -> None:
    collection_rules_open(
        key="bits", length=1, min_cohort=1, weight_bound=1, vdaf="count", token_key=issuer_public_key("bits")
    )
    assert report_submit(report("d1", [1], key="bits")).accepted
    with pytest.raises(ValueError, match="0s and 1s"):  # the SDK will not shard a 2
        report("d2", [2], key="bits")
    assert report_submit(proven("d3", [2], key="bits")).reason == "proof_invalid"
    leader, helper = LeaderShare.objects.get(), HelperShare.objects.get()
    assert leader.field == helper.field == "field64"  # Prio3Count's field: the simulator's Field64
    p = 2**64 - 2**32 + 1
    assert (int(leader.load_vector()[0]) + int(helper.load_vector()[0])) % p == 1
    assert rejections("bits") == {"helper": {"proof_invalid": 1}}


def test_an_unknown_report_kind_is_refused_when_the_collection_is_opened() -> None:
    with pytest.raises(ValueError, match="unknown report kind"):
        collection_rules_open(
            key="odd", length=8, min_cohort=1, weight_bound=1, vdaf="sum", token_key=issuer_public_key("odd")
        )
