"""Prio3 (privacy.vdaf): the draft's official test vectors, the checker, honest reports, and malicious clients.

The vectors are the repository's copy (tests/vectors/vdaf/); the checker's command line, run as a process, is
tested in tests/integration/test_check_vectors_cli.py.

The malicious clients go through the public functions only: ``Prio3.shard_encoded`` proves an invalid
vector honestly (what a cheating device can do), and both aggregators then run verify_init,
verifier_shares_to_message and verify_next on the encoded messages, as deployed.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pytest

from privacy.vdaf import (
    DecodeError,
    MeasurementError,
    Prio3,
    Prio3Count,
    Prio3Histogram,
    Prio3MultihotCountVec,
    Prio3Sum,
    Prio3SumVec,
    VdafError,
    VerifyError,
    batch,
)
from privacy.vdaf.check_vectors import main as check_vectors_main
from privacy.vdaf.field import Field128
from tests.vectors import VDAF_VECTOR_FILES, VDAF_VECTOR_NAMES, VDAF_VECTORS, vdaf_vectors_required

CTX = b"pfs studio tests"
# A malicious client's proof is honest about an invalid vector: the FLP's decision is what refuses it.
PROOF_REJECTED = "proof verifier check failed"
P128 = Field128.MODULUS


def test_the_official_test_vectors_are_all_there() -> None:
    vdaf_vectors_required()
    names = {path.name for path in VDAF_VECTORS.rglob("*.json")}
    assert names == {Path(name).name for name in VDAF_VECTOR_NAMES}  # nothing more than the code conforms to
    for kind in ("Prio3Count", "Prio3Histogram", "Prio3MultihotCountVec", "Prio3SumVec"):
        assert any(name.startswith(f"{kind}_") for name in names), kind
    assert any("_bad_" in name for name in names)


def test_the_official_test_vectors_are_the_published_bytes() -> None:
    """Unmodified, as their README says: SHA256SUMS holds the hashes of the files as the draft's repository has them."""
    vdaf_vectors_required()
    published = dict(
        reversed(line.split("  ", 1)) for line in (VDAF_VECTORS / "SHA256SUMS").read_text().splitlines() if line
    )
    assert sorted(published) == sorted(VDAF_VECTOR_NAMES)
    for name, digest in published.items():
        assert hashlib.sha256((VDAF_VECTORS / name).read_bytes()).hexdigest() == digest, name


