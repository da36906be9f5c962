"""Poplar1 (privacy.vdaf.poplar1, draft-irtf-cfrg-vdaf-20 Section 8): the draft's four Poplar1 vectors reproduced
through the public functions, the checker's command line on them and on corrupted copies, honest heavy-hitter
walks, and malicious clients and collectors: IDPF keys that count a client twice or are corrupted fail the
sketch in verification; an aggregation parameter that revisits a level is not valid.

The draft publishes no negative Poplar1 vector (every operation in its files succeeds); the refusals are the
tests below, each against an honest report built the same way that is accepted.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from privacy.vdaf.errors import MeasurementError, VdafError, VerifyError
from privacy.vdaf.field import Field64
from privacy.vdaf.poplar1 import USAGE_SHARD_RAND, Poplar1
from privacy.vdaf.xof import XofFixedKeyAes128, XofTurboShake128, format_dst
from tests.vectors import VDAF_VECTORS, vdaf_vectors_required

ROOT = Path(__file__).resolve().parents[2]
POPLAR1_FILES = tuple(VDAF_VECTORS / "vdaf" / f"Poplar1_{i}.json" for i in range(4))
CTX = b"pfs studio tests"
VERIFY_KEY = bytes(range(32))
NONCE = bytes(range(16, 32))


def _load(path: Path) -> dict:
    vdaf_vectors_required()
    return json.loads(path.read_text())


# -- The draft's vectors, through the public functions -------------------------------------------------


@pytest.mark.parametrize("path", POPLAR1_FILES, ids=lambda path: path.name)
def test_poplar1_reproduces_every_value_of_the_drafts_vector(path: Path) -> None:
    data = _load(path)
    vdaf = Poplar1(data["bits"])
    ctx, verify_key = bytes.fromhex(data["ctx"]), bytes.fromhex(data["verify_key"])
    agg_param = vdaf.decode_agg_param(bytes.fromhex(data["agg_param"]))
    assert vdaf.encode_agg_param(agg_param).hex() == data["agg_param"]
    assert all(op["success"] for op in data["operations"])  # the draft has no negative Poplar1 vector
    out_shares: list[list[list[int]]] = [[], []]
    for report in data["reports"]:
        nonce = bytes.fromhex(report["nonce"])
        public_share, input_shares = vdaf.shard(ctx, tuple(report["measurement"]), nonce, bytes.fromhex(report["rand"]))
        assert vdaf.encode_public_share(public_share).hex() == report["public_share"]
        assert [vdaf.encode_input_share(share).hex() for share in input_shares] == report["input_shares"]

        states, shares = [], []
        for agg_id in range(2):
            state, share = vdaf.verify_init(
                verify_key,
                ctx,
                agg_id,
                agg_param,
                nonce,
                vdaf.decode_public_share(bytes.fromhex(report["public_share"])),
                vdaf.decode_input_share(agg_id, bytes.fromhex(report["input_shares"][agg_id])),
            )
            states.append(state)
            shares.append(share)
        for round_ in range(vdaf.ROUNDS):
            assert [vdaf.encode_verifier_share(agg_param, share).hex() for share in shares] == report[
                "verifier_shares"
            ][round_]
            message = vdaf.verifier_shares_to_message(ctx, agg_param, shares)
            assert vdaf.encode_verifier_message(agg_param, message).hex() == report["verifier_messages"][round_]
            results = [vdaf.verify_next(ctx, state, message) for state in states]
            if round_ < vdaf.ROUNDS - 1:
                states, shares = (list(column) for column in zip(*results, strict=True))
        for agg_id, out_share in enumerate(results):
            assert vdaf.encode_agg_share(agg_param, out_share).hex() == report["out_shares"][agg_id]
            out_shares[agg_id].append(out_share)

    agg_shares = [vdaf.aggregate(agg_param, shares) for shares in out_shares]
    assert [vdaf.encode_agg_share(agg_param, share).hex() for share in agg_shares] == data["agg_shares"]
    assert vdaf.unshard(agg_param, agg_shares, len(data["reports"])) == data["agg_result"]


def test_the_vectors_cover_inner_and_leaf_levels() -> None:
    levels = {Poplar1(4).decode_agg_param(bytes.fromhex(_load(path)["agg_param"]))[0] for path in POPLAR1_FILES}
    assert levels == {0, 1, 2, 3}  # Field64 at 0..2, Field255 at the leaves (3)


# -- The checker's command line -------------------------------------------------------------------------


def _check_vectors(*paths: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "privacy.vdaf.check_vectors", *map(str, paths)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def test_check_vectors_command_accepts_the_poplar1_idpf_and_aes_xof_files() -> None:
    paths = (*POPLAR1_FILES, VDAF_VECTORS / "IdpfBBCGGI21_0.json", VDAF_VECTORS / "XofFixedKeyAes128.json")
    result = _check_vectors(*paths)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{len(paths)} of {len(paths)} files match" in result.stdout


def _flip_byte(hex_value: str, byte: int) -> str:
    flipped = int(hex_value[2 * byte : 2 * byte + 2], 16) ^ 0x01
    return f"{hex_value[: 2 * byte]}{flipped:02x}{hex_value[2 * byte + 2 :]}"


def test_check_vectors_command_names_a_flipped_byte_in_a_correction_word(tmp_path: Path) -> None:
    data = _load(POPLAR1_FILES[1])
    # 4 bits: one byte of packed control bits, then the seed correction words, 16 bytes each.
    data["reports"][0]["public_share"] = _flip_byte(data["reports"][0]["public_share"], 1 + 16 * 2 + 5)
    corrupted = tmp_path / "Poplar1_1.json"
    corrupted.write_text(json.dumps(data))
    result = _check_vectors(corrupted)
    assert result.returncode == 1
    assert "operation 0 (shard, report 0)" in result.stdout
    assert "public_share differs (first difference at byte 38, in the seed correction word of level 2)" in result.stdout


def test_check_vectors_command_names_a_flipped_byte_in_a_sketch_share(tmp_path: Path) -> None:
    data = _load(POPLAR1_FILES[3])
    shares = data["reports"][0]["verifier_shares"][0]
    shares[1] = _flip_byte(shares[1], 40)
    corrupted = tmp_path / "Poplar1_3.json"
    corrupted.write_text(json.dumps(data))
    result = _check_vectors(corrupted)
    assert result.returncode == 1
    assert "verify_init, report 0, aggregator 1" in result.stdout
    assert "verifier_shares[0][1] (the masked sketch) differs (first difference at byte 40)" in result.stdout


def test_check_vectors_command_names_a_flipped_byte_in_the_idpf_files_correction_word(tmp_path: Path) -> None:
    data = _load(VDAF_VECTORS / "IdpfBBCGGI21_0.json")
    # 10 bits: three bytes of control bits, ten seeds, then nine inner value corrections of 16 bytes.
    data["public_share"] = _flip_byte(data["public_share"], 3 + 160 + 16 * 4 + 2)
    corrupted = tmp_path / "IdpfBBCGGI21_0.json"
    corrupted.write_text(json.dumps(data))
    result = _check_vectors(corrupted)
    assert result.returncode == 1
    assert "in the value correction word of level 4" in result.stdout


def test_check_vectors_holds_poplar1_to_each_steps_success_flag(tmp_path: Path) -> None:
    """A step the file marks as failing must fail; a step it marks as succeeding must not be refused."""
    data = _load(POPLAR1_FILES[0])
    data["operations"][3]["success"] = False  # the first verifier_shares_to_message, which succeeds
    marked_failing = tmp_path / "Poplar1_0.json"
    marked_failing.write_text(json.dumps(data))
    result = _check_vectors(marked_failing)
    assert result.returncode == 1
    assert "operation 3 (verifier_shares_to_message, report 0, round 0)" in result.stdout
    assert "the operation succeeded but the file says it must fail" in result.stdout

    data = _load(POPLAR1_FILES[0])
    shares = data["reports"][0]["verifier_shares"][1]
    shares[0] = _flip_byte(shares[0], 0)  # a second-round sketch share: the two no longer sum to zero
    # Without the verify_next steps that recompute the shares, the message is computed from the file's.
    data["operations"] = [op for op in data["operations"] if (op["operation"], op.get("round")) != ("verify_next", 1)]
    refused = tmp_path / "Poplar1_00.json"
    refused.write_text(json.dumps(data))
    result = _check_vectors(refused)
    assert result.returncode == 1
    assert "(verifier_shares_to_message, report 0, round 1): refused but the file says it succeeds" in result.stdout
    assert "sketch verification failed" in result.stdout


# -- Honest clients -------------------------------------------------------------------------------------


def _verify(vdaf: Poplar1, agg_param, nonce: bytes, public_share, input_shares) -> list[list[int]]:  # noqa: ANN001
    """Both aggregators through both rounds, on the encoded messages as deployed: the two output shares."""
    public_share = vdaf.decode_public_share(vdaf.encode_public_share(public_share))
    states, shares = [], []
    for agg_id in range(2):
        input_share = vdaf.decode_input_share(agg_id, vdaf.encode_input_share(input_shares[agg_id]))
        state, share = vdaf.verify_init(VERIFY_KEY, CTX, agg_id, agg_param, nonce, public_share, input_share)
        states.append(state)
        shares.append(share)
    message = vdaf.verifier_shares_to_message(CTX, agg_param, shares)
    round_two = [vdaf.verify_next(CTX, state, message) for state in states]
    message = vdaf.verifier_shares_to_message(CTX, agg_param, [share for _, share in round_two])
    return [vdaf.verify_next(CTX, state, message) for state, _ in round_two]


def test_an_honest_heavy_hitter_walk_counts_every_prefix_at_every_level() -> None:
    rng = random.Random(11)
    vdaf = Poplar1(6)
    popular = [(True, False, True, True, False, False), (False, False, False, True, True, True)]
    measurements = [popular[0]] * 5 + [popular[1]] * 4 + [tuple(rng.random() < 0.5 for _ in range(6)) for _ in range(3)]
    reports = []
    for measurement in measurements:
        nonce = rng.randbytes(16)
        reports.append((nonce, *vdaf.shard(CTX, measurement, nonce, rng.randbytes(vdaf.RAND_SIZE))))
    previous: list = []
    prefixes = [(False,), (True,)]
    for level in range(vdaf.BITS):
        agg_param = (level, prefixes)
        assert vdaf.is_valid(agg_param, previous)
        out_shares = [_verify(vdaf, agg_param, *report) for report in reports]
        agg_shares = [vdaf.aggregate(agg_param, [shares[j] for shares in out_shares]) for j in range(2)]
        counts = vdaf.unshard(agg_param, agg_shares, len(reports))
        assert counts == [sum(m[: level + 1] == prefix for m in measurements) for prefix in prefixes], level
        previous.append(agg_param)
        heavy = [prefix for prefix, count in zip(prefixes, counts, strict=True) if count >= 4]
        prefixes = sorted((*prefix, bit) for prefix in heavy for bit in (False, True))
    assert heavy == sorted(popular)


def test_a_client_refuses_a_measurement_of_the_wrong_length() -> None:
    vdaf = Poplar1(4)
    with pytest.raises(MeasurementError):
        vdaf.shard(CTX, (True, False), NONCE, bytes(vdaf.RAND_SIZE))


# -- Malicious clients: the sketch refuses them ---------------------------------------------------------


def _authenticators(vdaf: Poplar1, rand: bytes) -> list[int]:
    """The inner levels' k, as the client derives them from its shard seed (Section 8.2.1)."""
    size = vdaf.xof.SEED_SIZE
    shard_seed = rand[vdaf.idpf.RAND_SIZE + 2 * size : vdaf.idpf.RAND_SIZE + 3 * size]
    xof = XofTurboShake128(shard_seed, vdaf.domain_separation_tag(USAGE_SHARD_RAND, CTX), NONCE)
    return xof.next_vec(Field64, vdaf.BITS - 1)


