"""Real devices over HTTP: tasks, tokens and anonymous uploads, rejections, closing and releasing a round.

The devices here are the test itself, speaking the wire format with the device code
(pfs_device.report_client, pfs_device.wire) through DRF's APIClient, and once through the WSGI
fast path (pfs_web.wsgi). An upload is received (202) and verified later in bulk
(aggregation.ingest): what the aggregators reject shows in the counters after ``verify``.
"""

from __future__ import annotations

import base64
import copy
import io
import json
import os
from dataclasses import replace
from datetime import timedelta

import numpy as np
import pytest
from django.core.cache import cache
from django.core.management import CommandError, call_command
from django.utils import timezone
from rest_framework.authtoken.models import Token as AuthToken
from rest_framework.test import APIClient

from aggregation.aggregators import HELPER, LEADER, rules_shape
from aggregation.ingest import reports_ingest
from aggregation.issuer import issuer_public_key
from aggregation.models import CollectionRules, HelperShare, IssuedToken, LeaderShare, PendingReport
from aggregation.reports import rejections, upload_body_limit
from analyses.models import Round
from analyses.reaper import rounds_reap
from analyses.services.policy import analysis_approve, analysis_create
from devices.models import CollectionWindow, DeviceCredential, Fleet
from pfs_device import hpke, wire
from pfs_device.attestation import DeviceKey, attestation_sign, token_request_sign
from pfs_device.report_client import AggregatorKeys, report_seal, report_shard, report_sign, report_token_obtain
from pfs_device.tokens import Token, nonce_generate, token_blind, token_finalize, token_obtain
from pfs_device.tokens import verify as verify_token
from privacy.report_vdaf import ReportShape
from tests.attest import Enrolled, attested, devices_enrol
from tests.conftest import RECIPE
from tests.unit.test_hpke_v2 import shares_seal_v2

pytestmark = pytest.mark.django_db

PHONES_SPEC = {
    "identifier": "t.phones",
    "fleet": "phones",
    "queryClass": {"stream": "KeyboardNGrams", "fields": ["age"], "cohortFields": ["locale"]},
    # The officer lets this test fleet release batches of 3 (the default floor is 1,000).
    "budget": {"epsilon": 4.0, "reports": 4, "delta": 1e-5, "minCohort": 3},
    "fields": {"age": {"localEpsilon": 4.0, "epsilon": 4.0, "reports": 4, "aggregatorNoise": True}},
}
# Aggregator noise: one-hot reports (weight 1), and a minimum cohort small enough for a unit test.
CENTRAL = {
    **RECIPE,
    "recipeIdentifier": "central",
    "AnalysisIdentifier": "t.phones",
    "privacy": {"noise": "aggregator", "epsilon": 1.0, "delta": 1e-6, "minCohort": 3},
}
# Client noise: epsilon0 = 2, epsilon = 1, delta = 1e-6 need 206 reports (FMT 2022, what devices enforce).
CLIENT = {
    **RECIPE,
    "recipeIdentifier": "client",
    "AnalysisIdentifier": "t.phones",
    "privacy": {"mechanism": "asymmetric_ohe", "epsilon0": 2.0, "epsilon": 1.0, "delta": 1e-6},
}
BUCKETS = 8  # RECIPE's age boundaries: OOV and 7 ranges


