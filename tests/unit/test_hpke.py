"""pfs_device.hpke: RFC 9180 conformance, interop with cryptography's HPKE, and what binds a share.

The RFC's own test vector (vectors/rfc9180_a21.json, RFC 9180 Appendix A.2.1) is checked through
the very suite and opening the module uses; cryptography's independent implementation opens what
``seal`` seals and the reverse (with an empty aad: its HPKE takes none). Then the attacks: a share
opened with another role, another report's context, another key, or damaged bytes, is OpenFailed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hpke as cryptography_hpke
from cryptography.hazmat.primitives.asymmetric import x25519
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from pyhpke import KEMKeyPair

from pfs_device import hpke

RFC9180_A21 = json.loads((Path(__file__).parent / "vectors" / "rfc9180_a21.json").read_text())
CRYPTOGRAPHY_SUITE = cryptography_hpke.Suite(
    cryptography_hpke.KEM.X25519, cryptography_hpke.KDF.HKDF_SHA256, cryptography_hpke.AEAD.CHACHA20_POLY1305
)
CONTEXT = {"batch_key": "cohort-a", "token_digest": "ab" * 32, "public_share": b"\x07" * 64}
AAD = hpke.share_aad("round-7", **CONTEXT)
LEADER_INFO = hpke.share_info("leader")


def rfc(name: str) -> bytes:
    return bytes.fromhex(RFC9180_A21[name])


def encryptions() -> list[dict[str, bytes | int]]:
    return [
        {name: value if name == "sequence_number" else bytes.fromhex(value) for name, value in encryption.items()}
        for encryption in RFC9180_A21["encryptions"]
    ]


@pytest.fixture
def keys() -> tuple[bytes, bytes]:
    return hpke.key_pair_generate()


# ---------------------------------------------------------------- RFC 9180 Appendix A.2.1


def test_the_vector_is_of_this_suite_in_base_mode() -> None:
    assert (RFC9180_A21["mode"], RFC9180_A21["kem_id"], RFC9180_A21["kdf_id"], RFC9180_A21["aead_id"]) == (0, 32, 1, 3)
    assert (hpke.SUITE.kem.id.value, hpke.SUITE.kdf.id.value, hpke.SUITE.aead.id.value) == (0x20, 0x01, 0x03)


def test_rfc9180_key_pairs_are_raw_x25519_keys() -> None:
    assert hpke.public_key_of(rfc("skRm")) == rfc("pkRm")
    assert hpke.public_key_of(rfc("skEm")) == rfc("pkEm") == rfc("enc")


def test_rfc9180_key_and_base_nonce_give_every_ciphertext() -> None:
    # The vector checks itself: nonce = base_nonce XOR I2OSP(seq, Nn) (Section 5.2), and each ct is
    # ChaCha20-Poly1305 under key with that nonce and the aad.
    aead = ChaCha20Poly1305(rfc("key"))
    for encryption in encryptions():
        sequence = int(encryption["sequence_number"]).to_bytes(12, "big")
        assert encryption["nonce"] == bytes(a ^ b for a, b in zip(rfc("base_nonce"), sequence, strict=True))
        assert aead.encrypt(encryption["nonce"], encryption["pt"], encryption["aad"]) == encryption["ct"]


def test_the_suite_seals_the_rfc9180_encryptions_from_its_ephemeral_key() -> None:
    # SetupBaseS with the vector's ephemeral key (RFC 9180 Section 5.1.1), then Seal in sequence:
    # the same enc and the same ciphertext for every sequence number (3 is not in the vector).
    kem = hpke.SUITE.kem
    ephemeral = KEMKeyPair(kem.deserialize_private_key(rfc("skEm")), kem.deserialize_public_key(rfc("pkEm")))
    enc, sender = hpke.SUITE.create_sender_context(kem.deserialize_public_key(rfc("pkRm")), rfc("info"), eks=ephemeral)
    assert enc == rfc("enc")
    by_sequence = {int(e["sequence_number"]): e for e in encryptions()}
    for sequence in range(max(by_sequence) + 1):
        encryption = by_sequence.get(sequence)
        if encryption is None:
            sender.seal(b"", b"")  # only moves the sequence number on
        else:
            assert sender.seal(encryption["pt"], encryption["aad"]) == encryption["ct"]


def test_open_sealed_opens_the_rfc9180_first_encryption_with_its_aad() -> None:
    first = encryptions()[0]
    assert first["sequence_number"] == 0  # open_sealed is single-shot: sequence number 0
    assert hpke.open_sealed(rfc("skRm"), rfc("enc"), first["ct"], rfc("info"), aad=first["aad"]) == first["pt"]


def test_open_sealed_refuses_the_rfc9180_ciphertext_without_its_aad() -> None:
    first = encryptions()[0]
    with pytest.raises(hpke.OpenFailed):
        hpke.open_sealed(rfc("skRm"), rfc("enc"), first["ct"], rfc("info"))
    with pytest.raises(hpke.OpenFailed):
        hpke.open_sealed(rfc("skRm"), rfc("enc"), first["ct"], rfc("info"), aad=encryptions()[1]["aad"])


# ---------------------------------------------------------------- interop with cryptography's HPKE


def test_cryptography_opens_what_seal_seals_with_an_empty_aad(keys) -> None:
    private, public = keys
    enc, ciphertext = hpke.seal(public, b"a share", LEADER_INFO)
    recipient = x25519.X25519PrivateKey.from_private_bytes(private)
    assert CRYPTOGRAPHY_SUITE.decrypt(enc + ciphertext, recipient, info=LEADER_INFO) == b"a share"


def test_open_sealed_opens_what_cryptography_seals_with_an_empty_aad(keys) -> None:
    private, public = keys
    sealed = CRYPTOGRAPHY_SUITE.encrypt(b"a share", x25519.X25519PublicKey.from_public_bytes(public), info=LEADER_INFO)
    enc, ciphertext = sealed[: hpke.ENC_BYTES], sealed[hpke.ENC_BYTES :]
    assert hpke.open_sealed(private, enc, ciphertext, LEADER_INFO) == b"a share"
    with pytest.raises(hpke.OpenFailed):  # its aad is empty: a share's aad is another one
        hpke.open_sealed(private, enc, ciphertext, LEADER_INFO, aad=AAD)


def test_cryptography_does_not_open_a_share_sealed_with_its_context_as_aad(keys) -> None:
    # The context is in the AEAD's associated data, not the key schedule: an implementation that
    # passes no aad cannot open a share, whatever info it uses.
    private, public = keys
    enc, ciphertext = hpke.seal(public, b"a share", LEADER_INFO, aad=AAD)
    recipient = x25519.X25519PrivateKey.from_private_bytes(private)
    with pytest.raises(InvalidTag):
        CRYPTOGRAPHY_SUITE.decrypt(enc + ciphertext, recipient, info=LEADER_INFO)


# ---------------------------------------------------------------- the info and the aad of a share


def test_share_info_names_the_protocol_the_client_and_the_aggregator() -> None:
    assert hpke.share_info("leader") == b"pfs-studio input share v3\x01\x02"
    assert hpke.share_info("helper") == b"pfs-studio input share v3\x01\x03"
    with pytest.raises(ValueError, match="role"):
        hpke.share_info("collector")


def test_share_aad_length_prefixes_each_field() -> None:
    aad = hpke.share_aad("c", batch_key="bb", token_digest="", public_share=b"\x00\xff")
    assert aad == b"\x00\x00\x00\x01c" + b"\x00\x00\x00\x02bb" + b"\x00\x00\x00\x00" + b"\x00\x00\x00\x02\x00\xff"


def test_seal_then_open_round_trips(keys) -> None:
    private, public = keys
    enc, ciphertext = hpke.seal(public, b"a share", LEADER_INFO, aad=AAD)
    assert len(enc) == hpke.ENC_BYTES == 32
    assert len(ciphertext) == len(b"a share") + 16
    assert hpke.open_sealed(private, enc, ciphertext, LEADER_INFO, aad=AAD) == b"a share"


def test_seal_uses_a_fresh_ephemeral_key_each_time(keys) -> None:
    _, public = keys
    assert hpke.seal(public, b"same", LEADER_INFO)[0] != hpke.seal(public, b"same", LEADER_INFO)[0]


def test_a_share_sealed_for_the_helper_does_not_open_as_the_leaders(keys) -> None:
    # Even under the one key (an operator running both roles with one key pair): the role is in the info.
    private, public = keys
    enc, ciphertext = hpke.seal(public, b"a share", hpke.share_info("helper"), aad=AAD)
    with pytest.raises(hpke.OpenFailed):
        hpke.open_sealed(private, enc, ciphertext, LEADER_INFO, aad=AAD)
    assert hpke.open_sealed(private, enc, ciphertext, hpke.share_info("helper"), aad=AAD) == b"a share"


@pytest.mark.parametrize(
    "other",
    [
        pytest.param({"collection_key": "round-8"}, id="another collection"),
        pytest.param({"batch_key": "cohort-b"}, id="another batch"),
        pytest.param({"batch_key": ""}, id="no batch"),
        pytest.param({"token_digest": "cd" * 32}, id="another token"),
        pytest.param({"public_share": b"\x08" * 64}, id="another public share"),
        pytest.param({"public_share": b""}, id="no public share"),
        # The same bytes with the boundary between two fields moved: length prefixes tell them apart.
        pytest.param({"batch_key": "cohort-aa", "token_digest": "b" + "ab" * 31}, id="batch/token boundary moved"),
    ],
)
def test_a_share_does_not_open_under_another_reports_context(keys, other: dict) -> None:
    private, public = keys
    enc, ciphertext = hpke.seal(public, b"a share", LEADER_INFO, aad=AAD)
    context = {"collection_key": "round-7", **CONTEXT, **other}
    with pytest.raises(hpke.OpenFailed):
        hpke.open_sealed(private, enc, ciphertext, LEADER_INFO, aad=hpke.share_aad(**context))


def test_open_sealed_refuses_another_key(keys) -> None:
    _, public = keys
    other_private, _ = hpke.key_pair_generate()
    enc, ciphertext = hpke.seal(public, b"a share", LEADER_INFO, aad=AAD)
    with pytest.raises(hpke.OpenFailed):
        hpke.open_sealed(other_private, enc, ciphertext, LEADER_INFO, aad=AAD)


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda enc, ct: (enc, ct[:-1]), id="truncated ciphertext"),
        pytest.param(lambda enc, ct: (enc, ct[:15]), id="shorter than the tag"),
        pytest.param(lambda enc, ct: (enc, b""), id="empty ciphertext"),
        pytest.param(lambda enc, ct: (enc, ct[:1] + bytes([ct[1] ^ 1]) + ct[2:]), id="flipped ciphertext bit"),
        pytest.param(lambda enc, ct: (enc, ct[:-1] + bytes([ct[-1] ^ 0x80])), id="flipped tag bit"),
        pytest.param(lambda enc, ct: (enc, ct + b"\x00"), id="extended ciphertext"),
        pytest.param(lambda enc, ct: (bytes([enc[0] ^ 1]) + enc[1:], ct), id="flipped enc bit"),
        pytest.param(lambda enc, ct: (enc[:31], ct), id="short enc"),
        pytest.param(lambda enc, ct: (enc[:31], enc[31:] + ct), id="enc byte moved into the ciphertext"),
        pytest.param(lambda enc, ct: (enc + ct[:1], ct[1:]), id="ciphertext byte moved into enc"),
        pytest.param(lambda enc, ct: (bytes(32), ct), id="all-zero enc (low order point)"),
        pytest.param(lambda enc, ct: (b"\xff" * 32, b"\xff" * 40), id="garbage"),
    ],
)
def test_open_sealed_refuses_damaged_input(keys, damage) -> None:
    private, public = keys
    enc, ciphertext = damage(*hpke.seal(public, b"a share", LEADER_INFO, aad=AAD))
    with pytest.raises(hpke.OpenFailed):
        hpke.open_sealed(private, enc, ciphertext, LEADER_INFO, aad=AAD)


def test_a_ciphertext_spliced_onto_another_shares_enc_does_not_open(keys) -> None:
    private, public = keys
    enc, _ = hpke.seal(public, b"a share", LEADER_INFO, aad=AAD)
    _, other_ciphertext = hpke.seal(public, b"a share", LEADER_INFO, aad=AAD)
    with pytest.raises(hpke.OpenFailed):
        hpke.open_sealed(private, enc, other_ciphertext, LEADER_INFO, aad=AAD)


@pytest.mark.parametrize("private", [b"", b"\x01" * 31, b"\x01" * 33])
def test_open_sealed_refuses_a_malformed_private_key(keys, private: bytes) -> None:
    _, public = keys
    enc, ciphertext = hpke.seal(public, b"a share", LEADER_INFO, aad=AAD)
    with pytest.raises(hpke.OpenFailed):
        hpke.open_sealed(private, enc, ciphertext, LEADER_INFO, aad=AAD)


def test_seal_refuses_a_malformed_public_key() -> None:
    with pytest.raises(ValueError):
        hpke.seal(b"\x01" * 31, b"a share", LEADER_INFO, aad=AAD)