def _xor(left: bytes, right: bytes) -> bytes:
    return bytes(a ^ b for a, b in zip(left, right, strict=True))


def _extend(seed: bytes) -> tuple[list[bytes], list[int]]:
    """The draft's extend() at an inner level, transcribed as a malicious client computes it."""
    stream = XofFixedKeyAes128(seed, format_dst(1, 0, 0) + CTX, NONCE).next(32)
    children = [bytearray(stream[:16]), bytearray(stream[16:])]
    bits = [child[0] & 1 for child in children]
    for child in children:
        child[0] &= 0xFE
    return [bytes(child) for child in children], bits


def _convert_seed(seed: bytes) -> bytes:
    return XofFixedKeyAes128(seed, format_dst(1, 0, 1) + CTX, NONCE).next(16)


def _double_vote_keys(vdaf: Poplar1, k: int, rng: random.Random):  # noqa: ANN202
    """IDPF keys whose level-1 values are (1, k) at both 00 and 01: one client, two votes.

    At level 0 the correction makes both aggregators' seeds of node 0 equal with control bits that
    differ; at level 1 a zero seed correction and both control corrections set keep the children's seeds
    equal and their control bits different, so each child is the value correction alone, with the same sign
    when the two children's own control bits agree (a few tries of the keys find such keys).
    """
    p = Field64.MODULUS
    while True:
        keys = [rng.randbytes(16), rng.randbytes(16)]
        (s0, t0), (s1, t1) = _extend(keys[0]), _extend(keys[1])
        # The root's control bits are (0, 1): aggregator 1 applies level 0's correction.
        seed_cw0 = _xor(s0[0], s1[0])
        ctrl_cw0 = (t0[0] ^ t1[0] ^ 1, 0)
        ctrl = (t0[0], t1[0] ^ ctrl_cw0[0])  # differ by construction
        node_seed = _convert_seed(s0[0])  # the same for both aggregators
        children, bits = _extend(node_seed)
        if bits[0] == bits[1]:
            break
    # Both extend the same seed to the same children (s, t); the aggregator whose control bit is set also
    # flips their control bits (ctrl_cw (1, 1)). Child b's value is then (c0 - c1) w_cw with c0 - c1 =
    # +-(1 - 2 t[b]): one sign for both children, as t[0] == t[1].
    sign = (1 if ctrl[0] else -1) * (1 - 2 * bits[0])
    w_cw1 = [sign % p, sign * k % p]
    public_share = [
        (seed_cw0, tuple(map(bool, ctrl_cw0)), [0, 0]),
        (bytes(16), (True, True), w_cw1),
        *((bytes(16), (False, False), [0, 0]) for _ in range(vdaf.BITS - 2)),  # deeper levels: not evaluated
    ]
    return public_share, keys


