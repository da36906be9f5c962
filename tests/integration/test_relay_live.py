"""Uploads through the Oblivious HTTP relay, live: the leader never learns a device's address (issue 33).

Five parties, each in its own process or thread: the devices (`python -m pfs_device.sdk`, one
process) behind their own network (a forward proxy that stamps X-Forwarded-For with the devices'
public address, as a carrier's NAT or the leader's nginx would record it); the relay
(`python -m pfs_relay`, as `make relay` runs it); a tap on the relay's way to the leader, which
records what the relay sends; the leader (this test's live server, trusting one proxy's
X-Forwarded-For as it does behind nginx); the helper's own service. The devices' credentials name
the relay, as `manage.py device_register` writes them under `make run`.

After a round through the relay: every upload reached the leader from the relay alone (its upload
rate counted the relay's address, never the devices'), the leader's logs and database hold the
devices' address nowhere, the relay passed on ciphertext and nothing of the devices' headers, and
the round released every report. The control: an upload sent directly through the same network is
counted under the devices' address, so the test would see it.
"""

from __future__ import annotations

import copy
import io
import json
import logging
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
from django.core.management import call_command

from aggregation import intake
from analyses.models import Round
from analyses.services.policy import analysis_approve, analysis_create
from pfs_base import api_limits
from tests import services
from tests.attest import devices_enrol, keys_store
from tests.integration.test_helper_service import start_helper
from tests.integration.test_real_devices import POLICY, Analyst, device_records
from tests.relays import Forwarder, start_relay
from tests.services import ROOT

pytestmark = pytest.mark.integration

DEVICES = 240  # above the minimum cohort of 206 (epsilon0 2, epsilon 1, delta 1e-6)
DEVICE_ADDRESS = "198.51.100.23"  # TEST-NET-2: the devices' public address, as their network stamps it
RELAY_HEADERS = {"host", "user-agent", "content-type", "content-length", "accept-encoding"}


@pytest.fixture
def addresses(monkeypatch) -> list[tuple[str, str]]:
    """Every (rate scope, client) the leader counted: where it records a client's address."""
    counted: list[tuple[str, str]] = []

    def recording(original):
        def window_wait(*, scope: str, who: str, rate):
            counted.append((scope, who))
            return original(scope=scope, who=who, rate=rate)

        return window_wait

    monkeypatch.setattr(intake, "window_wait", recording(intake.window_wait))
    monkeypatch.setattr(api_limits, "window_wait", recording(api_limits.window_wait))
    return counted