class Device:
    """A registered device speaking HTTP through an APIClient; with its key pair and attestation, it
    signs its token requests as the SDK does (pfs_device.sdk.client)."""

    def __init__(
        self, device_id: str, secret: str, *, key: DeviceKey | None = None, attestation: dict | None = None
    ) -> None:
        self.device_id = device_id
        self.secret = secret
        self.key = key
        self.attestation = attestation
        self.api = APIClient()
        self.api.credentials(HTTP_AUTHORIZATION=f"Device {device_id}:{secret}")

    @classmethod
    def of(cls, enrolled: Enrolled) -> Device:
        return cls(enrolled.device_id, enrolled.secret, key=enrolled.key, attestation=enrolled.attestation)

    def tasks(self) -> dict:
        response = self.api.get("/api/device/tasks/")
        assert response.status_code == 200, response.content
        return response.json()

    def token_request(self, key: str, blinded: int, **extra):
        encoded = base64.b64encode(blinded.to_bytes(256, "big")).decode()
        body = {"collection_key": key, "blinded": encoded}
        if self.key is not None:
            minimal = blinded.to_bytes((blinded.bit_length() + 7) // 8, "big")
            signature = token_request_sign(self.key, key, minimal)
            body.update(attestation=self.attestation, device_signature=base64.b64encode(signature).decode())
        body.update(extra)
        return self.api.post("/api/device/tokens/", body, format="json")

    def issue(self, key: str):
        def issue(blinded: int) -> int:
            response = self.token_request(key, blinded)
            assert response.status_code == 201, response.content
            return int.from_bytes(base64.b64decode(response.json()["blind_signature"]), "big")

        return issue

    def token(self, key: str) -> Token:
        """This device's token of the collection, bound to a report no one holds (a made-up digest)."""
        return token_obtain(
            collection_key=key,
            nonce=nonce_generate(),
            report_digest=os.urandom(32),
            issuer=issuer_public_key(key),
            issue=self.issue(key),
        )

    def sign(self, sealed: wire.Report) -> wire.Report:
        """``sealed`` with this device's token, signed over exactly its content and nonce."""
        key = sealed.collection_key
        unsigned = replace(sealed, token=Token(nonce=sealed.token.nonce, signature=b""))
        return report_token_obtain(report=unsigned, issuer=issuer_public_key(key), issue=self.issue(key))

    def report(self, key: str, bucket: int, *, batch: str = "", token: Token | None = None) -> wire.Report:
        """This device's report of ``bucket``, signed for it; with ``token``: sealed under that
        token's nonce and carrying it (a token taken from another report, which does not name this one)."""
        vector = np.eye(BUCKETS, dtype=np.int64)[bucket]
        keys = AggregatorKeys(leader=LEADER.public_key(), helper=HELPER.public_key())
        sealed = report_seal(
            collection_key=key,
            batch_key=batch,
            vector=vector,
            keys=keys,
            shape=shape_of(key),
            nonce=None if token is None else token.nonce,
        )
        return self.sign(sealed) if token is None else report_sign(sealed, token)


def shape_of(key: str) -> ReportShape:
    """The Prio3 shape the collection's aggregators verify (a one-hot histogram where none exists)."""
    rules = CollectionRules.objects.filter(key=key).first()
    return rules_shape(rules) if rules else ReportShape("histogram", BUCKETS, 1)


def upload(body: bytes | wire.Report):
    data = wire.report_bytes(body) if isinstance(body, wire.Report) else body
    return APIClient().post("/api/device/reports/", data=data, content_type="application/json")


def verify(key: str) -> int:
    """Both aggregators' checks on every pending upload of the collection; how many were verified."""
    return reports_ingest(collection_key=key).verified


@pytest.fixture
def phones(db):
    fleet, enrolled = devices_enrol(fleet_name="phones", count=1000)
    return fleet, [Device.of(e) for e in enrolled[:8]]


@pytest.fixture
def phones_analysis(phones, analyst, officer):
    return analysis_approve(analysis=analysis_create(spec=copy.deepcopy(PHONES_SPEC), owner=analyst), officer=officer)


def start(api, recipe: dict) -> Round:
    created = api.post("/api/analyses/t.phones/recipes/", recipe, format="json")
    assert created.status_code == 201, created.json()
    started = api.post(f"/api/recipes/{created.json()['id']}/rounds/")
    assert started.status_code == 202, started.json()
    return Round.objects.get(pk=started.json()["id"])


@pytest.fixture
def central_round(api, phones_analysis) -> Round:
    return start(api, CENTRAL)


# ---------------------------------------------------------------- registering devices


def attestations_file(path, count: int) -> str:
    """What the attestation authority's attestation_sign writes: ``count`` devices' attestations."""
    path.write_text(json.dumps({"attestations": [attestation for _, attestation in attested(count)]}))
    return str(path)


def test_device_register_writes_credentials_that_sign_in(db, tmp_path, settings) -> None:
    settings.HELPER_URL = "https://helper.example"
    out = tmp_path / "creds.json"
    three = attestations_file(tmp_path / "three.json", 3)
    call_command("device_register", "--fleet", "watches", "--attestations", three, "--out", str(out))
    content = json.loads(out.read_text())
    assert content["fleet"] == "watches" and len(content["devices"]) == 3
    # Both aggregators' URLs: the SDK fetches the helper's key from the helper itself.
    assert content["helper"] == "https://helper.example"
    assert oct(out.stat().st_mode & 0o777) == "0o600"
    fleet = Fleet.objects.get(name="watches")
    assert (fleet.kind, fleet.size, fleet.shards.count()) == ("devices", 3, 0)
    # Each device's attestation, which it sends with its token requests.
    assert [d["attestation"] for d in content["devices"]] == json.loads((tmp_path / "three.json").read_text())[
        "attestations"
    ]
    # Only the hash is stored.
    first = content["devices"][0]
    assert first["secret"] not in DeviceCredential.objects.get(device_id=first["id"]).secret_hash
    assert Device(first["id"], first["secret"]).api.get("/api/device/tasks/").status_code == 200
    assert Device(first["id"], "wrong").api.get("/api/device/tasks/").status_code == 401
    other = tmp_path / "other.json"
    one = attestations_file(tmp_path / "one.json", 1)
    call_command(
        "device_register", "--fleet", "watches", "--attestations", one, "--out", str(other), "--helper", "http://h:1/"
    )
    assert json.loads(other.read_text())["helper"] == "http://h:1"


def test_device_register_names_the_relay_the_devices_upload_through(db, tmp_path, settings) -> None:
    settings.RELAY_URL = "https://relay.example/"
    one = attestations_file(tmp_path / "one.json", 3)
    call_command("device_register", "--fleet", "watches", "--attestations", one, "--out", str(tmp_path / "a.json"))
    assert json.loads((tmp_path / "a.json").read_text())["relay"] == "https://relay.example"
    two = attestations_file(tmp_path / "two.json", 1)
    call_command(
        "device_register", "--fleet", "watches", "--attestations", two, "--out", str(tmp_path / "b.json"), "--no-relay"
    )
    assert json.loads((tmp_path / "b.json").read_text())["relay"] is None  # the SDK says its uploads show its address
    settings.RELAY_URL = None  # RELAY_URL=none
    three = attestations_file(tmp_path / "three.json", 1)
    call_command("device_register", "--fleet", "watches", "--attestations", three, "--out", str(tmp_path / "c.json"))
    assert json.loads((tmp_path / "c.json").read_text())["relay"] is None


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--fleet", "small"], "simulated fleet"),
        (["--fleet", "watches", "--none"], "attestations: must be a list of 1"),
        (["--fleet", "watches", "--forged"], "not signed by the attestation authority"),
        (["--fleet", "watches", "--twice"], "the same device key twice"),
        (["--fleet", "bad name!"], "fleet"),
        (["--fleet", "watches", "--helper", "helper.example"], "helper"),
        (["--fleet", "watches", "--relay", "relay.example"], "relay: must be"),
    ],
)
def test_device_register_with_bad_input_exits_2_and_registers_nothing(fleet, tmp_path, arguments, message) -> None:
    attestations = [attestation for _, attestation in attested(3)]
    if "--none" in arguments:
        attestations = []
    if "--forged" in arguments:  # a key the leader made itself, not the authority's
        attestations[1] = attestation_sign(DeviceKey.generate().private, DeviceKey.generate().public).as_json()
    if "--twice" in arguments:
        attestations[2] = attestations[0]
    path = tmp_path / "attestations.json"
    path.write_text(json.dumps({"attestations": attestations}))
    arguments = [a for a in arguments if a not in ("--none", "--forged", "--twice")]
    with pytest.raises(CommandError, match=message) as error:
        call_command("device_register", *arguments, "--attestations", str(path), "--out", str(tmp_path / "creds.json"))
    assert error.value.returncode == 2
    assert not DeviceCredential.objects.exists() and not (tmp_path / "creds.json").exists()


