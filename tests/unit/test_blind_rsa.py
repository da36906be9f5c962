"""pfs_device.blind_rsa: RFC 9474 Appendix A test vectors, round trips and refusals.

The vectors (vectors/rfc9474.json) fix each variant's randomness (msg_prefix, salt, inv), so every
intermediate value of the protocol is checked, down to the exact signature.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa

from pfs_device import blind_rsa

RFC9474 = json.loads((Path(__file__).parent / "vectors" / "rfc9474.json").read_text())
VECTORS = {vector["name"]: vector for vector in RFC9474["vectors"]}
KEY = {name: int(value, 16) for name, value in RFC9474["key"].items()}


def hex_bytes(vector: dict, name: str) -> bytes:
    return bytes.fromhex(vector[name])


@pytest.fixture(scope="module")
def rfc_key() -> rsa.RSAPrivateKey:
    p, q, d = KEY["p"], KEY["q"], KEY["d"]
    numbers = rsa.RSAPrivateNumbers(
        p=p,
        q=q,
        d=d,
        dmp1=rsa.rsa_crt_dmp1(d, p),
        dmq1=rsa.rsa_crt_dmq1(d, q),
        iqmp=rsa.rsa_crt_iqmp(p, q),
        public_numbers=rsa.RSAPublicNumbers(KEY["e"], KEY["n"]),
    )
    return numbers.private_key()


@pytest.fixture(scope="module")
def signer() -> rsa.RSAPrivateKey:
    return blind_rsa.key_generate()


@pytest.fixture(scope="module")
def other_signer() -> rsa.RSAPrivateKey:
    return blind_rsa.key_generate()


def test_the_vector_key_is_consistent() -> None:
    # A transcription error in p, q, n, e or d shows here before it shows as a wrong signature.
    assert KEY["p"] * KEY["q"] == KEY["n"]
    assert KEY["e"] * KEY["d"] % math.lcm(KEY["p"] - 1, KEY["q"] - 1) == 1


def test_the_vectors_cover_every_variant() -> None:
    assert set(VECTORS) == set(blind_rsa.VARIANTS)


@pytest.mark.parametrize("name", sorted(VECTORS))
def test_the_protocol_reproduces_the_rfc9474_vector(rfc_key, name: str) -> None:
    vector, variant = VECTORS[name], blind_rsa.VARIANTS[name]
    public_key = rfc_key.public_key()

    # Prepare with the vector's prefix given, as a device prepares its token message (the prefix
    # drawn first: pfs_device.tokens): the public function, so its conformance is what is checked.
    input_msg = blind_rsa.prepare(hex_bytes(vector, "msg"), variant, msg_prefix=hex_bytes(vector, "msg_prefix"))
    assert input_msg == hex_bytes(vector, "prepared_msg")

    inv = int(vector["inv"], 16)
    blinded_msg, inv_out = blind_rsa._blind(
        public_key, input_msg, variant, salt=hex_bytes(vector, "salt"), r=pow(inv, -1, KEY["n"])
    )
    assert inv_out == inv
    assert blinded_msg == hex_bytes(vector, "blinded_msg")

    blind_sig = blind_rsa.blind_sign(rfc_key, blinded_msg)
    assert blind_sig == hex_bytes(vector, "blind_sig")

    sig = blind_rsa.finalize(public_key, input_msg, blind_sig, inv, variant)
    assert sig == hex_bytes(vector, "sig")
    assert blind_rsa.verify(public_key, input_msg, sig, variant)


@pytest.mark.parametrize("name", sorted(name for name, vector in VECTORS.items() if "encoded_msg" in vector))
def test_emsa_pss_encode_reproduces_the_rfc9474_encoded_message(name: str) -> None:
    vector = VECTORS[name]
    encoded = blind_rsa._emsa_pss_encode(
        hex_bytes(vector, "prepared_msg"), KEY["n"].bit_length() - 1, hex_bytes(vector, "salt")
    )
    assert encoded == hex_bytes(vector, "encoded_msg")


@pytest.mark.parametrize("name", sorted(VECTORS))
def test_the_vector_signature_verifies_with_cryptography_rsa_pss(rfc_key, name: str) -> None:
    # Independent of blind_rsa.verify: cryptography's own RSASSA-PSS verifier with the variant's salt.
    vector, variant = VECTORS[name], blind_rsa.VARIANTS[name]
    rfc_key.public_key().verify(
        hex_bytes(vector, "sig"),
        hex_bytes(vector, "prepared_msg"),
        padding.PSS(mgf=padding.MGF1(hashes.SHA384()), salt_length=variant.salt_length),
        hashes.SHA384(),
    )


@pytest.mark.parametrize("variant", blind_rsa.VARIANTS.values(), ids=lambda variant: variant.name)
def test_a_blind_signature_round_trips(signer, variant: blind_rsa.Variant) -> None:
    public_key = signer.public_key()
    input_msg = blind_rsa.prepare(b"pfs-studio token v2|collection|nonce", variant)
    blinded_msg, inv = blind_rsa.blind(public_key, input_msg, variant)
    sig = blind_rsa.finalize(public_key, input_msg, blind_rsa.blind_sign(signer, blinded_msg), inv, variant)
    assert blind_rsa.verify(public_key, input_msg, sig, variant)
    # A standard RSASSA-PSS signature: cryptography verifies it without knowing it was blind.
    public_key.verify(
        sig,
        input_msg,
        padding.PSS(mgf=padding.MGF1(hashes.SHA384()), salt_length=variant.salt_length),
        hashes.SHA384(),
    )


def test_prepare_prefixes_32_fresh_bytes_only_for_randomized_variants() -> None:
    first = blind_rsa.prepare(b"msg", blind_rsa.PSS_RANDOMIZED)
    second = blind_rsa.prepare(b"msg", blind_rsa.PSS_RANDOMIZED)
    assert len(first) == 32 + 3 and first.endswith(b"msg") and first != second
    assert blind_rsa.prepare(b"msg", blind_rsa.PSS_DETERMINISTIC) == b"msg"


def test_blinding_the_same_message_twice_gives_unrelated_blinded_messages(signer) -> None:
    # The issuer cannot recognise a message it has seen: each blinding draws a fresh r.
    public_key = signer.public_key()
    variant = blind_rsa.PSSZERO_DETERMINISTIC  # no prefix, no salt: only r differs
    assert blind_rsa.blind(public_key, b"msg", variant)[0] != blind_rsa.blind(public_key, b"msg", variant)[0]


def test_verify_refuses_a_signature_over_another_message(signer) -> None:
    variant = blind_rsa.PSS_RANDOMIZED
    public_key = signer.public_key()
    input_msg = blind_rsa.prepare(b"collection-a", variant)
    blinded_msg, inv = blind_rsa.blind(public_key, input_msg, variant)
    sig = blind_rsa.finalize(public_key, input_msg, blind_rsa.blind_sign(signer, blinded_msg), inv, variant)
    assert blind_rsa.verify(public_key, input_msg, sig, variant)
    assert not blind_rsa.verify(public_key, input_msg[:32] + b"collection-b", sig, variant)
    assert not blind_rsa.verify(public_key, bytes(32) + b"collection-a", sig, variant)  # another prefix


def test_verify_refuses_a_signature_under_another_variant(rfc_key) -> None:
    # The PSS-Deterministic vector's signature has a 48-byte salt; PSSZERO expects none.
    vector = VECTORS["RSABSSA-SHA384-PSS-Deterministic"]
    sig, input_msg = hex_bytes(vector, "sig"), hex_bytes(vector, "prepared_msg")
    assert blind_rsa.verify(rfc_key.public_key(), input_msg, sig, blind_rsa.PSS_DETERMINISTIC)
    assert not blind_rsa.verify(rfc_key.public_key(), input_msg, sig, blind_rsa.PSSZERO_DETERMINISTIC)


def test_verify_refuses_a_signature_from_another_key(signer, other_signer) -> None:
    variant = blind_rsa.PSS_DETERMINISTIC
    blinded_msg, inv = blind_rsa.blind(other_signer.public_key(), b"msg", variant)
    sig = blind_rsa.finalize(
        other_signer.public_key(), b"msg", blind_rsa.blind_sign(other_signer, blinded_msg), inv, variant
    )
    assert blind_rsa.verify(other_signer.public_key(), b"msg", sig, variant)
    assert not blind_rsa.verify(signer.public_key(), b"msg", sig, variant)


def test_verify_refuses_a_wrong_length_signature(rfc_key) -> None:
    vector = VECTORS["RSABSSA-SHA384-PSS-Randomized"]
    sig, input_msg = hex_bytes(vector, "sig"), hex_bytes(vector, "prepared_msg")
    for bad in (sig[:-1], sig + b"\x00", b"\x00" + sig, b""):
        assert not blind_rsa.verify(rfc_key.public_key(), input_msg, bad, blind_rsa.PSS_RANDOMIZED)


def test_finalize_refuses_a_blinded_message_signed_by_another_key(signer, other_signer) -> None:
    variant = blind_rsa.PSS_RANDOMIZED
    input_msg = blind_rsa.prepare(b"msg", variant)
    blinded_msg, inv = blind_rsa.blind(signer.public_key(), input_msg, variant)
    # Blind again until the other key can sign it at all (else blind_sign refuses it as out of range).
    while int.from_bytes(blinded_msg, "big") >= other_signer.public_key().public_numbers().n:
        blinded_msg, inv = blind_rsa.blind(signer.public_key(), input_msg, variant)
    # Same size, other key: a signer that swapped keys (to tag this client) is caught at once.
    blind_sig = blind_rsa.blind_sign(other_signer, blinded_msg)
    with pytest.raises(blind_rsa.InvalidSignature):
        blind_rsa.finalize(signer.public_key(), input_msg, blind_sig, inv, variant)


def test_finalize_refuses_a_blind_signature_for_another_blinded_message(signer) -> None:
    variant = blind_rsa.PSS_RANDOMIZED
    public_key = signer.public_key()
    input_msg = blind_rsa.prepare(b"msg", variant)
    _, inv = blind_rsa.blind(public_key, input_msg, variant)
    other_blinded, _ = blind_rsa.blind(public_key, input_msg, variant)
    with pytest.raises(blind_rsa.InvalidSignature):
        blind_rsa.finalize(public_key, input_msg, blind_rsa.blind_sign(signer, other_blinded), inv, variant)


@pytest.mark.parametrize("change", [-1, 1], ids=["one byte short", "one byte long"])
def test_finalize_refuses_a_wrong_length_blind_signature(rfc_key, change: int) -> None:
    vector = VECTORS["RSABSSA-SHA384-PSS-Randomized"]
    blind_sig = hex_bytes(vector, "blind_sig")
    blind_sig = blind_sig[:-1] if change < 0 else b"\x00" + blind_sig  # same integer, one byte longer
    with pytest.raises(blind_rsa.UnexpectedInputSize):
        blind_rsa.finalize(
            rfc_key.public_key(),
            hex_bytes(vector, "prepared_msg"),
            blind_sig,
            int(vector["inv"], 16),
            blind_rsa.PSS_RANDOMIZED,
        )


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(lambda n: n, id="n"),
        pytest.param(lambda n: n + 1, id="n + 1"),
        pytest.param(lambda n: -1, id="all ones"),
    ],
)
def test_blind_sign_refuses_a_blinded_message_not_below_n(signer, value) -> None:
    n = signer.public_key().public_numbers().n
    k_len = (n.bit_length() + 7) // 8
    representative = value(n) % (1 << (8 * k_len))  # -1 wraps to 0xff...ff
    with pytest.raises(blind_rsa.MessageRepresentativeOutOfRange):
        blind_rsa.blind_sign(signer, representative.to_bytes(k_len, "big"))


def test_blind_sign_accepts_n_minus_one(signer) -> None:
    n = signer.public_key().public_numbers().n
    blind_sig = blind_rsa.blind_sign(signer, (n - 1).to_bytes(256, "big"))
    assert pow(int.from_bytes(blind_sig, "big"), 65537, n) == n - 1


@pytest.mark.parametrize("length", [255, 257, 0])
def test_blind_sign_refuses_a_wrong_length_blinded_message(signer, length: int) -> None:
    with pytest.raises(blind_rsa.UnexpectedInputSize):
        blind_rsa.blind_sign(signer, b"\x01" * length)


def test_blind_sign_refuses_to_return_a_faulty_signature(signer, monkeypatch) -> None:
    # A fault in one CRT half (Boneh-DeMillo-Lipton) would hand out a value that reveals a factor
    # of n; BlindSign checks s^e == m and refuses instead (RFC 9474 Section 4.3, steps 3 and 4).
    honest = blind_rsa._rsasp1
    monkeypatch.setattr(blind_rsa, "_rsasp1", lambda numbers, m: honest(numbers, m) + numbers.q)
    blinded_msg, _ = blind_rsa.blind(signer.public_key(), b"msg", blind_rsa.PSS_DETERMINISTIC)
    with pytest.raises(blind_rsa.SigningFailure):
        blind_rsa.blind_sign(signer, blinded_msg)


def test_blind_refuses_a_blinding_factor_without_inverse(rfc_key) -> None:
    with pytest.raises(blind_rsa.InvalidBlind):
        blind_rsa._blind(rfc_key.public_key(), b"msg", blind_rsa.PSSZERO_DETERMINISTIC, salt=b"", r=KEY["p"])


def test_blind_refuses_an_encoded_message_sharing_a_factor_with_n(rfc_key, monkeypatch) -> None:
    monkeypatch.setattr(blind_rsa, "_emsa_pss_encode", lambda message, em_bits, salt: KEY["q"].to_bytes(256, "big"))
    with pytest.raises(blind_rsa.InvalidInput):
        blind_rsa._blind(rfc_key.public_key(), b"msg", blind_rsa.PSSZERO_DETERMINISTIC, salt=b"", r=3)


def test_blind_refuses_a_salt_of_the_wrong_length(rfc_key) -> None:
    with pytest.raises(ValueError):
        blind_rsa._blind(rfc_key.public_key(), b"msg", blind_rsa.PSS_DETERMINISTIC, salt=b"", r=3)


def test_emsa_pss_encode_refuses_a_modulus_too_short_for_the_salt() -> None:
    # emLen must be at least hLen + sLen + 2 = 98 bytes (RFC 8017 Section 9.1.1, step 3).
    assert len(blind_rsa._emsa_pss_encode(b"msg", 98 * 8, bytes(48))) == 98
    with pytest.raises(blind_rsa.EncodingError):
        blind_rsa._emsa_pss_encode(b"msg", 97 * 8, bytes(48))


def test_emsa_pss_encode_keeps_the_encoding_below_two_to_the_em_bits() -> None:
    # Step 11 clears the top bits: with emBits = 8 * emLen - 7, only the lowest bit of the first byte survives.
    for salt in (bytes(48), b"\xff" * 48, b""):
        assert blind_rsa._emsa_pss_encode(b"msg", 8 * 128 - 7, salt)[0] <= 0x01


def test_prepare_refuses_a_prefix_of_the_wrong_length() -> None:
    with pytest.raises(ValueError):
        blind_rsa.prepare(b"msg", blind_rsa.PSS_RANDOMIZED, msg_prefix=bytes(31))
    with pytest.raises(ValueError):
        blind_rsa.prepare(b"msg", blind_rsa.PSS_DETERMINISTIC, msg_prefix=bytes(32))


def test_prepare_with_a_given_prefix_puts_exactly_it_before_the_message(signer) -> None:
    prefix = bytes(range(32))
    input_msg = blind_rsa.prepare(b"msg", blind_rsa.PSS_RANDOMIZED, msg_prefix=prefix)
    assert input_msg == prefix + b"msg"
    # And the protocol runs on it as on a drawn prefix: the signature verifies over prefix and message.
    blinded_msg, inv = blind_rsa.blind(signer.public_key(), input_msg, blind_rsa.PSS_RANDOMIZED)
    blind_sig = blind_rsa.blind_sign(signer, blinded_msg)
    sig = blind_rsa.finalize(signer.public_key(), input_msg, blind_sig, inv, blind_rsa.PSS_RANDOMIZED)
    assert blind_rsa.verify(signer.public_key(), prefix + b"msg", sig, blind_rsa.PSS_RANDOMIZED)
    assert not blind_rsa.verify(signer.public_key(), bytes(32) + b"msg", sig, blind_rsa.PSS_RANDOMIZED)


def test_keys_survive_serialization(signer) -> None:
    private = blind_rsa.private_key_from_pem(blind_rsa.private_key_to_pem(signer))
    public = blind_rsa.public_key_from_der(blind_rsa.public_key_to_der(signer.public_key()))
    assert private.private_numbers() == signer.private_numbers()
    assert public.public_numbers() == signer.public_key().public_numbers()
    blinded_msg, inv = blind_rsa.blind(public, b"msg", blind_rsa.PSS_DETERMINISTIC)
    blind_sig = blind_rsa.blind_sign(private, blinded_msg)
    assert blind_rsa.finalize(signer.public_key(), b"msg", blind_sig, inv, blind_rsa.PSS_DETERMINISTIC)


def test_loading_refuses_a_key_that_is_not_rsa() -> None:
    other = ec.generate_private_key(ec.SECP256R1())
    pem = other.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    der = other.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    with pytest.raises(ValueError):
        blind_rsa.private_key_from_pem(pem)
    with pytest.raises(ValueError):
        blind_rsa.public_key_from_der(der)
