"""Issue 18: one device's report moved a released bucket by thousands, or failed the whole round.

The aggregators checked only a report's weight (the sum of its entries), and not even that when the
weight bound was at least the length. Tried as an attacker would, with the SDK's own functions:
- a report holding +Δ in one bucket and −(Δ−1) mod p in another weighs 1 and was accepted: one
  report moved a released bucket by Δ − 1, the work of ~1,876 devices;
- one report holding +5000 made a count exceed the number of reports: the round failed, its shares
  were discarded and every honest device's budget spent for nothing.
Now every report carries a Prio3 validity proof (draft-irtf-cfrg-vdaf-20) that both aggregators
check, each with its own share. Each attack below goes through the endpoints a device uses (its
token, the anonymous upload) and is built with the SDK's functions (pfs_device.report_client), then
tampered with; each is rejected by both aggregators as proof_invalid, counted, and the release is
exactly the release of the honest reports alone (the round is released, not failed).

The attacks run against both kinds of collection: one-hot reports (aggregator noise: Prio3Histogram)
and multi-hot ones (asymmetric OHE: Prio3MultihotCountVec with the recipe's weight bound).
"""

from __future__ import annotations

import os
from collections.abc import Callable

import numpy as np
import pytest

from aggregation import aggregators
from aggregation.aggregators import HELPER, LEADER
from aggregation.models import CollectionRules
from aggregation.reports import rejections
from analyses.models import Round
from pfs_device import wire
from pfs_device.report_client import AggregatorKeys, report_shard, shares_seal
from pfs_device.tokens import nonce_generate
from privacy.report_vdaf import HISTOGRAM, MULTIHOT, ReportShape, context, report_nonce
from privacy.vdaf.field import Field128
from tests.unit.test_device_http import BUCKETS, CENTRAL, RECIPE, Device, shape_of, start, upload, with_close

pytestmark = pytest.mark.django_db

P = Field128.MODULUS
DELTA = 1877  # the shift: one report worth ~1,876 devices
HONEST = [1, 2, 2, 5]  # the phones fixture has 8 devices: 4 honest, up to 3 attackers
# Asymmetric OHE at epsilon0 = epsilon: no amplification is needed, so a small cohort releases.
MULTIHOT_RECIPE = {
    **RECIPE,
    "recipeIdentifier": "multihot",
    "AnalysisIdentifier": "t.phones",
    "privacy": {"mechanism": "asymmetric_ohe", "epsilon0": 1.0, "epsilon": 1.0, "delta": 1e-6, "minCohort": 3},
}
RECIPES = {HISTOGRAM: CENTRAL, MULTIHOT: MULTIHOT_RECIPE}


def _keys() -> AggregatorKeys:
    return AggregatorKeys(leader=LEADER.public_key(), helper=HELPER.public_key())


def _seal(device: Device, key: str, public: bytes, leader: bytes, helper: bytes, nonce=None) -> wire.Report:
    """The shares sealed under ``nonce`` (a fresh one when None) and signed for ``device``: the
    issuer signs whatever report a device made, however it made it."""
    sealed = shares_seal(
        collection_key=key,
        batch_key="",
        nonce=nonce or nonce_generate(),
        keys=_keys(),
        public=public,
        leader=leader,
        helper=helper,
    )
    return device.sign(sealed)


def _encoded(shape: ReportShape, counts: dict[int, int]) -> list[int]:
    """An encoded measurement claiming weight 1 (a valid one-hot report's encoding), its counts replaced."""
    vdaf = shape.vdaf()
    valid = vdaf.flp.encode(0 if shape.kind == HISTOGRAM else [i == 0 for i in range(shape.length)])
    valid[: shape.length] = [counts.get(i, 0) % P for i in range(shape.length)]
    return valid


def _proved(device: Device, key: str, counts: dict[int, int], *, context_key: str | None = None) -> wire.Report:
    """The attacker proves its vector as it is, with the library's own prover (Prio3.shard_encoded)."""
    nonce = nonce_generate()
    vdaf = shape_of(key).vdaf()
    public, (leader, helper) = vdaf.shard_encoded(
        context(context_key or key),
        _encoded(shape_of(key), counts),
        report_nonce(nonce),
        os.urandom(vdaf.RAND_SIZE),
    )
    return _seal(
        device,
        key,
        vdaf.encode_public_share(public),
        vdaf.encode_input_share(leader),
        vdaf.encode_input_share(helper),
        nonce,
    )


def _honest_parts(device: Device, key: str, bucket: int, *, collection: str | None = None):
    """The SDK's sharding of a one-hot report (token nonce, public, leader and helper input shares)."""
    nonce = nonce_generate()
    vector = np.eye(BUCKETS, dtype=np.int64)[bucket]
    public, leader, helper = report_shard(
        collection_key=collection or key, vector=vector, shape=shape_of(key), nonce=nonce
    )
    return nonce, public, leader, helper


# -------------------------------------------------------------------- the attacks