def test_device_register_refuses_to_overwrite_a_credentials_file(db, tmp_path) -> None:
    out = tmp_path / "creds.json"
    out.write_text("{}")
    with pytest.raises(CommandError, match="already exists") as error:
        one = attestations_file(tmp_path / "one.json", 1)
        call_command("device_register", "--fleet", "watches", "--attestations", one, "--out", str(out))
    assert error.value.returncode == 2 and not Fleet.objects.filter(name="watches").exists()


# ---------------------------------------------------------------- tasks


def test_tasks_show_only_the_open_rounds_of_the_devices_fleet(api, analyst, officer, phones, central_round) -> None:
    _, (device, *_) = phones
    _, (tablet,) = devices_enrol(fleet_name="tablets", count=1)
    tablets_spec = {**copy.deepcopy(PHONES_SPEC), "identifier": "t.tablets", "fleet": "tablets"}
    analysis_approve(analysis=analysis_create(spec=tablets_spec, owner=analyst), officer=officer)

    answer = device.tasks()
    assert [t["task"]["task_key"] for t in answer["tasks"]] == [central_round.task_key]
    offered = answer["tasks"][0]
    assert offered["task"]["noise"] == "aggregator" and "seed" not in offered["task"]
    assert offered["policy"]["digest"] == central_round.recipe.analysis.snapshot.digest
    assert offered["policy"]["content"]["fleet"] == "phones"
    assert offered["report_length"] == BUCKETS
    assert base64.b64decode(answer["aggregators"]["leader"]) == LEADER.public_key()
    issuer = issuer_public_key(central_round.task_key)  # the collection's own key, the task commits to it
    assert int.from_bytes(base64.b64decode(offered["issuer"]["modulus"]), "big") == issuer.modulus
    assert offered["task"]["token_key"] == issuer.digest
    assert Device(tablet.device_id, tablet.secret).tasks()["tasks"] == []

    with_close(api, central_round)
    assert device.tasks()["tasks"] == []


def with_close(api, round_: Round, **body):
    response = api.post(f"/api/rounds/{round_.pk}/close/", body, format="json")
    assert response.status_code == 202, response.json()
    return response


# ---------------------------------------------------------------- tokens


def test_a_device_gets_one_token_per_collection(phones, central_round) -> None:
    _, (device, other, *_) = phones
    device.token(central_round.task_key)
    again = device.token_request(central_round.task_key, 12345)
    assert again.status_code == 409 and again.json()["code"] == "token_already_issued"
    other.token(central_round.task_key)  # another device has its own allowance