def test_an_idpf_with_two_non_zero_paths_fails_the_sketch() -> None:
    rng = random.Random(5)
    vdaf = Poplar1(4)
    rand = rng.randbytes(vdaf.RAND_SIZE)
    honest_public_share, input_shares = vdaf.shard(CTX, (False, True, True, False), NONCE, rand)
    agg_param = (1, [(False, False), (False, True)])
    assert vdaf.is_valid(agg_param, [(0, [(False,), (True,)])])
    honest = _verify(vdaf, agg_param, NONCE, honest_public_share, input_shares)
    assert vdaf.unshard(agg_param, honest, 1) == [0, 1]

    k = _authenticators(vdaf, rand)[1]
    public_share, keys = _double_vote_keys(vdaf, k, rng)
    malicious = [(keys[j], *input_shares[j][1:]) for j in range(2)]
    # The crafted keys do share (1, k) at both prefixes: the attack is the double vote it claims to be.
    values = [vdaf.idpf.eval(j, public_share, keys[j], 1, agg_param[1], CTX, NONCE) for j in range(2)]
    assert [[(x + y) % Field64.MODULUS for x, y in zip(a, b, strict=True)] for a, b in zip(*values, strict=True)] == [
        [1, k],
        [1, k],
    ]
    with pytest.raises(VerifyError, match="sketch verification failed"):
        _verify(vdaf, agg_param, NONCE, public_share, malicious)


