"""Tokens bound to their report (pfs_device.wire.report_digest, pfs_device.tokens): the digest each
aggregator recomputes, the message the token signs, and the formats that carry them. Pure: no
database (the attacks through the endpoints: tests/adversarial/test_token_binding.py)."""

from __future__ import annotations

import json
import os
from dataclasses import replace

import numpy as np
import pytest

from aggregation import dap
from pfs_device import hpke, tokens, wire
from pfs_device.report_client import AggregatorKeys, report_seal, report_sign, report_token_obtain
from privacy.report_vdaf import ReportShape

SHAPE = ReportShape("histogram", 4, 1)


@pytest.fixture(scope="module")
def issuer() -> tokens.IssuerPrivateKey:
    return tokens.issuer_key_generate()


@pytest.fixture(scope="module")
def keys() -> AggregatorKeys:
    return AggregatorKeys(leader=hpke.key_pair_generate()[1], helper=hpke.key_pair_generate()[1])


def sealed(keys: AggregatorKeys, *, bucket: int = 1, batch: str = "", nonce: bytes | None = None) -> wire.Report:
    vector = np.eye(4, dtype=np.int64)[bucket]
    return report_seal(collection_key="c", batch_key=batch, vector=vector, keys=keys, shape=SHAPE, nonce=nonce)


def obtained(issuer: tokens.IssuerPrivateKey, report: wire.Report) -> wire.Report:
    return report_token_obtain(
        report=report, issuer=issuer.public, issue=lambda blinded: tokens.sign_blinded(issuer, blinded)
    )


# ------------------------------------------------------------------ the report digest


def test_the_report_digest_changes_with_every_part_it_names(keys) -> None:
    report, other = sealed(keys), sealed(keys, bucket=2)
    digest = wire.report_digest_of(report)
    assert digest == wire.report_digest_of(replace(report, token=other.token))  # the token is not a part
    assert len(digest) == 32
    for changed in (
        replace(report, batch_key="locale=fr_FR"),
        replace(report, public=other.public),
        replace(report, leader=other.leader),
        replace(report, helper=other.helper),
        replace(report, leader=report.helper, helper=report.leader),
        replace(report, leader=wire.SealedShare(report.leader.enc, report.leader.ciphertext[:-1])),
    ):
        assert wire.report_digest_of(changed) != digest


def test_the_report_digest_frames_its_parts_so_bytes_cannot_move_between_them() -> None:
    leader, helper = bytes(32), bytes(range(32))
    one = wire.report_digest(batch_key="ab", public=b"c", leader_share_digest=leader, helper_share_digest=helper)
    two = wire.report_digest(batch_key="a", public=b"bc", leader_share_digest=leader, helper_share_digest=helper)
    assert one != two
    share = wire.SealedShare(enc=b"ab", ciphertext=b"c")
    assert wire.share_digest(share) != wire.share_digest(wire.SealedShare(enc=b"a", ciphertext=b"bc"))


def test_the_report_digest_refuses_a_share_digest_of_another_length() -> None:
    with pytest.raises(ValueError, match="32 bytes"):
        wire.report_digest(batch_key="", public=b"", leader_share_digest=bytes(31), helper_share_digest=bytes(32))


def test_the_helper_recomputes_the_digest_from_its_own_share_and_the_leaders_digest(keys) -> None:
    report = sealed(keys)
    as_the_helper_holds_it = wire.report_digest(
        batch_key=report.batch_key,
        public=report.public,
        leader_share_digest=wire.share_digest(report.leader),  # all it gets of the leader's share
        helper_share_digest=wire.share_digest(report.helper),
    )
    assert as_the_helper_holds_it == wire.report_digest_of(report)


# ------------------------------------------------------------------ the token's message


def test_a_token_verifies_for_the_report_it_was_issued_for_and_no_other(issuer, keys) -> None:
    report = obtained(issuer, sealed(keys))
    assert tokens.verify(issuer.public, "c", report.token, report_digest=wire.report_digest_of(report))
    other = report_sign(sealed(keys, bucket=3, nonce=report.token.nonce), report.token)
    assert not tokens.verify(issuer.public, "c", other.token, report_digest=wire.report_digest_of(other))
    assert not tokens.verify(issuer.public, "d", report.token, report_digest=wire.report_digest_of(report))
    # Nor as a token of the older, unbound kind: its message is another one.
    assert not tokens.verify_unbound(issuer.public, "c", report.token)
    assert not tokens.verify(issuer.public, "c", report.token, report_digest=b"")


def test_the_token_prefix_is_the_nonce_the_report_was_sealed_with(issuer, keys) -> None:
    report = sealed(keys)
    blinding = tokens.token_blind(
        collection_key="c",
        nonce=report.token.nonce,
        report_digest=wire.report_digest_of(report),
        issuer=issuer.public,
    )
    assert blinding.input_msg == report.token.nonce + tokens.token_message("c", wire.report_digest_of(report))
    assert blinding.input_msg.endswith(b"pfs-studio token v3|c|" + wire.report_digest_of(report))


def test_the_token_message_refuses_a_digest_of_another_length() -> None:
    with pytest.raises(ValueError, match="32 bytes"):
        tokens.token_message("c", bytes(31))


def test_a_report_is_not_signed_with_a_token_of_another_nonce(issuer, keys) -> None:
    report = obtained(issuer, sealed(keys))
    with pytest.raises(ValueError, match="nonce"):
        report_sign(sealed(keys), report.token)


# ------------------------------------------------------------------ the formats


def test_a_sealed_report_not_yet_signed_round_trips_only_as_unsigned(issuer, keys) -> None:
    unsigned = sealed(keys)
    data = json.loads(wire.report_bytes(unsigned))
    assert data["v"] == wire.VERSION == 4 and data["token"]["signature"] == ""
    assert wire.report_parse(data, signed=False) == unsigned
    with pytest.raises(wire.WireError) as refused:
        wire.report_parse(data)  # an upload must carry its signature
    assert "token.signature" in refused.value.fields
    signed = json.loads(wire.report_bytes(obtained(issuer, unsigned)))
    with pytest.raises(wire.WireError) as refused:
        wire.report_parse(signed, signed=False)
    assert refused.value.fields == {"token.signature": ["Must be empty (a report not yet signed)."]}


def _init(**changes) -> dict:
    init = dap.VerifyInit(
        report_id="ab" * 32,
        batch="",
        time=0.0,
        version=wire.VERSION,
        public_share="",
        token={"nonce": "", "signature": ""},
        encrypted_input_share={"enc": "", "payload": ""},
        input_share=None,
        payload="",
        leader_share_digest=dap.b64(os.urandom(32)),
    )
    return {**json.loads(dap.encode(init)), **changes}


def test_a_job_entry_carries_the_leaders_share_digest_and_may_omit_it() -> None:
    entry = _init()
    assert dap.VerifyInit.parse(entry, "v").leader_share_digest == entry["leader_share_digest"]
    older = {name: value for name, value in entry.items() if name != "leader_share_digest"}
    assert dap.VerifyInit.parse(older, "v").leader_share_digest is None  # the helper then refuses a v4 report
    with pytest.raises(dap.MessageError, match="leader_share_digest"):
        dap.VerifyInit.parse(_init(leader_share_digest=7), "v")