def test_a_device_asking_again_with_the_same_blinded_message_gets_the_same_signature(phones, central_round) -> None:
    """A device stopped after its request left but before it stored the answer asks again with the
    blinding it stored first (pfs_device.sdk.device): the issuer signs that same message again, and
    only that one, so the device still has one token."""
    _, (device, other, *_) = phones
    key = central_round.task_key
    digest = os.urandom(32)  # the report the token names: any one, here
    blinding = token_blind(
        collection_key=key, nonce=nonce_generate(), report_digest=digest, issuer=issuer_public_key(key)
    )
    first, again = (device.token_request(key, blinding.blinded) for _ in range(2))
    assert first.status_code == again.status_code == 201
    assert first.json()["blind_signature"] == again.json()["blind_signature"]
    signature = int.from_bytes(base64.b64decode(again.json()["blind_signature"]), "big")
    token = token_finalize(issuer=issuer_public_key(key), blinding=blinding, blind_sig=signature)
    assert verify_token(issuer_public_key(key), key, token, report_digest=digest)
    other_blinding = token_blind(
        collection_key=key, nonce=nonce_generate(), report_digest=digest, issuer=issuer_public_key(key)
    )
    refused = device.token_request(key, other_blinding.blinded)
    assert refused.status_code == 409 and refused.json()["code"] == "token_already_issued"
    # Another device's request with that same blinded message is its own, not a retry of this one's.
    assert other.token_request(key, blinding.blinded).status_code == 201
    assert IssuedToken.objects.filter(collection_key=key).count() == 2


def test_a_token_for_a_collection_the_fleet_does_not_have_is_refused(phones, central_round) -> None:
    _, (device, *_) = phones
    missing = device.token_request("t.phones/nowhere/round-9", 12345)
    assert missing.status_code == 404 and missing.json()["code"] == "unknown_collection"
    bad = device.api.post("/api/device/tokens/", {"collection_key": central_round.task_key, "blinded": "%%"}, "json")
    assert bad.status_code == 400 and "blinded" in bad.json()["fields"]


# ---------------------------------------------------------------- permissions


def test_a_device_credential_cannot_read_the_analyst_api(phones, central_round) -> None:
    _, (device, *_) = phones
    assert device.api.get("/api/analyses/").status_code == 401
    assert device.api.get(f"/api/rounds/{central_round.pk}/").status_code == 401
    assert device.api.post(f"/api/rounds/{central_round.pk}/close/").status_code == 401


def test_an_analyst_cannot_fetch_tasks_or_tokens(analyst, central_round) -> None:
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {AuthToken.objects.create(user=analyst).key}")
    assert api.get("/api/analyses/").status_code == 200  # the token works where it belongs
    assert api.get("/api/device/tasks/").status_code == 401
    token = api.post("/api/device/tokens/", {"collection_key": central_round.task_key, "blinded": "AQ=="}, "json")
    assert token.status_code == 401
    assert token.headers["WWW-Authenticate"].startswith("Device")


def test_another_analyst_cannot_close_the_round(other_analyst, central_round) -> None:
    charlie = APIClient()
    charlie.force_authenticate(other_analyst)
    assert charlie.post(f"/api/rounds/{central_round.pk}/close/").status_code == 404
    assert CollectionWindow.objects.get(task_key=central_round.task_key).closed_at is None


# ---------------------------------------------------------------- uploads


def test_an_upload_is_received_anonymously_then_verified_and_shows_in_progress(api, phones, central_round) -> None:
    _, (device, *_) = phones
    response = upload(device.report(central_round.task_key, 2))
    assert response.status_code == 202, response.json()
    assert response.json() == {"received": True}
    assert PendingReport.objects.count() == 1 and not LeaderShare.objects.exists()
    progress = api.get(f"/api/rounds/{central_round.pk}/").json()["progress"]
    # Reports received and not verified are not counted for the analyst (issue 29, requirement 4).
    assert "reports_pending" not in progress and progress["reports_accepted"] == 0
    assert verify(central_round.task_key) == 1
    assert LeaderShare.objects.count() == HelperShare.objects.count() == 1
    assert not PendingReport.objects.exists()
    progress = api.get(f"/api/rounds/{central_round.pk}/").json()["progress"]
    # One accepted report: its batch is below the minimum cohort of 3, so it is not counted yet.
    assert progress["reports_accepted"] == progress["devices_answered"] == 0
    assert progress["collection"]["open"] is True
    for device in phones[1][1:3]:
        assert upload(device.report(central_round.task_key, 2)).status_code == 202
    assert verify(central_round.task_key) == 2
    progress = api.get(f"/api/rounds/{central_round.pk}/").json()["progress"]
    assert progress["reports_accepted"] == progress["devices_answered"] == 3  # the batch reached 3