def test_a_client_that_programs_a_count_of_two_fails_the_sketch() -> None:
    rng = random.Random(6)
    vdaf = Poplar1(4)
    alpha = (True, True, False, True)
    rand = rng.randbytes(vdaf.RAND_SIZE)
    _, input_shares = vdaf.shard(CTX, alpha, NONCE, rand)
    ks = _authenticators(vdaf, rand)
    agg_param = (2, [(True, True, False), (True, True, True)])
    beta_inner = [[1, k] for k in ks]
    beta_inner[2] = [2, 2 * ks[2] % Field64.MODULUS]  # both data and authenticator doubled: consistent, yet 2
    idpf_rand = rand[: vdaf.idpf.RAND_SIZE]
    leaf = [1, 0]  # the leaves are not evaluated at level 2
    public_share, _ = vdaf.idpf.gen(alpha, beta_inner, leaf, CTX, NONCE, idpf_rand)
    values = [vdaf.idpf.eval(j, public_share, input_shares[j][0], 2, agg_param[1], CTX, NONCE) for j in range(2)]
    p = Field64.MODULUS
    assert [[(x + y) % p for x, y in zip(a, b, strict=True)] for a, b in zip(*values, strict=True)] == [
        [2, 2 * ks[2] % p],
        [0, 0],
    ]
    with pytest.raises(VerifyError, match="sketch verification failed"):
        _verify(vdaf, agg_param, NONCE, public_share, input_shares)


