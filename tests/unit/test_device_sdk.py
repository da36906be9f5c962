"""The device SDK's own logic, with no server: what a real device decides, charges, and sends.

The service here is a fake aggregator pair with real keys: it signs blinded tokens with a real
issuer key and opens the uploaded shares with the real HPKE private keys, so the test sees
exactly what the aggregators would. That the SDK imports nothing of Django is checked in a process of its own
(tests/integration/test_device_sdk_processes.py).
"""

from __future__ import annotations

import json
import threading
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from aggregation.verification import AggregatorVerification, VerifyConfig, proofs_decide
from pfs_device import hpke
from pfs_device.decision import DeviceTask, snapshot_digest
from pfs_device.report_client import AggregatorKeys
from pfs_device.sdk.__main__ import _Gated, main
from pfs_device.sdk.client import TRANSIENT_CODES, ClientError
from pfs_device.sdk.device import TASK_INVALID, Offer, ServerKeys, data_read, report_compute, task_answer
from pfs_device.sdk.ledger import Ledger
from pfs_device.tokens import issuer_key_generate, sign_blinded, verify
from pfs_device.wire import Report, report_digest_of
from privacy.parameters import PrivacyParameters
from privacy.report_vdaf import report_nonce, report_shape
from privacy.vdaf.field import Field128

POLICY = {
    "analysis": "t.phones",
    "fleet": "phones",
    "queryClass": {"stream": "KeyboardNGrams", "fields": ["age"], "cohortFields": ["locale"]},
    "budget": {"epsilon": 2.0, "reports": 4, "delta": 1e-5, "accountant": "basic"},
    "fields": {"age": {"localEpsilon": 4.0, "epsilon": 2.0, "reports": 4, "aggregatorNoise": True}},
}
AGES = {"age": {"dataType": "BucketedType", "boundaries": [20, 30, 40, 50, 60, 70, 80]}}
ISSUER = issuer_key_generate(bits=1024)  # small: generated once, only to sign in these tests
TASK = DeviceTask(
    task_key="t.phones/central/round-1",
    analysis="t.phones",
    snapshot_digest=snapshot_digest(POLICY),
    query="select age from KeyboardNGrams",
    cohorts=("locale",),
    encoded_field="age",
    data_types=AGES,
    privacy=PrivacyParameters(
        noise="aggregator", mechanism="", epsilon0=None, epsilon=1.0, delta=1e-6, sampling_rate=1.0, min_cohort=3
    ),
    seed=0,
    token_key=ISSUER.public.digest,
)


def offer(task: DeviceTask = TASK, policy: dict = POLICY) -> Offer:
    return Offer(task=task, policy=policy, policy_digest=snapshot_digest(policy), report_length=8, issuer=ISSUER.public)


class Aggregators:
    """The server side, reduced to what a device talks to."""

    def __init__(self, ledger_path: Path | None = None) -> None:
        self.leader = hpke.key_pair_generate()
        self.helper = hpke.key_pair_generate()
        self.tokens: list[str] = []
        self.reports: list[np.ndarray] = []
        self.batches: list[str] = []
        self.ledger_at_upload: dict | None = None
        self.ledger_path = ledger_path
        self.fail_upload = False

    def keys(self) -> ServerKeys:
        served = AggregatorKeys(leader=self.leader[1], helper=self.helper[1])
        return ServerKeys(served, announced=served)  # the tasks answer names the keys each aggregator serves

    def token(self, collection_key: str, blinded: int) -> int:
        self.tokens.append(collection_key)
        return sign_blinded(ISSUER, blinded)

    def upload(self, report: Report) -> str:
        if self.ledger_path is not None:
            self.ledger_at_upload = json.loads(self.ledger_path.read_text())
        if self.fail_upload:
            raise ClientError("connection refused", code="unreachable")
        assert verify(ISSUER.public, report.collection_key, report.token, report_digest=report_digest_of(report))
        shares: list[bytes] = []
        aad = hpke.share_aad(
            report.collection_key,
            batch_key=report.batch_key,
            token_digest=report.token.digest,
            public_share=report.public,
        )
        for (private, _), sealed, role in (
            (self.leader, report.leader, "leader"),
            (self.helper, report.helper, "helper"),
        ):
            shares.append(hpke.open_sealed(private, sealed.enc, sealed.ciphertext, hpke.share_info(role), aad=aad))
        # Both aggregators' Prio3 verification: the report is a one-hot vector of the 8 age buckets.
        shape = report_shape(mechanism=None, epsilon0=None, domain_size=8)
        config = VerifyConfig.of(collection_key=report.collection_key, shape=shape, verify_key=bytes(32))
        sides = [AggregatorVerification(role, config) for role in ("leader", "helper")]
        verifier_shares = [
            side.start([report_nonce(report.token.nonce)], [report.public], [share])
            for side, share in zip(sides, shares)
        ]
        messages = proofs_decide(config, *verifier_shares)
        assert all(side.finish(messages) == [True] for side in sides)
        outputs = [Field128.decode_vec(side.output_share(0)) for side in sides]
        vector = [(a + b) % Field128.MODULUS for a, b in zip(*outputs, strict=True)]
        self.reports.append(np.array(vector, dtype=np.int64))
        self.batches.append(report.batch_key)
        return "accepted"