@pytest.mark.django_db(transaction=True)  # the fast path checks the connection as a request would
def test_the_wsgi_fast_path_stores_an_upload_without_django(phones, central_round) -> None:
    from pfs_web.wsgi import application

    _, (device, *_) = phones
    body = wire.report_bytes(device.report(central_round.task_key, 2))
    answered = {}

    def call(payload: bytes, length: int) -> dict:
        environ = {
            "REQUEST_METHOD": "POST",
            "PATH_INFO": "/api/device/reports/",
            "CONTENT_LENGTH": str(length),
            "REMOTE_ADDR": "192.0.2.7",
            "wsgi.input": io.BytesIO(payload),
        }
        chunks = application(environ, lambda status, headers: answered.update(status=status, headers=dict(headers)))
        return json.loads(b"".join(chunks))

    assert call(body, len(body)) == {"received": True}
    assert answered["status"] == "202 Accepted" and answered["headers"]["Content-Type"] == "application/json"
    assert bytes(PendingReport.objects.get().body) == body
    refused = call(b"", 1_048_577)  # refused on its declared length: the body is never read
    assert answered["status"] == "413 Request Entity Too Large" and refused["code"] == "payload_too_large"
    assert verify(central_round.task_key) == 1 and LeaderShare.objects.count() == 1


def test_a_replayed_report_is_counted_as_rejected_once_verified(phones, central_round) -> None:
    _, (device, *_) = phones
    key = central_round.task_key
    sealed = device.report(key, 1)
    # Two uploads of one report in one chunk: one is accepted, the other counted as a replay.
    assert upload(sealed).status_code == 202
    assert upload(sealed).status_code == 202
    assert verify(key) == 2
    assert rejections(key) == {"leader": {"token_reused": 1}}
    assert LeaderShare.objects.get().reports == 1
    # And in a later chunk, against the spent tokens.
    assert upload(sealed).status_code == 202
    assert verify(key) == 1
    assert rejections(key) == {"leader": {"token_reused": 2}}
    # Its token on another report names the first one only: invalid, whatever its spent record.
    assert upload(device.report(key, 3, token=sealed.token)).status_code == 202
    assert verify(key) == 1
    assert rejections(key) == {"leader": {"token_invalid": 1, "token_reused": 2}}
    assert LeaderShare.objects.count() == 1


def test_a_report_for_another_round_is_counted_as_rejected_once_verified(api, phones, central_round) -> None:
    _, (device, second, *_) = phones
    other = start(api, {**CENTRAL, "recipeIdentifier": "central-2"})
    # The token names the other round's collection: its signature does not verify for this one.
    token = device.token(other.task_key)
    moved = device.report(central_round.task_key, 1, token=token)
    assert upload(moved).status_code == 202
    # Shares sealed for the other round do not open in this one, even with a good token for them.
    sealed_elsewhere = second.report(other.task_key, 1)
    relabelled = second.sign(
        wire.Report(
            central_round.task_key,
            "",
            sealed_elsewhere.token,
            sealed_elsewhere.leader,
            sealed_elsewhere.helper,
            sealed_elsewhere.public,
        )
    )
    assert upload(relabelled).status_code == 202
    assert rejections(central_round.task_key) == {}  # nothing is decided before verification
    assert verify(central_round.task_key) == 2
    assert rejections(central_round.task_key) == {"leader": {"share_unopened": 1, "token_invalid": 1}}
    assert not LeaderShare.objects.exists() and not PendingReport.objects.exists()


def test_a_malformed_share_is_counted_as_rejected_once_verified(phones, central_round) -> None:
    _, (device, other, *_) = phones
    key = central_round.task_key
    good = device.report(key, 0)
    aad = hpke.share_aad(key, batch_key="", token_digest=good.token.digest, public_share=good.public)
    short = hpke.seal(HELPER.public_key(), b"\x00" * 63, hpke.share_info("helper"), aad=aad)  # a helper's is 64 bytes
    # The device's own malformed report, which the issuer signs as it signs any blinded message.
    malformed = other.sign(wire.Report(key, "", good.token, good.leader, wire.SealedShare(*short), good.public))
    assert upload(malformed).status_code == 202
    verify(key)
    assert rejections(key) == {"helper": {"share_malformed": 1}}
    assert upload(good).status_code == 202
    verify(key)
    assert LeaderShare.objects.get().reports == 1  # the token was not spent by the rejection


def test_garbage_base64_and_bad_json_get_field_messages(phones, central_round) -> None:
    _, (device, other, *_) = phones
    key = central_round.task_key
    body = wire.report_json(device.report(key, 0))
    body["leader"]["ct"] = "not base64!"
    del body["helper"]["enc"]
    response = upload(json.dumps(body).encode())
    assert response.status_code == 400
    assert set(response.json()["fields"]) == {"leader.ct", "helper.enc"}
    assert rejections(key) == {"leader": {"report_malformed": 1}}
    assert not PendingReport.objects.exists()  # refused before it is stored
    not_json = upload(b"{nope")
    assert not_json.status_code == 400 and not_json.json()["fields"] == {"non_field_errors": ["The body is not JSON."]}
    # A body naming no collection that exists is refused without creating counters.
    assert upload(json.dumps({**body, "collection": "made-up"}).encode()).status_code == 400
    assert rejections("made-up") == {}
    unknown = upload(replace(other.report(key, 0), collection_key="gone"))
    assert unknown.status_code == 400 and unknown.json()["code"] == "unknown_collection"
    assert rejections("gone") == {} and not PendingReport.objects.exists()