def test_a_round_through_the_relay_leaves_no_device_address_at_the_leader(
    paced_worker, live_server, analyst, officer, tmp_path, settings, addresses, caplog
) -> None:
    caplog.set_level(logging.DEBUG)
    settings.PFS_REPORT_SPREAD_SECONDS = 10
    # The leader behind one proxy, as in production (deploy/nginx): it takes the client's address
    # from the X-Forwarded-For that proxy appends.
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "NUM_PROXIES": 1}
    records = device_records(DEVICES, seed=33)
    _, credentials = devices_enrol(fleet_name="phones", count=DEVICES)
    keys_store(tmp_path / "ledgers", credentials)
    spec = {"identifier": "t.relayed", "fleet": "phones", **copy.deepcopy(POLICY)}
    analysis_approve(analysis=analysis_create(spec=spec, owner=analyst), officer=officer)
    api = Analyst(live_server.url, "alice", "alice-password")
    round_id = api.run("t.relayed")

    (tmp_path / "helper").mkdir()
    helper, helper_url = start_helper(
        tmp_path / "helper", HELPER_DATABASE_URL=services.test_database_url("helper"), PFS_DEVICE_MIN_SPREAD="10"
    )
    tap = Forwarder(target=live_server.url)
    relay, relay_url = start_relay(tap.url, tmp_path)
    network = Forwarder(add={"X-Forwarded-For": DEVICE_ADDRESS})
    try:
        creds = tmp_path / "creds.json"
        creds.write_text(
            json.dumps(
                {
                    "server": live_server.url,
                    "helper": helper_url,
                    "relay": relay_url,
                    "fleet": "phones",
                    "devices": [c.as_json() for c in credentials],
                }
            )
        )
        data = tmp_path / "data.jsonl"
        data.write_text("".join(json.dumps(r) + "\n" for r in records))
        command = [sys.executable, "-m", "pfs_device.sdk", "--credential", str(creds), "--data", str(data)]
        command += ["--state", str(tmp_path / "ledgers"), "--once", "--min-spread", "10"]
        env = {k: v for k, v in os.environ.items() if k not in ("DJANGO_SETTINGS_MODULE", "no_proxy", "NO_PROXY")}
        env["http_proxy"] = network.url  # every request of the devices leaves through their network
        sdk = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, timeout=300)
        assert sdk.returncode == 0, sdk.stderr.decode()[-3000:]
        summary = json.loads(sdk.stdout.decode().strip().splitlines()[-1])
        assert summary["uploads"] == {"accepted": DEVICES}, summary
        assert b"no relay" not in sdk.stderr
    finally:
        relay_log = relay.output()
        relay.stop()
        helper.stop()
        network.stop()
        tap.stop()

    # The devices' own requests went through their network: the direct ones to the leader, the
    # uploads to the relay. The relay passed each capsule on with nothing of theirs.
    relayed = [seen for seen in tap.seen if seen.method == "POST"]
    assert len(relayed) == DEVICES and all(seen.path == "/api/ohttp/" for seen in relayed)
    for seen in relayed:
        assert {name.lower() for name in seen.headers} <= RELAY_HEADERS, seen.headers
        assert seen.headers["User-Agent"] == "pfs-relay/1"
        assert seen.headers["Content-Type"] == "message/ohttp-req"
    # ... and saw no report: the collection key and the wire format's fields are in every upload's
    # JSON, in none of the capsules.
    task_key = Round.objects.get(pk=round_id).task_key
    for seen in relayed:
        assert task_key.encode() not in seen.body and b'"token"' not in seen.body and b'"shares"' not in seen.body
    assert DEVICE_ADDRESS not in relay_log and task_key not in relay_log  # nor logged a client

    # Every upload came from the relay's address, and the devices' is nowhere in the leader's logs or stores.
    uploads = [who for scope, who in addresses if scope == "uploads"]
    assert len(uploads) == DEVICES and all(DEVICE_ADDRESS not in who for who in uploads)
    assert DEVICE_ADDRESS not in caplog.text
    for database in ("default", "issuer"):
        dump = io.StringIO()
        call_command("dumpdata", database=database, stdout=dump)
        assert DEVICE_ADDRESS not in dump.getvalue()
    # The control: an upload sent directly through the devices' network is counted under their address.
    network = Forwarder(add={"X-Forwarded-For": DEVICE_ADDRESS})
    try:
        direct = urllib.request.build_opener(urllib.request.ProxyHandler({"http": network.url}))
        request = urllib.request.Request(
            f"{live_server.url}/api/device/reports/", data=b"{}", headers={"Content-Type": "application/json"}
        )
        with pytest.raises(urllib.error.HTTPError):  # not a report: 400, after its address was counted
            direct.open(request, timeout=30)
    finally:
        network.stop()
    assert addresses[-1] == ("uploads", f"addr-{DEVICE_ADDRESS}")

    # And the round is what a direct one would be: every report verified, then released.
    deadline = time.monotonic() + 60
    while api.call("GET", f"/api/rounds/{round_id}/")["progress"]["reports_accepted"] < DEVICES:
        assert time.monotonic() < deadline, "the relayed reports were not all verified"
        time.sleep(0.3)
    api.call("POST", f"/api/rounds/{round_id}/close/")
    release = api.wait_released(round_id)
    assert release["reports"] == DEVICES and release["rejected_reports"] == {}