def plus_delta_minus_delta_less_one(device: Device, key: str) -> list[wire.Report]:
    """+Δ in bucket 3 and −(Δ−1) in bucket 4: weight 1. Proved as it is, and as the SDK's honest
    shares of bucket 3 with Δ−1 moved between buckets in the leader's share (the proof left as it was)."""
    proved = _proved(device[0], key, {3: DELTA, 4: -(DELTA - 1)})
    nonce, public, leader, helper = _honest_parts(device[1], key, 3)
    size = Field128.ENCODED_SIZE
    meas = Field128.decode_vec(leader[: shape_of(key).vdaf().flp.MEAS_LEN * size])
    meas[3], meas[4] = (meas[3] + DELTA - 1) % P, (meas[4] - (DELTA - 1)) % P
    shifted = Field128.encode_vec(meas) + leader[len(meas) * size :]
    return [proved, _seal(device[1], key, public, shifted, helper, nonce)]


def plus_5000(device: Device, key: str) -> list[wire.Report]:
    return [_proved(device[0], key, {6: 5000})]


def weight_p_minus_one(device: Device, key: str) -> list[wire.Report]:
    """A vector of weight p − 1 (≡ −1): it would subtract one from a bucket, or pass as weight ≤ bound mod p."""
    return [_proved(device[0], key, {0: P - 1}), _proved(device[1], key, {0: 1, 7: P - 1, 2: 1})]


def spliced(device: Device, key: str) -> list[wire.Report]:
    """A valid proof over another report's shares: the leader's measurement share of a +Δ vector
    with the proof share of an honest report (same helper seeds, same nonce); and a whole valid
    report of one token re-sealed under another token."""
    token_nonce = nonce_generate()
    shape = shape_of(key)
    vdaf = shape.vdaf()
    nonce, rand = report_nonce(token_nonce), os.urandom(vdaf.RAND_SIZE)
    honest_public, honest = vdaf.shard_encoded(context(key), _encoded(shape, {2: 1}), nonce, rand)
    _, evil = vdaf.shard_encoded(context(key), _encoded(shape, {2: DELTA}), nonce, rand)
    (_, honest_proof, blind), (evil_meas, _, _) = honest[0], evil[0]
    leader = vdaf.encode_input_share((evil_meas, honest_proof, blind))
    first = _seal(
        device[0], key, vdaf.encode_public_share(honest_public), leader, vdaf.encode_input_share(honest[1]), token_nonce
    )
    _, public, valid_leader, valid_helper = _honest_parts(device[1], key, 5)
    resealed = _seal(device[2], key, public, valid_leader, valid_helper)  # another nonce, device 1's proof
    return [first, resealed]


def for_another_collection(device: Device, key: str) -> list[wire.Report]:
    """Shares and proof made for another collection, sealed for this one with a token of this one:
    the HPKE envelope opens, the proof's context does not match. Proved as the SDK does, and forged."""
    nonce, public, leader, helper = _honest_parts(device[0], key, 4, collection="t.phones/another/round-1")
    return [
        _seal(device[0], key, public, leader, helper, nonce),
        _proved(device[1], key, {4: DELTA}, context_key="t.phones/another/round-1"),
    ]


ATTACKS: dict[str, Callable[[list[Device], str], list[wire.Report]]] = {
    "plus_delta_minus_delta_less_one": plus_delta_minus_delta_less_one,
    "plus_5000": plus_5000,
    "weight_p_minus_one": weight_p_minus_one,
    "spliced": spliced,
    "for_another_collection": for_another_collection,
}


def _release(api, round_: Round, capture) -> dict:
    with capture(execute=True):
        with_close(api, round_)
    round_.refresh_from_db()
    assert round_.status == Round.Status.RELEASED, round_.error  # the round is not failed
    return api.get(f"/api/rounds/{round_.pk}/release/").json()


def _honest_round(api, devices: list[Device], recipe: dict) -> Round:
    round_ = start(api, recipe)
    for device, bucket in zip(devices, HONEST, strict=False):
        assert upload(device.report(round_.task_key, bucket)).status_code == 202
    return round_


@pytest.mark.parametrize("kind", [HISTOGRAM, MULTIHOT])
@pytest.mark.parametrize("attack", list(ATTACKS))
def test_an_invalid_report_is_rejected_counted_and_changes_no_release(
    api, phones, phones_analysis, monkeypatch, django_capture_on_commit_callbacks, kind, attack
) -> None:
    _, devices = phones
    # Aggregator noise from a fixed seed, the same draws in both rounds: equal counts, equal releases.
    monkeypatch.setattr(aggregators, "noise_rng", lambda: np.random.default_rng(18))
    recipe = RECIPES[kind]
    control = _honest_round(api, devices, {**recipe, "recipeIdentifier": f"{kind}-control"})
    attacked = _honest_round(api, devices, {**recipe, "recipeIdentifier": f"{kind}-attacked"})
    key = attacked.task_key
    assert CollectionRules.objects.get(key=key).vdaf == kind
    forged = ATTACKS[attack](devices[len(HONEST) :], key)
    for report in forged:
        assert upload(report).status_code == 202  # received; judged when verified
    expected = _release(api, control, django_capture_on_commit_callbacks)
    release = _release(api, attacked, django_capture_on_commit_callbacks)
    count = len(forged)
    # The helper decides each proof from both verifier shares; the leader counts its answers.
    assert rejections(key) == {"helper": {"proof_invalid": count}}
    assert release["reports"] == expected["reports"] == len(HONEST)
    assert release["buckets"] == expected["buckets"]