# What a hurried client or an attacker sends as base64: each is refused, as the standard library's
# decoder refuses it, though the server decodes with pybase64 (pfs_device.wire); excess padding too.
NOT_BASE64 = [
    "QUJD\nRA==",
    " QUJDRA==",
    "QUJD RA==",
    "QUJDRA",
    "QUJDRA=",
    "QU-_RA==",
    "QUJDRA==QUJD",
    "QUJDRA====",
    "QUJDRÄ==",
]


@pytest.mark.parametrize("ct", NOT_BASE64)
def test_a_share_that_is_not_strict_base64_is_refused_and_nothing_is_stored(phones, central_round, ct) -> None:
    _, (device, *_) = phones
    key = central_round.task_key
    body = wire.report_json(device.report(key, 0))
    body["leader"]["ct"] = ct
    response = upload(json.dumps(body).encode())
    assert response.status_code == 400
    assert response.json()["fields"] == {"leader.ct": ["Not valid base64."]}
    assert rejections(key) == {"leader": {"report_malformed": 1}}
    assert not PendingReport.objects.exists()


def test_a_v3_upload_is_refused_with_its_reason_and_nothing_is_stored(phones, central_round) -> None:
    # A device on an SDK from before wire format v4: its token would sign the collection, not its report.
    _, (device, *_) = phones
    key = central_round.task_key
    sealed = device.report(key, 3)
    response = upload(replace(sealed, version=3))
    assert response.status_code == 400 and response.json()["fields"] == {
        "v": [f"Must be {wire.VERSION}: version 3 is no longer accepted (update the device SDK)."]
    }
    assert not PendingReport.objects.exists() and rejections(key) == {"leader": {"report_malformed": 1}}
    assert upload(sealed).status_code == 202 and verify(key) == 1


def test_a_v2_upload_is_refused_with_its_reason_and_nothing_is_stored(phones, central_round) -> None:
    # A device on an SDK from before wire format v3: its shares carry their context in the HPKE info.
    _, (device, *_) = phones
    key = central_round.task_key
    sealed = device.report(key, 3)
    token = sealed.token
    vector = np.eye(BUCKETS, dtype=np.int64)[3]
    public, leader, helper = report_shard(collection_key=key, vector=vector, shape=shape_of(key), nonce=token.nonce)
    keys = AggregatorKeys(leader=LEADER.public_key(), helper=HELPER.public_key())
    old = shares_seal_v2(
        collection_key=key, batch_key="", token=token, keys=keys, public=public, leader=leader, helper=helper
    )
    response = upload(old)
    assert response.status_code == 400
    assert response.json()["code"] == "invalid"
    assert response.json()["fields"] == {
        "v": [f"Must be {wire.VERSION}: version 2 is no longer accepted (update the device SDK)."]
    }
    assert not PendingReport.objects.exists() and rejections(key) == {"leader": {"report_malformed": 1}}
    # The same device's current report, with the same token, is taken: the refusal spent nothing.
    assert upload(sealed).status_code == 202
    assert verify(key) == 1 and LeaderShare.objects.get().reports == 1


def test_an_oversize_body_is_refused_with_413_and_counted(phones, central_round) -> None:
    _, (device, *_) = phones
    key = central_round.task_key
    body = wire.report_json(device.report(key, 0))
    limit = upload_body_limit(CollectionRules.objects.get(key=key))
    body["leader"]["ct"] = base64.b64encode(b"\x00" * limit).decode()
    response = upload(json.dumps(body).encode())
    assert response.status_code == 413 and response.json()["code"] == "payload_too_large"
    assert rejections(key) == {"leader": {"report_too_large": 1}}
    assert not LeaderShare.objects.exists()


def test_an_upload_after_close_is_rejected_as_closed(api, phones, central_round) -> None:
    _, (device, *_) = phones
    sealed = device.report(central_round.task_key, 0)
    with_close(api, central_round)
    response = upload(sealed)
    assert response.status_code == 409 and response.json()["code"] == "collection_closed"
    assert not PendingReport.objects.exists()


# ---------------------------------------------------------------- closing and releasing


