"""A leader that serves devices keys of its own choosing gets no report (issue 28, docs/threats.md).

The device SDK runs as a device runs it (``main([...])``, over HTTP) against two small HTTP servers
in threads: a leader (tasks, tokens, uploads and its own /hpke_config) and a helper (its own
/hpke_config only), backed by the fake aggregators of test_device_sdk, which hold the real private
keys and open what is uploaded. The attacker is the leader: it names in its tasks answer a helper
key whose private half it holds (one for everyone, or one per device), so that it could open both
shares of a report alone. The device takes each aggregator's key from that aggregator and refuses.
"""

from __future__ import annotations

import base64
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest

from pfs_device import hpke, wire
from pfs_device.decision import snapshot_digest
from pfs_device.hpke_config import MEDIA_TYPE, HpkeConfig, config_id_of, config_list_encode, config_of
from pfs_device.sdk.__main__ import main
from pfs_device.sdk.keys import KEY_CHANGED, KEY_MISMATCH, KEYS_UNAVAILABLE, PIN_FILE
from pfs_device.sdk.ledger import Ledger
from tests.unit.test_device_sdk import ISSUER, POLICY, TASK, Aggregators, device_line

CLOSED_PORT_URL = "http://127.0.0.1:9"  # discard: nothing listens there


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


class Leader:
    """The leader's HTTP endpoints, over the fake aggregators (which open uploads with the real keys).
    ``named_helper``: the helper key its tasks answer names, per device id (default: the real one)."""

    def __init__(self, server: Aggregators) -> None:
        self.server = server
        self.named_helper: dict[str, bytes] = {}
        self.task_keys = [TASK.task_key]
        self.task_requests: list[str] = []
        self.uploads = 0

    def tasks(self, device_id: str) -> dict:
        issuer = {"modulus": b64(ISSUER.public.modulus.to_bytes(ISSUER.public.size, "big")), "exponent": 65537}
        offers = [
            {
                "task": {**TASK.audit_json(), "task_key": key},
                "issuer": issuer,
                "policy": {"digest": snapshot_digest(POLICY), "content": POLICY},
                "report_length": 8,
                "closes_at": None,
                "spread_seconds": 0,
            }
            for key in self.task_keys
        ]
        helper = self.named_helper.get(device_id, self.server.helper[1])
        named = {"leader": b64(self.server.leader[1]), "helper": b64(helper)}
        return {"device": device_id, "fleet": "phones", "aggregators": named, "tasks": offers}


class Helper:
    """The helper's own /hpke_config: its real key, or what a test makes it serve."""

    def __init__(self, server: Aggregators) -> None:
        self.server = server
        self.body: bytes | None = None  # None: the list of its real key
        self.media_type = MEDIA_TYPE

    def config(self) -> bytes:
        return self.body if self.body is not None else config_list_encode([config_of(self.server.helper[1])])


def serve(handler: type[BaseHTTPRequestHandler]):
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    return httpd, f"http://127.0.0.1:{httpd.server_address[1]}"