@pytest.mark.parametrize("level", [1, 3])
def test_a_wrong_seed_correction_word_fails_the_sketch(level: int) -> None:
    rng = random.Random(level)
    vdaf = Poplar1(4)
    alpha = (False, True, False, True)
    public_share, input_shares = vdaf.shard(CTX, alpha, NONCE, rng.randbytes(vdaf.RAND_SIZE))
    agg_param = (level, [(*alpha[:level], False), (*alpha[:level], True)])
    assert vdaf.unshard(agg_param, _verify(vdaf, agg_param, NONCE, public_share, input_shares), 1) == [
        int(not alpha[level]),
        int(alpha[level]),
    ]
    seed_cw, ctrl_cw, w_cw = public_share[level]
    public_share[level] = (_xor(seed_cw, b"\x02" + bytes(15)), ctrl_cw, w_cw)
    with pytest.raises(VerifyError, match="sketch verification failed"):
        _verify(vdaf, agg_param, NONCE, public_share, input_shares)


def test_a_report_verified_under_another_nonce_fails_the_sketch() -> None:
    vdaf = Poplar1(4)
    public_share, input_shares = vdaf.shard(CTX, (True,) * 4, NONCE, bytes(range(vdaf.RAND_SIZE)))
    agg_param = (1, [(True, False), (True, True)])
    with pytest.raises(VerifyError):
        _verify(vdaf, agg_param, bytes(16), public_share, input_shares)


# -- Malicious collectors: aggregation parameters that is_valid refuses ---------------------------------

TWO_LEVELS = [(0, [(False,), (True,)]), (1, [(False, True), (True, False)])]


def test_an_aggregation_parameter_that_revisits_a_level_is_not_valid() -> None:
    vdaf = Poplar1(4)
    assert vdaf.is_valid((2, [(False, True, False)]), TWO_LEVELS)
    assert not vdaf.is_valid((1, [(False, True), (True, False)]), TWO_LEVELS)  # the same level again
    assert not vdaf.is_valid((1, [(True, False)]), TWO_LEVELS)  # the same level, other prefixes
    assert not vdaf.is_valid((0, [(True,)]), TWO_LEVELS)  # a level below
    # Even in a history out of order, a level verified once is never verified again.
    assert not vdaf.is_valid((1, [(True, True)]), [TWO_LEVELS[1], (0, [(True,)])])


def test_an_aggregation_parameter_whose_prefixes_are_unsorted_repeated_or_off_the_tree_is_not_valid() -> None:
    vdaf = Poplar1(4)
    assert not vdaf.is_valid((1, [(True, False), (False, True)]), [])  # unsorted
    assert not vdaf.is_valid((1, [(True, False), (True, False)]), [])  # repeated
    assert not vdaf.is_valid((2, [(True, True, False)]), TWO_LEVELS)  # 11 was not a candidate at level 1
    assert not vdaf.is_valid((1, [(True,)]), [])  # a prefix of the wrong length
    assert not vdaf.is_valid((4, [(True,) * 5]), [])  # below the leaves


def test_aggregation_parameters_encode_as_the_draft_says_and_refuse_trailing_bits() -> None:
    vdaf = Poplar1(12)
    agg_param = (9, [(True,) + (False,) * 9, (False,) * 9 + (True,)])
    encoded = vdaf.encode_agg_param(agg_param)
    assert encoded.hex() == "0009" + "00000002" + "8000" + "0040"
    assert vdaf.decode_agg_param(encoded) == agg_param
    with pytest.raises(VdafError, match="trailing bits"):
        vdaf.decode_agg_param(encoded[:-1] + b"\x41")
    with pytest.raises(VdafError, match="length"):
        vdaf.decode_agg_param(encoded[:-1])