def test_closing_the_round_aggregates_and_releases_the_uploads(
    api, phones, central_round, django_capture_on_commit_callbacks
) -> None:
    _, devices = phones
    key = central_round.task_key
    buckets = [1, 1, 2, 2, 2, 5]
    sealed = [device.report(key, bucket, batch="") for device, bucket in zip(devices, buckets, strict=False)]
    for report in sealed:
        assert upload(report).status_code == 202
    assert upload(sealed[0]).status_code == 202  # a replay: rejected
    assert upload(b"[]").status_code == 400  # not counted: it names no collection
    verify(key)  # these verified while the collection is open, as the worker's task does
    for device, bucket in zip(devices[len(buckets) :], (3, 3), strict=True):
        assert upload(device.report(key, bucket, batch="")).status_code == 202
    buckets += [3, 3]
    assert PendingReport.objects.count() == 2
    with django_capture_on_commit_callbacks(execute=True):
        response = with_close(api, central_round)
    assert response.json()["status"] == "running"  # answered before the aggregation ran
    round_ = Round.objects.get(pk=central_round.pk)
    assert round_.status == Round.Status.RELEASED, round_.error
    release = api.get(f"/api/rounds/{round_.pk}/release/").json()
    # Every upload received before the close was verified (the last two at the close); the
    # replay is not among the reports.
    assert release["reports"] == 8 and release["epsilon_spent"] == 1.0
    assert release["refusals"] == {}
    assert rejections(key) == {"leader": {"token_reused": 1}}
    assert not PendingReport.objects.exists()
    truth = np.bincount(buckets, minlength=BUCKETS)
    estimates = np.array([b["estimate"] for b in release["buckets"]])
    errors = np.array([b["standard_error"] for b in release["buckets"]])
    assert np.all(np.abs(estimates - truth) < 4 * errors)
    progress = api.get(f"/api/rounds/{round_.pk}/").json()["progress"]
    assert progress["reports_accepted"] == 8 and progress["collection"]["open"] is False
    assert not LeaderShare.objects.exists()  # deleted once aggregated


def test_a_batch_below_the_minimum_cohort_is_suppressed(
    api, phones, phones_analysis, django_capture_on_commit_callbacks
):
    _, devices = phones
    round_ = start(api, {**CENTRAL, "cohorts": ["locale"]})
    for device in devices[:4]:
        assert upload(device.report(round_.task_key, 3, batch="locale=en_US")).status_code == 202
    assert upload(devices[4].report(round_.task_key, 3, batch="locale=fr_FR")).status_code == 202
    with django_capture_on_commit_callbacks(execute=True):
        with_close(api, round_)
    release = api.get(f"/api/rounds/{round_.pk}/release/").json()
    by_cohort = {b["cohort"]: b for b in release["batches"]}
    assert by_cohort["locale=en_US"]["reports"] == 4 and not by_cohort["locale=en_US"]["suppressed"]
    assert by_cohort["locale=fr_FR"]["suppressed"] and "minimum cohort" in by_cohort["locale=fr_FR"]["reason"]
    assert release["reports"] == 4


def test_a_client_noise_round_with_too_few_reports_releases_nothing(
    api, phones, phones_analysis, django_capture_on_commit_callbacks
) -> None:
    _, (device, *_) = phones
    round_ = start(api, CLIENT)
    assert round_.recipe.privacy.min_cohort == 206
    offered = device.tasks()["tasks"][0]
    assert offered["task"]["mechanism"] == "asymmetric_ohe" and offered["report_length"] == BUCKETS
    assert upload(device.report(round_.task_key, 0)).status_code == 202
    with django_capture_on_commit_callbacks(execute=True):
        with_close(api, round_)
    release = Round.objects.get(pk=round_.pk).release.content
    assert release["reports"] == 0 and release["batches"][0]["suppressed"]
    assert release["batches"][0]["reports"] is None  # a suppressed batch says "fewer than m", never its size
    assert "fewer than 206 reports" in release["batches"][0]["reason"]


def test_a_deadline_closes_the_round_through_the_reaper(api, phones, central_round, django_capture_on_commit_callbacks):
    _, (device, *_) = phones
    deadline = timezone.now() + timedelta(hours=1)
    with_close(api, central_round, at=deadline.isoformat())
    window = CollectionWindow.objects.get(task_key=central_round.task_key)
    assert window.closes_at == deadline and window.closed_at is None
    assert device.tasks()["tasks"][0]["closes_at"] is not None
    # Long past the stuck and fail limits, but before the deadline: waiting for reports, not stuck.
    later = timezone.now() + timedelta(minutes=59)
    reaped = rounds_reap(stuck_after=timedelta(seconds=1), fail_after=timedelta(seconds=2), now=later)
    assert reaped.failed == [] and reaped.closed == []
    with django_capture_on_commit_callbacks(execute=True):
        reaped = rounds_reap(stuck_after=timedelta(seconds=1), fail_after=timedelta(seconds=2), now=deadline)
    assert reaped.closed == [central_round.pk]
    assert Round.objects.get(pk=central_round.pk).status == Round.Status.WITHHELD  # no report came: nothing to release
    assert CollectionRules.objects.get(key=central_round.task_key).closed


def test_a_simulated_round_cannot_be_closed_by_hand(api, analysis, recipe) -> None:
    created = api.post("/api/analyses/test.ages/recipes/", recipe, format="json").json()
    started = api.post(f"/api/recipes/{created['id']}/rounds/").json()
    response = api.post(f"/api/rounds/{started['id']}/close/")
    assert response.status_code == 409 and "simulated" in response.json()["detail"]


def test_a_finished_round_cannot_be_closed_again(api, central_round, django_capture_on_commit_callbacks) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        with_close(api, central_round)
    response = api.post(f"/api/rounds/{central_round.pk}/close/")
    assert response.status_code == 409 and "released" in response.json()["detail"]