@pytest.fixture
def setup():
    server = Aggregators()
    leader, helper = Leader(server), Helper(server)

    class LeaderHandler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

        def answer(self, status: int, body: bytes, media_type: str = "application/json") -> None:
            self.send_response(status)
            self.send_header("Content-Type", media_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            if self.path == "/hpke_config":
                return self.answer(200, config_list_encode([config_of(server.leader[1])]), MEDIA_TYPE)
            if self.path == "/api/device/tasks/":
                device_id = self.headers["Authorization"].split()[1].split(":")[0]
                leader.task_requests.append(device_id)
                return self.answer(200, json.dumps(leader.tasks(device_id)).encode())
            return self.answer(404, b"{}")

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if self.path == "/api/device/tokens/":
                blinded = int.from_bytes(base64.b64decode(body["blinded"]), "big")
                signature = server.token(body["collection_key"], blinded)
                return self.answer(
                    201, json.dumps({"blind_signature": b64(signature.to_bytes(ISSUER.public.size, "big"))}).encode()
                )
            if self.path == "/api/device/reports/":
                leader.uploads += 1
                server.upload(wire.report_parse(body))  # opens both shares with the real private keys
                return self.answer(202, b'{"received": true}')
            return self.answer(404, b"{}")

    class HelperHandler(LeaderHandler):
        def do_GET(self) -> None:
            if self.path == "/hpke_config":
                return self.answer(200, helper.config(), helper.media_type)
            return self.answer(404, b"{}")

    leader_httpd, leader_url = serve(LeaderHandler)
    helper_httpd, helper_url = serve(HelperHandler)
    try:
        yield server, leader, helper, leader_url, helper_url
    finally:
        for httpd in (leader_httpd, helper_httpd):
            httpd.shutdown()
            httpd.server_close()


def run(tmp_path: Path, leader_url: str, helper_url: str | None, devices: tuple[str, ...] = ("d0",), *extra: str):
    creds = tmp_path / "creds.json"
    content = {"server": leader_url, "fleet": "phones", "devices": [{"id": d, "secret": "s"} for d in devices]}
    if helper_url is not None:
        content["helper"] = helper_url
    creds.write_text(json.dumps(content))
    data = tmp_path / "data.jsonl"
    data.write_bytes(b"".join(device_line(device_id=d) + b"\n" for d in devices))
    state = tmp_path / "state"
    # The device sends at once: its floor lowered for the test (pfs_device.sdk.pacing).
    argv = ["--credential", str(creds), "--data", str(data), "--state", str(state), "--once"]
    argv += ["--min-spread", "0", "--spread", "0"]
    return main([*argv, *extra])


def refusal_of(err: str) -> dict:
    """The first refusal the SDK printed on stderr (after its warning about the lowered floor)."""
    return next(line for line in map(json.loads, err.strip().splitlines()) if "refused" in line)


def summary_of(out: str) -> dict:
    return json.loads(out.strip().splitlines()[-1])


def nothing_spent(tmp_path: Path, device: str = "d0") -> bool:
    path = tmp_path / "state" / f"{device}.json"
    return not path.exists() or Ledger(path).columns(TASK.analysis)["epsilon_used"][0] == 0


def test_an_honest_setup_uploads_and_the_report_opens_with_the_real_keys(setup, tmp_path, capsys) -> None:
    server, leader, _, leader_url, helper_url = setup
    assert run(tmp_path, leader_url, helper_url) == 0
    summary = summary_of(capsys.readouterr().out)
    assert summary["decisions"] == {"answered": 1} and summary["uploads"] == {"accepted": 1}
    # The aggregators opened both shares with their own private keys and verified the Prio3 proof.
    assert server.reports[0].tolist() == np.eye(8, dtype=int)[2].tolist()
    pins = json.loads((tmp_path / "state" / PIN_FILE).read_text())["aggregators"]
    assert pins["helper"] == {str(config_id_of(server.helper[1])): b64(server.helper[1])}
    assert pins["leader"] == {str(config_id_of(server.leader[1])): b64(server.leader[1])}


def test_a_leader_naming_a_helper_key_of_its_own_gets_no_report(setup, tmp_path, capsys) -> None:
    server, leader, _, leader_url, helper_url = setup
    _, forged = hpke.key_pair_generate()  # the leader holds its private half: it would open both shares
    leader.named_helper["d0"] = forged
    assert run(tmp_path, leader_url, helper_url) == 0
    out, err = capsys.readouterr()
    assert summary_of(out)["decisions"] == {KEY_MISMATCH: 1} and summary_of(out)["uploads"] == {}
    # Refused before anything: no budget spent, no token asked for, nothing uploaded.
    assert server.tokens == [] and leader.uploads == 0 and nothing_spent(tmp_path)
    assert KEY_MISMATCH in err and "helper" in err


def test_a_per_device_helper_key_tags_no_one_every_device_refuses(setup, tmp_path, capsys) -> None:
    server, leader, _, leader_url, helper_url = setup
    for device in ("d0", "d1"):  # a key of each device's own: its report would name it
        leader.named_helper[device] = hpke.key_pair_generate()[1]
    assert run(tmp_path, leader_url, helper_url, ("d0", "d1")) == 0
    summary = summary_of(capsys.readouterr().out)
    assert summary["decisions"] == {KEY_MISMATCH: 2} and summary["uploads"] == {}
    assert server.tokens == [] and leader.uploads == 0
    assert nothing_spent(tmp_path, "d0") and nothing_spent(tmp_path, "d1")


@pytest.mark.parametrize(
    ("fault", "said"),
    [
        ("unreachable", "cannot reach"),
        ("malformed", "HpkeConfigList"),
        ("empty", "HpkeConfigList"),
        ("another suite", "no HpkeConfig of the suite"),
        ("media type", "not application/ppm-dap"),
    ],
)
def test_a_helper_whose_configuration_cannot_be_had_gets_nothing_uploaded(setup, tmp_path, capsys, fault, said) -> None:
    server, leader, helper, leader_url, helper_url = setup
    if fault == "unreachable":
        helper_url = CLOSED_PORT_URL
    elif fault == "malformed":
        helper.body = b"\x00\x05garbage"
    elif fault == "empty":
        helper.body = b"\x00\x00"
    elif fault == "another suite":  # DAP's example: P-256 with AES-128-GCM, which the device cannot seal with
        helper.body = config_list_encode([HpkeConfig(7, 0x0010, 0x0001, 0x0001, bytes(65))])
    else:
        helper.media_type = "application/octet-stream"
    assert run(tmp_path, leader_url, helper_url) == 1
    out, err = capsys.readouterr()
    summary = summary_of(out)
    assert summary["decisions"] == {KEYS_UNAVAILABLE: 1} and summary["keys"] == KEYS_UNAVAILABLE
    assert server.tokens == [] and leader.uploads == 0 and nothing_spent(tmp_path)
    refusal = refusal_of(err)
    assert refusal["refused"] == KEYS_UNAVAILABLE and said in refusal["detail"], refusal
    assert not (tmp_path / "state" / PIN_FILE).exists()  # nothing pinned from a failed fetch


def same_id_key(public: bytes) -> tuple[bytes, bytes]:
    """Another X25519 key pair whose DAP key id (the first byte of its public key's SHA-256) is
    ``public``'s: about 256 tries."""
    while True:
        pair = hpke.key_pair_generate()
        if config_id_of(pair[1]) == config_id_of(public) and pair[1] != public:
            return pair


def test_a_pinned_key_id_that_comes_with_another_key_is_refused_until_the_pin_file_is_deleted(
    setup, tmp_path, capsys
) -> None:
    server, leader, _, leader_url, helper_url = setup
    assert run(tmp_path, leader_url, helper_url) == 0  # pins the helper's key
    capsys.readouterr()
    # The helper's id now comes with another key (say the helper's host was taken over, and names
    # the new key everywhere, the leader's tasks answer too): the device refuses the next task.
    server.helper = same_id_key(server.helper[1])
    leader.task_keys = ["t.phones/central/round-2"]
    assert run(tmp_path, leader_url, helper_url) == 1
    out, err = capsys.readouterr()
    assert summary_of(out)["decisions"] == {KEY_CHANGED: 1} and summary_of(out)["uploads"] == {}
    refusal = refusal_of(err)
    assert refusal["refused"] == KEY_CHANGED and f"deleted {tmp_path / 'state' / PIN_FILE}" in refusal["detail"]
    assert len(server.tokens) == 1 and len(server.reports) == 1  # only the first task's
    # The operator checks, then deletes the pin file: the new key is pinned and the device answers.
    (tmp_path / "state" / PIN_FILE).unlink()
    assert run(tmp_path, leader_url, helper_url) == 0
    assert summary_of(capsys.readouterr().out)["uploads"] == {"accepted": 1}


def test_a_new_key_id_is_a_rotation_and_is_pinned_beside_the_old(setup, tmp_path, capsys) -> None:
    server, leader, _, leader_url, helper_url = setup
    old = server.helper[1]
    assert run(tmp_path, leader_url, helper_url) == 0
    server.helper = hpke.key_pair_generate()
    while config_id_of(server.helper[1]) == config_id_of(old):
        server.helper = hpke.key_pair_generate()
    leader.task_keys = ["t.phones/central/round-2"]
    assert run(tmp_path, leader_url, helper_url) == 0
    assert summary_of(capsys.readouterr().out)["uploads"] == {"accepted": 1}
    assert len(server.reports) == 2
    pins = json.loads((tmp_path / "state" / PIN_FILE).read_text())["aggregators"]["helper"]
    assert set(pins) == {str(config_id_of(old)), str(config_id_of(server.helper[1]))}


def test_a_credential_file_without_a_helper_is_refused_with_exit_2(setup, tmp_path, capsys) -> None:
    _, leader, _, leader_url, _ = setup
    assert run(tmp_path, leader_url, None) == 2
    assert "--helper: needed" in capsys.readouterr().err
    assert leader.task_requests == []  # nothing was asked of the leader
    # --helper names it when the file does not.
    assert run(tmp_path, leader_url, None, ("d0",), "--helper", "ftp://helper") == 2
    assert "--helper: must be an http:// or https:// URL" in capsys.readouterr().err


def test_a_pin_file_that_cannot_be_read_refuses_every_task(setup, tmp_path, capsys) -> None:
    server, leader, _, leader_url, helper_url = setup
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / PIN_FILE).write_text("{not json")
    assert run(tmp_path, leader_url, helper_url) == 1
    out, err = capsys.readouterr()
    assert summary_of(out)["decisions"] == {KEY_CHANGED: 1} and server.tokens == [] and leader.uploads == 0
    assert "until an operator deletes it" in err