def device_line(age: float | None = 34, locale: str | None = "fr_FR", device_id: str = "me") -> bytes:
    profile = {k: v for k, v in (("age", age), ("locale", locale)) if v is not None}
    return json.dumps({"id": device_id, "profile": profile}).encode()


@pytest.fixture
def ledger(tmp_path) -> Ledger:
    return Ledger(tmp_path / "ledger.json")


def answer(ledger: Ledger, server: Aggregators, the_offer: Offer | None = None, line: bytes | None = None, **kw):
    (data,) = data_read([line or device_line()])
    return task_answer(
        offer=the_offer or offer(),
        data=data,
        fleet=kw.get("fleet", "phones"),
        ledger=ledger,
        keys=server.keys(),
        service=server,
        rng=np.random.default_rng(1),
    )


def test_a_device_answers_with_its_bucket_in_its_batch_and_charges_its_ledger(ledger) -> None:
    server = Aggregators()
    outcome = answer(ledger, server)
    assert (outcome.decision, outcome.upload) == ("answered", "accepted")
    # Aggregator noise: the one-hot of age 34, bucket [30, 40) = index 2, in the device's locale batch.
    assert server.reports[0].tolist() == np.eye(8, dtype=int)[2].tolist()
    assert server.batches == ["locale=fr_FR"]
    columns = Ledger(ledger.path).columns("t.phones")
    assert columns["epsilon_used"][0] == 1_000_000_000 and columns["reports_used"][0] == 1
    assert columns["field:age:epsilon_used"][0] == 1_000_000_000


def test_a_device_without_the_field_answers_oov_as_the_simulator_does(ledger) -> None:
    server = Aggregators()
    answer(ledger, server, line=device_line(age=None, locale=None))
    assert server.reports[0].tolist() == np.eye(8, dtype=int)[0].tolist()  # OOV
    assert server.batches == ["locale=unknown"]


def test_a_device_refuses_a_query_outside_its_approved_class(ledger) -> None:
    server = Aggregators()
    sneaky = replace(TASK, query="select perplexity from KeyboardNGrams", encoded_field="perplexity")
    outcome = answer(ledger, server, offer(sneaky, POLICY))
    assert outcome.decision == "query_class"
    assert server.tokens == [] and server.reports == []
    assert Ledger(ledger.path).columns("t.phones")["epsilon_used"][0] == 0


def test_a_device_refuses_a_policy_that_does_not_hash_to_its_digest(ledger) -> None:
    server = Aggregators()
    generous = {**POLICY, "budget": {**POLICY["budget"], "epsilon": 100.0}}
    tampered = Offer(
        task=TASK, policy=generous, policy_digest=TASK.snapshot_digest, report_length=8, issuer=ISSUER.public
    )
    assert answer(ledger, server, tampered).decision == "policy_snapshot"
    assert server.reports == []


def test_a_device_refuses_another_fleets_task(ledger) -> None:
    assert answer(ledger, Aggregators(), fleet="tablets").decision == "query_class"


def test_a_device_refuses_when_its_ledger_is_spent(ledger) -> None:
    server = Aggregators()
    for round_number in (1, 2):
        task = replace(TASK, task_key=f"t.phones/central/round-{round_number}")
        assert answer(ledger, server, offer(task)).decision == "answered"
    third = replace(TASK, task_key="t.phones/central/round-3")
    outcome = answer(ledger, server, offer(third))
    assert outcome.decision == "analysis_budget"  # 2 x epsilon 1 spent of the analysis's 2
    assert len(server.reports) == 2 and len(server.tokens) == 2
    assert Ledger(ledger.path).columns("t.phones")["reports_used"][0] == 2


def test_the_charge_is_on_disk_before_the_upload_and_stays_when_it_fails(ledger) -> None:
    server = Aggregators(ledger_path=ledger.path)
    server.fail_upload = True
    outcome = answer(ledger, server)
    assert outcome.decision == "answered" and outcome.upload == "failed: unreachable"
    assert server.ledger_at_upload["analyses"]["t.phones"]["epsilon_used"] == 1_000_000_000
    assert Ledger(ledger.path).columns("t.phones")["epsilon_used"][0] == 1_000_000_000