def test_a_lost_aggregation_is_sent_again_by_the_reaper(api, central_round, django_capture_on_commit_callbacks) -> None:
    with_close(api, central_round)  # its aggregation task is never run: lost
    assert Round.objects.get(pk=central_round.pk).status == Round.Status.RUNNING
    later = timezone.now() + timedelta(minutes=30)
    with django_capture_on_commit_callbacks(execute=True):
        reaped = rounds_reap(stuck_after=timedelta(minutes=15), fail_after=timedelta(days=1), now=later)
    assert reaped.closed == [central_round.pk]
    assert Round.objects.get(pk=central_round.pk).status == Round.Status.WITHHELD  # no report came: nothing to release


def test_a_round_on_a_simulated_fleet_opens_no_window(api, analysis, recipe) -> None:
    created = api.post("/api/analyses/test.ages/recipes/", recipe, format="json").json()
    assert api.post(f"/api/recipes/{created['id']}/rounds/").status_code == 202
    assert Round.objects.count() == 1 and not CollectionWindow.objects.exists()


def test_uploads_over_the_rate_of_an_address_get_429_with_retry_after(phones, central_round, settings) -> None:
    _, devices = phones
    settings.REST_FRAMEWORK = {
        **settings.REST_FRAMEWORK,
        "DEFAULT_THROTTLE_RATES": {**settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"], "uploads": "2/minute"},
    }
    reports = [device.report(central_round.task_key, 0) for device in devices[:3]]
    cache.clear()  # earlier tests' uploads in this minute count from the same address
    assert [upload(report).status_code for report in reports[:2]] == [202, 202]
    refused = upload(reports[2])
    assert refused.status_code == 429 and refused.json()["code"] == "throttled"
    assert int(refused.headers["Retry-After"]) >= 1
    assert PendingReport.objects.count() == 2  # the refused report was never read


def test_a_body_over_the_api_limit_is_refused_before_it_is_read(phones, central_round) -> None:
    response = upload(b" " * (1_048_576 + 1))
    assert response.status_code == 413 and response.json()["code"] == "payload_too_large"


def test_the_round_page_shows_the_collection_and_closes_it_in_one_click(
    client, analyst, other_analyst, phones, central_round, django_capture_on_commit_callbacks
) -> None:
    _, devices = phones
    key = central_round.task_key
    for device, bucket in zip(devices[:3], (1, 2, 2), strict=True):
        assert upload(device.report(key, bucket, batch="")).status_code == 202
    client.force_login(analyst)
    page = client.get(f"/rounds/{central_round.pk}/").content.decode()
    assert 'id="collection"' in page and 'id="close-form"' in page and "shards" not in page
    assert 'id="reports-pending"' not in page and 'id="reports-accepted">0<' in page  # received, not counted

    client.force_login(other_analyst)
    assert client.post(f"/rounds/{central_round.pk}/close/").status_code == 404
    client.force_login(analyst)
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(f"/rounds/{central_round.pk}/close/")
    assert response.status_code == 302
    round_ = Round.objects.get(pk=central_round.pk)
    assert round_.status == Round.Status.RELEASED, round_.error
    assert round_.release.content["reports"] == 3 and not PendingReport.objects.exists()
    page = client.get(f"/rounds/{central_round.pk}/").content.decode()
    assert 'id="close-form"' not in page and 'id="reports-accepted">3<' in page


def test_a_simulated_round_has_no_close_button_and_cannot_be_closed_from_the_page(
    client, analyst, api, analysis, recipe
) -> None:
    created = api.post("/api/analyses/test.ages/recipes/", recipe, format="json").json()
    round_id = api.post(f"/api/recipes/{created['id']}/rounds/").json()["id"]  # not committed: stays queued
    client.force_login(analyst)
    assert 'id="close-form"' not in client.get(f"/rounds/{round_id}/").content.decode()
    page = client.post(f"/rounds/{round_id}/close/", follow=True).content.decode()
    assert "closed by hand" in page and Round.objects.get(pk=round_id).status == Round.Status.QUEUED


def test_a_round_on_a_real_device_fleet_starts_with_an_idempotency_key_and_replays_alike(api, phones_analysis) -> None:
    # Issue 31, item 13: the start's answer holds the collection window's times; storing it for
    # replay raised "Object of type datetime is not JSON serializable" (HTTP 500 on every such start).
    created = api.post("/api/analyses/t.phones/recipes/", CENTRAL, format="json")
    assert created.status_code == 201, created.json()
    url = f"/api/recipes/{created.json()['id']}/rounds/"
    first = api.post(url, {}, format="json", HTTP_IDEMPOTENCY_KEY="start-phones-1")
    assert first.status_code == 202, first.content
    again = api.post(url, {}, format="json", HTTP_IDEMPOTENCY_KEY="start-phones-1")
    assert again.status_code == 202 and again["Idempotent-Replayed"] == "true"
    assert again.json() == first.json() and Round.objects.count() == 1
    assert first.json()["progress"]["collection"]["open"] is True  # the window's times, as JSON