# The files are a fixed list, so a missing one is a failing parameter, never an empty (skipped) parametrisation.
@pytest.mark.parametrize("path", VDAF_VECTOR_FILES, ids=lambda path: path.name)
def test_check_vectors_accepts_each_official_file(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    vdaf_vectors_required()
    assert check_vectors_main([str(path)]) == 0, capsys.readouterr().out


def _tampered_copy(tmp_path: Path, name: str, edit) -> Path:  # noqa: ANN001 - a small local callback
    vdaf_vectors_required()
    data = json.loads((VDAF_VECTORS / "vdaf" / name).read_text())
    edit(data)
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def _flip_hex(value: str, at: int = 10) -> str:
    return value[:at] + ("1" if value[at] == "0" else "0") + value[at + 1 :]


def test_check_vectors_reports_a_changed_verifier_share(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def edit(data: dict) -> None:
        shares = data["reports"][3]["verifier_shares"][0]
        shares[1] = _flip_hex(shares[1])

    path = _tampered_copy(tmp_path, "Prio3Histogram_2.json", edit)
    assert check_vectors_main([str(path)]) == 1
    out = capsys.readouterr().out
    assert "verify_init, report 3, aggregator 1" in out
    assert "verifier_shares[0][1] differs" in out


def test_check_vectors_reports_a_refusal_the_file_marks_as_success(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def edit(data: dict) -> None:
        data["operations"][-1]["success"] = True

    path = _tampered_copy(tmp_path, "Prio3Count_bad_gadget_poly.json", edit)
    assert check_vectors_main([str(path)]) == 1
    assert "refused but the file says it succeeds" in capsys.readouterr().out


def test_check_vectors_reports_a_wrong_aggregate_result(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def edit(data: dict) -> None:
        data["agg_result"][0] += 1

    path = _tampered_copy(tmp_path, "Prio3MultihotCountVec_1.json", edit)
    assert check_vectors_main([str(path)]) == 1
    assert "agg_result differs" in capsys.readouterr().out


def test_check_vectors_without_files_is_bad_usage() -> None:
    with pytest.raises(SystemExit) as exit_info:
        check_vectors_main([])
    assert exit_info.value.code == 2


def test_check_vectors_on_an_unreadable_file_is_bad_usage(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    broken = tmp_path / "Prio3Count_9.json"
    broken.write_text("{not json")
    assert check_vectors_main([str(tmp_path / "absent.json")]) == 2
    assert check_vectors_main([str(broken)]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_check_vectors_on_a_file_naming_no_vdaf_is_bad_usage(tmp_path: Path) -> None:
    path = tmp_path / "Poplar9_0.json"
    path.write_text("{}")
    assert check_vectors_main([str(path)]) == 2


# -- Running reports through both aggregators -------------------------------------------------------


def _random_bytes(rng: np.random.Generator, size: int) -> bytes:
    return rng.bytes(size)


def _upload(
    vdaf: Prio3, measurement: object, rng: np.random.Generator, *, encoded: list[int] | None = None
) -> tuple[bytes, bytes, list[bytes]]:
    """A device's report as it travels: nonce, encoded public share, encoded input shares."""
    nonce, rand = _random_bytes(rng, vdaf.NONCE_SIZE), _random_bytes(rng, vdaf.RAND_SIZE)
    if encoded is None:
        public_share, input_shares = vdaf.shard(CTX, measurement, nonce, rand)
    else:
        public_share, input_shares = vdaf.shard_encoded(CTX, encoded, nonce, rand)
    return nonce, vdaf.encode_public_share(public_share), [vdaf.encode_input_share(s) for s in input_shares]


def _verify(vdaf: Prio3, verify_key: bytes, nonce: bytes, public_share: bytes, input_shares: list[bytes]) -> list:
    """Both (all) aggregators' verification of one report; the output shares, or VdafError if refused."""
    states, verifier_shares = [], []
    for agg_id, encoded in enumerate(input_shares):
        state, verifier_share = vdaf.verify_init(
            verify_key,
            CTX,
            agg_id,
            None,
            nonce,
            vdaf.decode_public_share(public_share),
            vdaf.decode_input_share(agg_id, encoded),
        )
        states.append(state)
        # Through the wire format, as the other aggregator receives it.
        verifier_shares.append(vdaf.decode_verifier_share(vdaf.encode_verifier_share(verifier_share)))
    message = vdaf.verifier_shares_to_message(CTX, None, verifier_shares)
    message = vdaf.decode_verifier_message(vdaf.encode_verifier_message(message))
    return [vdaf.verify_next(CTX, state, message) for state in states]


def _batch_verdicts(vdaf: Prio3, verify_key: bytes, reports: list[tuple[bytes, bytes, list[bytes]]]) -> list[bool]:
    """The same verification by privacy.vdaf.batch: which reports every aggregator accepts."""
    nonces = [nonce for nonce, _, _ in reports]
    public_shares = [public for _, public, _ in reports]
    states, verifier_shares = [], []
    for agg_id in range(vdaf.SHARES):
        state, shares = batch.verify_init_batch(
            vdaf, verify_key, CTX, agg_id, nonces, public_shares, [shares[agg_id] for _, _, shares in reports]
        )
        states.append(state)
        verifier_shares.append(shares)
    messages = batch.verifier_shares_to_message_batch(vdaf, CTX, verifier_shares)
    verdicts = [batch.verify_next_batch(vdaf, CTX, state, messages) for state in states]
    return [all(column) for column in zip(*verdicts, strict=True)]


def _assert_rejected(
    vdaf: Prio3, verify_key: bytes, report: tuple[bytes, bytes, list[bytes]], match: str | None = None
) -> None:
    with pytest.raises(VerifyError, match=match):
        _verify(vdaf, verify_key, *report)
    assert _batch_verdicts(vdaf, verify_key, [report]) == [False]


def _multihot_vector(length: int, max_weight: int, entries: dict[int, int], claimed_weight: int) -> list[int]:
    """An encoded MultihotCountVec measurement with arbitrary field values and a claimed weight."""
    from privacy.vdaf.circuits import encode_range_checked_int

    counts = [0] * length
    for index, value in entries.items():
        counts[index] = value % P128
    return counts + encode_range_checked_int(Field128, claimed_weight, max_weight)


@pytest.mark.parametrize("delta", [2, 3, 5000, 2**64, P128 // 2])
def test_multihot_report_with_weight_one_but_non_bit_entries_is_rejected(delta: int) -> None:
    # +delta in one bucket and -(delta - 1) in another sum to 1: the weight check alone would pass.
    vdaf = Prio3MultihotCountVec(length=100, max_weight=3, chunk_length=10)
    rng = np.random.default_rng(delta % 2**32)
    vector = _multihot_vector(100, 3, {7: delta, 61: -(delta - 1)}, claimed_weight=1)
    assert sum(vector[:100]) % P128 == 1
    report = _upload(vdaf, None, rng, encoded=vector)
    _assert_rejected(vdaf, _random_bytes(rng, 32), report, match=PROOF_REJECTED)


def test_multihot_report_with_an_entry_of_5000_is_rejected() -> None:
    vdaf = Prio3MultihotCountVec(length=64, max_weight=2, chunk_length=8)
    rng = np.random.default_rng(5000)
    report = _upload(vdaf, None, rng, encoded=_multihot_vector(64, 2, {9: 5000}, claimed_weight=2))
    _assert_rejected(vdaf, _random_bytes(rng, 32), report, match=PROOF_REJECTED)


def test_histogram_report_with_an_entry_of_5000_is_rejected() -> None:
    vdaf = Prio3Histogram(length=64, chunk_length=8)
    rng = np.random.default_rng(5001)
    vector = [0] * 64
    vector[9] = 5000
    report = _upload(vdaf, None, rng, encoded=vector)
    _assert_rejected(vdaf, _random_bytes(rng, 32), report, match=PROOF_REJECTED)


def test_multihot_client_refuses_a_weight_above_max_weight() -> None:
    vdaf = Prio3MultihotCountVec(length=16, max_weight=2, chunk_length=4)
    measurement = [True, True, True] + [False] * 13
    with pytest.raises(MeasurementError, match="max_weight"):
        vdaf.shard(CTX, measurement, bytes(16), bytes(vdaf.RAND_SIZE))


@pytest.mark.parametrize("claimed_weight", [0, 1, 2])
def test_multihot_report_with_a_weight_above_max_weight_is_rejected(claimed_weight: int) -> None:
    # Three honest bits against max_weight 2: the weight encoding cannot say 3, so any claim is false.
    vdaf = Prio3MultihotCountVec(length=16, max_weight=2, chunk_length=4)
    rng = np.random.default_rng(3 + claimed_weight)
    vector = _multihot_vector(16, 2, {0: 1, 5: 1, 11: 1}, claimed_weight=claimed_weight)
    report = _upload(vdaf, None, rng, encoded=vector)
    _assert_rejected(vdaf, _random_bytes(rng, 32), report, match=PROOF_REJECTED)


def _two_honest_reports(vdaf: Prio3, rng: np.random.Generator) -> tuple[tuple, tuple]:
    first = _upload(vdaf, [True, False] * 8, rng)
    second = _upload(vdaf, [False] * 15 + [True], rng)
    return first, second


def test_splicing_a_valid_report_with_another_reports_helper_share_is_rejected() -> None:
    vdaf = Prio3MultihotCountVec(length=16, max_weight=8, chunk_length=4)
    rng = np.random.default_rng(11)
    verify_key = _random_bytes(rng, 32)
    (nonce, public_share, shares), (_, _, other_shares) = _two_honest_reports(vdaf, rng)
    _assert_rejected(vdaf, verify_key, (nonce, public_share, [shares[0], other_shares[1]]))


def test_splicing_a_valid_reports_shares_with_another_public_share_is_rejected() -> None:
    vdaf = Prio3MultihotCountVec(length=16, max_weight=8, chunk_length=4)
    rng = np.random.default_rng(12)
    verify_key = _random_bytes(rng, 32)
    (nonce, _, shares), (_, other_public_share, _) = _two_honest_reports(vdaf, rng)
    _assert_rejected(vdaf, verify_key, (nonce, other_public_share, shares))


def test_splicing_a_valid_proof_onto_another_reports_measurement_share_is_rejected() -> None:
    vdaf = Prio3MultihotCountVec(length=16, max_weight=8, chunk_length=4)
    rng = np.random.default_rng(13)
    verify_key = _random_bytes(rng, 32)
    (nonce, public_share, shares), (_, _, other_shares) = _two_honest_reports(vdaf, rng)
    meas_bytes = vdaf.flp.MEAS_LEN * Field128.ENCODED_SIZE
    # The other report's leader measurement share with this report's proof share and blind.
    spliced = other_shares[0][:meas_bytes] + shares[0][meas_bytes:]
    _assert_rejected(vdaf, verify_key, (nonce, public_share, [spliced, shares[1]]))


def test_replaying_a_valid_report_under_another_nonce_is_rejected() -> None:
    vdaf = Prio3MultihotCountVec(length=16, max_weight=8, chunk_length=4)
    rng = np.random.default_rng(14)
    verify_key = _random_bytes(rng, 32)
    (_, public_share, shares), (other_nonce, _, _) = _two_honest_reports(vdaf, rng)
    _assert_rejected(vdaf, verify_key, (other_nonce, public_share, shares))


def test_an_honest_report_spliced_nowhere_is_accepted() -> None:
    # The splicing tests' control: the same reports, unchanged, verify.
    vdaf = Prio3MultihotCountVec(length=16, max_weight=8, chunk_length=4)
    rng = np.random.default_rng(11)
    verify_key = _random_bytes(rng, 32)
    first, second = _two_honest_reports(vdaf, rng)
    for report in (first, second):
        _verify(vdaf, verify_key, *report)
    assert _batch_verdicts(vdaf, verify_key, [first, second]) == [True, True]


def _run_honest(vdaf: Prio3, measurements: list, rng: np.random.Generator) -> object:
    verify_key = _random_bytes(rng, vdaf.VERIFY_KEY_SIZE)
    agg_shares = [vdaf.agg_init() for _ in range(vdaf.SHARES)]
    for measurement in measurements:
        out_shares = _verify(vdaf, verify_key, *_upload(vdaf, measurement, rng))
        agg_shares = [vdaf.agg_update(None, a, o) for a, o in zip(agg_shares, out_shares, strict=True)]
    encoded = [vdaf.encode_agg_share(a) for a in agg_shares]
    return vdaf.unshard(None, [vdaf.decode_agg_share(a) for a in encoded], len(measurements))


@pytest.mark.parametrize(
    ("length", "max_weight", "chunk_length", "shares"),
    [(1, 1, 1, 2), (7, 3, 2, 2), (100, 10, 10, 3), (1024, 4, 32, 2)],
)
def test_honest_multihot_reports_are_accepted_and_sum_correctly(
    length: int, max_weight: int, chunk_length: int, shares: int
) -> None:
    rng = np.random.default_rng(length)
    vdaf = Prio3MultihotCountVec(length, max_weight, chunk_length, shares=shares)
    measurements = []
    for _ in range(4 if length > 100 else 12):
        bits = np.zeros(length, dtype=bool)
        bits[rng.choice(length, size=rng.integers(0, max_weight + 1), replace=False)] = True
        measurements.append(bits.tolist())
    assert _run_honest(vdaf, measurements, rng) == np.sum(measurements, axis=0).tolist()


@pytest.mark.parametrize(("length", "chunk_length", "shares"), [(1, 1, 2), (11, 3, 3), (256, 16, 2)])
def test_honest_histogram_reports_are_accepted_and_count_correctly(length: int, chunk_length: int, shares: int) -> None:
    rng = np.random.default_rng(100 + length)
    vdaf = Prio3Histogram(length, chunk_length, shares=shares)
    measurements = [int(b) for b in rng.integers(0, length, size=10)]
    assert _run_honest(vdaf, measurements, rng) == np.bincount(measurements, minlength=length).tolist()


def test_honest_count_sum_and_sum_vec_reports_aggregate_correctly() -> None:
    rng = np.random.default_rng(7)
    counts = [int(x) for x in rng.integers(0, 2, size=10)]
    assert _run_honest(Prio3Count(shares=3), counts, rng) == sum(counts)
    sums = [int(x) for x in rng.integers(0, 1001, size=10)]
    assert _run_honest(Prio3Sum(1000), sums, rng) == sum(sums)
    vectors = rng.integers(0, 300, size=(5, 6)).tolist()
    assert _run_honest(Prio3SumVec(6, 299, 4), vectors, rng) == np.sum(vectors, axis=0).tolist()


def test_batch_verification_of_honest_multihot_reports_aggregates_correctly() -> None:
    rng = np.random.default_rng(21)
    vdaf = Prio3MultihotCountVec(length=300, max_weight=5, chunk_length=17)
    verify_key = _random_bytes(rng, 32)
    measurements = (rng.random((40, 300)) < 0.01).tolist()
    measurements = [m if sum(m) <= 5 else [False] * 300 for m in measurements]
    reports = [_upload(vdaf, m, rng) for m in measurements]
    nonces = [r[0] for r in reports]
    public_shares = [r[1] for r in reports]
    states, verifier_shares = [], []
    for agg_id in range(2):
        state, shares = batch.verify_init_batch(
            vdaf, verify_key, CTX, agg_id, nonces, public_shares, [r[2][agg_id] for r in reports]
        )
        states.append(state)
        verifier_shares.append(shares)
    messages = batch.verifier_shares_to_message_batch(vdaf, CTX, verifier_shares)
    agg_shares = [
        batch.aggregate_batch(vdaf, state, batch.verify_next_batch(vdaf, CTX, state, messages)) for state in states
    ]
    assert vdaf.unshard(None, agg_shares, len(reports)) == np.sum(measurements, axis=0).tolist()


# -- Malformed inputs give clear errors ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("vdaf", "measurement"),
    [
        (Prio3Count(), 2),
        (Prio3Count(), 0.5),
        (Prio3Sum(10), 11),
        (Prio3Histogram(4, 2), 4),
        (Prio3Histogram(4, 2), -1),
        (Prio3Histogram(4, 2), True),
        (Prio3MultihotCountVec(4, 2, 2), [True, False]),
        (Prio3MultihotCountVec(4, 2, 2), [2, 0, 0, 0]),
        (Prio3SumVec(2, 5, 2), [1, 6]),
    ],
)
def test_clients_refuse_measurements_outside_the_domain(vdaf: Prio3, measurement: object) -> None:
    with pytest.raises(MeasurementError):
        vdaf.shard(CTX, measurement, bytes(16), bytes(vdaf.RAND_SIZE))


def test_aggregators_refuse_malformed_messages_with_decode_errors() -> None:
    vdaf = Prio3Histogram(8, 3)
    rng = np.random.default_rng(1)
    nonce, public_share, shares = _upload(vdaf, 3, rng)
    with pytest.raises(DecodeError):
        vdaf.decode_input_share(0, shares[0][:-1])
    with pytest.raises(DecodeError):
        vdaf.decode_input_share(1, shares[1] + b"\0")
    with pytest.raises(DecodeError):
        vdaf.decode_public_share(public_share[:-1])
    # A leader share holding a value >= p.
    overflow = b"\xff" * 16 + shares[0][16:]
    with pytest.raises(DecodeError, match="modulus"):
        vdaf.decode_input_share(0, overflow)
    with pytest.raises(VdafError):
        vdaf.verify_init(bytes(31), CTX, 0, None, nonce, None, vdaf.decode_input_share(0, shares[0]))
    assert all(isinstance(e, ValueError) for e in (DecodeError("x"), VerifyError("x"), MeasurementError("x")))


def test_sharding_refuses_wrong_sized_randomness() -> None:
    vdaf = Prio3Count()
    with pytest.raises(VdafError, match="nonce"):
        vdaf.shard(CTX, 1, bytes(15), bytes(vdaf.RAND_SIZE))
    with pytest.raises(VdafError, match="random"):
        vdaf.shard(CTX, 1, bytes(16), bytes(vdaf.RAND_SIZE - 1))


def test_a_real_device_shards_with_os_randomness() -> None:
    # The documented call on a device: fresh CSPRNG bytes for the nonce and the sharding randomness.
    vdaf = Prio3Histogram(length=8, chunk_length=3)
    nonce, rand = os.urandom(vdaf.NONCE_SIZE), os.urandom(vdaf.RAND_SIZE)
    public_share, input_shares = vdaf.shard(CTX, 5, nonce, rand)
    out_shares = _verify(
        vdaf,
        os.urandom(32),
        nonce,
        vdaf.encode_public_share(public_share),
        [vdaf.encode_input_share(s) for s in input_shares],
    )
    assert vdaf.unshard(None, out_shares, 1) == [0, 0, 0, 0, 0, 1, 0, 0]
