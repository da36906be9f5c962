"""aggregation.hpke_v2: the aggregators still open wire format v2 shares (stored before the upgrade to v3).

The interop fixture (vectors/hpke_pyhpke_interop.json) was sealed by pyhpke 0.6.5 before v2 moved to
cryptography's HPKE: the "none" and "info" cases are v2 shares, which v2's opening opens; the
"aead" case carries its aad as the AEAD's associated data, as v3 does, so it opens as v3 and not
as v2. The v2 sealing is rebuilt here (the devices no longer have it) to attack the v2 opening.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric import x25519

from aggregation import hpke_v2
from pfs_device import hpke, wire
from pfs_device.report_client import AggregatorKeys
from pfs_device.tokens import Token

INTEROP = json.loads((Path(__file__).parent / "vectors" / "hpke_pyhpke_interop.json").read_text())
CASES = {case["name"]: case for case in INTEROP["cases"]}
INFO = hpke_v2.share_info("round-7", "leader", batch_key="cohort-a", token_digest="ab" * 32)


def fixture_args(case: dict) -> tuple[bytes, bytes, bytes, bytes]:
    return (
        bytes.fromhex(case["private_key"]),
        bytes.fromhex(case["enc"]),
        bytes.fromhex(case["ciphertext"]),
        bytes.fromhex(case["info"]),
    )


def seal_v2(public_key: bytes, plaintext: bytes, info: bytes, *, aad: bytes = b"") -> tuple[bytes, bytes]:
    """How a v2 device sealed a share (pfs_device.hpke before v3)."""
    sealed = hpke_v2.SUITE.encrypt(
        plaintext, x25519.X25519PublicKey.from_public_bytes(public_key), info=hpke_v2.setup_info(info, aad)
    )
    return sealed[: hpke.ENC_BYTES], sealed[hpke.ENC_BYTES :]


def shares_seal_v2(
    *,
    collection_key: str,
    batch_key: str,
    token: Token,
    keys: AggregatorKeys,
    public: bytes,
    leader: bytes,
    helper: bytes,
) -> wire.Report:
    """A report as a v2 device sealed it (pfs_device.report_client.shares_seal before v3)."""
    sealed = {
        role: wire.SealedShare(
            *seal_v2(
                key,
                share,
                hpke_v2.share_info(collection_key, role, batch_key=batch_key, token_digest=token.digest),
                aad=public,
            )
        )
        for role, key, share in (("leader", keys.leader, leader), ("helper", keys.helper, helper))
    }
    return wire.Report(collection_key, batch_key, token, sealed["leader"], sealed["helper"], public, version=2)


@pytest.fixture
def keys() -> tuple[bytes, bytes]:
    return hpke.key_pair_generate()


@pytest.mark.parametrize("name", [name for name, case in CASES.items() if case["aad_binding"] != "aead"])
def test_v2_opens_what_pyhpke_sealed_the_v2_way(name: str) -> None:
    case = CASES[name]
    assert hpke_v2.open_sealed(*fixture_args(case), aad=bytes.fromhex(case["aad"])) == bytes.fromhex(case["plaintext"])


def test_the_aead_aad_case_opens_as_v3_and_not_as_v2() -> None:
    case = CASES["leader share, rfc 9180 aead aad"]
    aad = bytes.fromhex(case["aad"])
    assert hpke.open_sealed(*fixture_args(case), aad=aad) == bytes.fromhex(case["plaintext"])
    with pytest.raises(hpke.OpenFailed):
        hpke_v2.open_sealed(*fixture_args(case), aad=aad)


def test_fixture_key_pairs_match_the_raw_x25519_encoding() -> None:
    for case in INTEROP["cases"]:
        assert hpke.public_key_of(bytes.fromhex(case["private_key"])).hex() == case["public_key"]


def test_a_v2_share_opens_as_v2_only(keys) -> None:
    private, public = keys
    enc, ciphertext = seal_v2(public, b"a share", INFO, aad=b"public share")
    assert hpke_v2.open_sealed(private, enc, ciphertext, INFO, aad=b"public share") == b"a share"
    # v3 reads another info and an aad where v2 had none: no v2 share passes as v3.
    with pytest.raises(hpke.OpenFailed):
        hpke.open_sealed(private, enc, ciphertext, hpke.share_info("leader"), aad=b"public share")


def test_a_v3_share_does_not_open_as_v2(keys) -> None:
    private, public = keys
    aad = hpke.share_aad("round-7", batch_key="cohort-a", token_digest="ab" * 32, public_share=b"p")
    enc, ciphertext = hpke.seal(public, b"a share", hpke.share_info("leader"), aad=aad)
    with pytest.raises(hpke.OpenFailed):
        hpke_v2.open_sealed(private, enc, ciphertext, INFO, aad=b"p")


@pytest.mark.parametrize(
    ("info", "aad"),
    [
        pytest.param(
            hpke_v2.share_info("round-7", "helper", batch_key="cohort-a", token_digest="ab" * 32),
            b"p",
            id="the helper's info",
        ),
        pytest.param(
            hpke_v2.share_info("round-7", "leader", batch_key="cohort-b", token_digest="ab" * 32),
            b"p",
            id="another batch",
        ),
        pytest.param(
            hpke_v2.share_info("round-7", "leader", batch_key="cohort-a", token_digest="cd" * 32),
            b"p",
            id="another token",
        ),
        pytest.param(INFO, b"q", id="another public share"),
        pytest.param(INFO, b"", id="no public share"),
    ],
)
def test_a_v2_share_does_not_open_under_another_context(keys, info: bytes, aad: bytes) -> None:
    private, public = keys
    enc, ciphertext = seal_v2(public, b"a share", INFO, aad=b"p")
    with pytest.raises(hpke.OpenFailed):
        hpke_v2.open_sealed(private, enc, ciphertext, info, aad=aad)


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda enc, ct: (enc, ct[:-1]), id="truncated ciphertext"),
        pytest.param(lambda enc, ct: (enc, ct[:1] + bytes([ct[1] ^ 1]) + ct[2:]), id="flipped ciphertext bit"),
        pytest.param(lambda enc, ct: (enc[:31], enc[31:] + ct), id="enc byte moved into the ciphertext"),
        pytest.param(lambda enc, ct: (bytes(32), ct), id="all-zero enc (low order point)"),
    ],
)
def test_v2_refuses_damaged_input(keys, damage) -> None:
    private, public = keys
    enc, ciphertext = damage(*seal_v2(public, b"a share", INFO, aad=b"p"))
    with pytest.raises(hpke.OpenFailed):
        hpke_v2.open_sealed(private, enc, ciphertext, INFO, aad=b"p")