def test_a_device_decides_once_per_task(ledger) -> None:
    server = Aggregators()
    sampled_out = offer(replace(TASK, privacy=replace(TASK.privacy, sampling_rate=1e-12)))
    first = answer(ledger, server, sampled_out)
    assert first.decision == "not_sampled"
    # Asked again, the device does not draw its participation again: it keeps its decision.
    again = answer(ledger, server, offer(TASK))
    assert again.repeated and again.decision == "not_sampled" and server.tokens == []


def test_a_task_whose_report_length_is_not_the_recipes_is_refused_before_anything_is_spent(ledger) -> None:
    server = Aggregators()
    wrong = Offer(
        task=TASK, policy=POLICY, policy_digest=snapshot_digest(POLICY), report_length=9, issuer=ISSUER.public
    )
    assert answer(ledger, server, wrong).decision == TASK_INVALID
    assert Ledger(ledger.path).columns("t.phones")["epsilon_used"][0] == 0 and server.tokens == []


def test_client_noise_reports_are_privatized_with_the_mechanism() -> None:
    task = replace(TASK, privacy=replace(TASK.privacy, noise="client", mechanism="asymmetric_ohe", epsilon0=2.0))
    (data,) = data_read([device_line(age=34)])
    rng = np.random.default_rng(7)
    vectors = np.array([report_compute(offer(task), data, rng)[0] for _ in range(4000)])
    # Asymmetric OHE at epsilon0 = 2: the true bucket is 1 with probability 1/2, every other 1/(1 + e^2).
    p, q = 0.5, 1 / (1 + np.e**2)
    means = vectors.mean(axis=0)
    expected = np.full(8, q)
    expected[2] = p
    errors = np.sqrt(expected * (1 - expected) / 4000)
    assert np.all(np.abs(means - expected) < 4 * errors)


def test_the_cli_exits_2_on_bad_input(tmp_path, capsys) -> None:
    creds = tmp_path / "creds.json"
    creds.write_text(
        json.dumps({"fleet": "phones", "helper": "http://127.0.0.1:9", "devices": [{"id": "a", "secret": "s"}]})
    )
    data = tmp_path / "data.jsonl"
    data.write_bytes(device_line(device_id="a") + b"\n" + device_line(device_id="b") + b"\n")
    assert main(["--server", "http://127.0.0.1:9", "--credential", str(creds), "--data", str(data)]) == 2
    assert "2 devices for 1 credentials" in capsys.readouterr().err
    data.write_bytes(b'{"id": "x", "profile": {"age": "old"}}\n')
    assert main(["--server", "http://127.0.0.1:9", "--credential", str(creds), "--data", str(data)]) == 2
    assert "profile.age" in capsys.readouterr().err
    assert main(["--credential", str(creds), "--data", str(data)]) == 2  # no server anywhere
    assert main(["--server", "ftp://x", "--credential", str(creds), "--data", str(tmp_path / "none")]) == 2
    data.write_bytes(device_line(device_id="a") + b"\n")
    assert (
        main(
            ["--server", "http://127.0.0.1:9", "--relay", "relay:8002", "--credential", str(creds), "--data", str(data)]
        )
        == 2
    )
    assert "--relay: must be an http:// or https:// URL" in capsys.readouterr().err


def test_a_device_without_a_relay_says_the_leader_sees_its_address(tmp_path, capsys) -> None:
    creds = tmp_path / "creds.json"
    creds.write_text(
        json.dumps({"fleet": "phones", "helper": "http://127.0.0.1:9", "devices": [{"id": "a", "secret": "s"}]})
    )
    data = tmp_path / "data.jsonl"
    data.write_bytes(device_line(device_id="a") + b"\n")
    arguments = ["--server", "http://127.0.0.1:9", "--credential", str(creds), "--data", str(data), "--once"]
    assert main([*arguments, "--state", str(tmp_path / "state")]) == 1  # nothing answers at port 9
    assert "no relay: each upload reaches the leader from this device's address" in capsys.readouterr().err
    assert main([*arguments, "--state", str(tmp_path / "state"), "--relay", "http://127.0.0.1:9"]) == 1
    assert "no relay" not in capsys.readouterr().err


def test_a_relayed_device_with_no_route_this_pass_uploads_nothing_directly() -> None:
    class Direct:
        def upload(self, report, *, relay=None):
            pytest.fail("a relayed device must never upload directly")

    gated = _Gated(Direct(), threading.BoundedSemaphore(1), relayed=True, relay=None)
    with pytest.raises(ClientError) as refused:
        gated.upload(object())
    assert refused.value.code == "relay_unavailable" and refused.value.code in TRANSIENT_CODES  # kept pending
