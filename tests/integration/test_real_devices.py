"""Real devices end to end: device processes speaking HTTP to a live server, a real worker and Redis.

1,800 devices in 6 processes (`python -m pfs_device.sdk`, which imports no Django) fetch the round
an analyst started over the API, take the leader's HPKE key from the leader and the helper's from
the helper's own service (a gunicorn process), decide, charge their own ledgers, privatize with their own OS
randomness, obtain blind-signed tokens and upload sealed shares anonymously. The analyst closes
the round; the worker releases it. The same data, imported as a simulated fleet, runs the same
recipe through the simulated path. Both estimate the same histogram of the same devices, each
with its own noise, so every bucket must agree within 4 standard errors of the difference,
4 sqrt(se_a^2 + se_b^2). (The devices' coins come from the OS by design, so this test is not
seeded: with 8 buckets it fails by chance about once in 2,000 runs.)
"""

from __future__ import annotations

import copy
import json
import math
import os
import subprocess
import sys
import time
import urllib.request

import numpy as np
import pytest

from analyses.models import Round
from analyses.services.policy import analysis_approve, analysis_create
from devices.fleet_io import fleet_import
from devices.synthetic import LOCALES, generate_shard
from tests import services
from tests.attest import devices_enrol, keys_store
from tests.conftest import RECIPE
from tests.integration.test_helper_service import start_helper
from tests.services import ROOT

pytestmark = pytest.mark.integration

PROCESSES, PER_PROCESS = 6, 300
DEVICES = PROCESSES * PER_PROCESS
POLICY = {
    "queryClass": {"stream": "KeyboardNGrams", "fields": ["age"], "cohortFields": ["locale"]},
    "budget": {"epsilon": 2.0, "reports": 2, "delta": 1e-6},
    "fields": {"age": {"localEpsilon": 4.0, "epsilon": 2.0, "reports": 2}},
}
# epsilon0 = 2, epsilon = 1, delta = 1e-6 need a minimum cohort of 206 (FMT 2022, what devices enforce): one batch of 1,800.
PRIVACY = {"mechanism": "asymmetric_ohe", "epsilon0": 2.0, "epsilon": 1.0, "delta": 1e-6, "samplingRate": 1.0}


def device_records(size: int, seed: int) -> list[dict]:
    """Synthetic devices in the fleet JSONL format: an age (4% have none) and a locale."""
    columns = generate_shard(size, np.random.default_rng(seed))
    records = []
    for device_id, age, locale in zip(columns["device_id"], columns["age"], columns["locale"], strict=True):
        profile = {"locale": LOCALES[locale]}
        if not math.isnan(age):
            profile["age"] = float(age)
        records.append({"id": str(device_id), "profile": profile})
    return records


class Analyst:
    """The analyst's HTTP client: a DRF token, JSON in and out."""

    def __init__(self, server: str, username: str, password: str) -> None:
        self.server = server
        self.token = self.call("POST", "/api/token/", {"username": username, "password": password})["token"]

    def call(self, method: str, path: str, body: dict | None = None) -> dict:
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": "application/json"}
        if getattr(self, "token", None):
            headers["Authorization"] = f"Token {self.token}"
        request = urllib.request.Request(self.server + path, data=data, method=method, headers=headers)
        with urllib.request.urlopen(request, timeout=60) as response:
            return json.loads(response.read())

    def run(self, analysis: str) -> int:
        recipe = {**copy.deepcopy(RECIPE), "AnalysisIdentifier": analysis, "privacy": PRIVACY}
        created = self.call("POST", f"/api/analyses/{analysis}/recipes/", recipe)
        return self.call("POST", f"/api/recipes/{created['id']}/rounds/")["id"]

    def wait_released(self, round_id: int, timeout: float = 60.0) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            polled = self.call("GET", f"/api/rounds/{round_id}/")
            if polled["status"] in ("released", "failed", "cancelled"):
                assert polled["status"] == "released", polled["error"]
                return self.call("GET", f"/api/rounds/{round_id}/release/")
            time.sleep(0.3)
        raise AssertionError(f"round {round_id} not released after {timeout} s")


def test_real_device_processes_release_what_the_simulated_path_gives(
    paced_worker, live_server, analyst, officer, tmp_path, settings
) -> None:
    # The device processes answer within seconds: the collection expects its uploads over 10 s
    # (rate validation is on; at the default hour, 1,800 uploads in seconds would be a flood), and
    # the devices are run with --min-spread 10 (their own floor, 600 s by default).
    settings.PFS_REPORT_SPREAD_SECONDS = 10
    # And each aggregator trusts devices to pace over no less (rate validation's bound,
    # aggregation.batch_rules): the worker's operator (paced_worker), the helper's (below).
    records = device_records(DEVICES, seed=2024)
    data = tmp_path / "devices.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in records))
    fleet_import(name="twin", path=data, shard_size=1000)  # the same devices, simulated
    # Each device's key pair in its state folder, its public key attested by the test authority.
    _, credentials = devices_enrol(fleet_name="phones", count=DEVICES)
    keys_store(tmp_path / "ledgers", credentials)
    for identifier, fleet in (("t.real", "phones"), ("t.sim", "twin")):
        spec = {"identifier": identifier, "fleet": fleet, **copy.deepcopy(POLICY)}
        analysis_approve(analysis=analysis_create(spec=spec, owner=analyst), officer=officer)

    api = Analyst(live_server.url, "alice", "alice-password")
    started = time.monotonic()
    real_round = api.run("t.real")

    # The helper's own service, serving its key from the helper's store the test's leader and worker
    # use: each device takes the helper's key from it, the leader's from the leader (pfs_device.sdk.keys).
    (tmp_path / "helper").mkdir()
    helper, helper_url = start_helper(
        tmp_path / "helper", HELPER_DATABASE_URL=services.test_database_url("helper"), PFS_DEVICE_MIN_SPREAD="10"
    )
    processes = []
    for index in range(PROCESSES):
        part = slice(index * PER_PROCESS, (index + 1) * PER_PROCESS)
        creds = tmp_path / f"creds-{index}.json"
        creds.write_text(json.dumps({"fleet": "phones", "devices": [c.as_json() for c in credentials[part]]}))
        lines = tmp_path / f"data-{index}.jsonl"
        lines.write_text("".join(json.dumps(r) + "\n" for r in records[part]))
        command = [sys.executable, "-m", "pfs_device.sdk", "--server", live_server.url, "--helper", helper_url]
        command += ["--credential", str(creds)]
        command += ["--data", str(lines), "--state", str(tmp_path / "ledgers"), "--once"]
        # The devices' own floor on the spread, lowered by their owner (the test) to the 10 s served:
        # the default, 600 s (pfs_device.sdk.pacing.MIN_SPREAD), would make the pass last 10 minutes.
        command += ["--min-spread", "10"]
        # The SDK needs no Django settings: leave none for it to find.
        env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
        processes.append(subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    summaries = []
    try:
        for process in processes:
            # Each device shards a Prio3 report (~16 ms of CPU) and makes three requests: 1,800 devices
            # on a 2-core machine take about a minute quiet, two under load.
            out, err = process.communicate(timeout=300)
            assert process.returncode == 0, err.decode()[-3000:]
            summaries.append(json.loads(out.decode().strip().splitlines()[-1]))
    finally:
        for process in processes:  # none may go on calling the live server after the test
            if process.poll() is None:
                process.kill()
                process.wait()
        helper.stop()
    uploaded = time.monotonic() - started
    assert sum(s["decisions"].get("answered", 0) for s in summaries) == DEVICES
    assert sum(s["uploads"].get("accepted", 0) for s in summaries) == DEVICES

    # Uploads are received at once and verified in bulk by the worker about a second later.
    deadline = time.monotonic() + 60
    progress = api.call("GET", f"/api/rounds/{real_round}/")["progress"]
    while progress["reports_accepted"] < DEVICES and time.monotonic() < deadline:
        time.sleep(0.3)
        progress = api.call("GET", f"/api/rounds/{real_round}/")["progress"]
    assert progress["reports_accepted"] == DEVICES and progress["reports_rejected"] == {}
    assert "reports_pending" not in progress  # not shown: a count of every batch (issue 29, requirement 4)
    # Each device charged its own ledger: epsilon 1 and one report, on disk before it uploaded.
    ledger = json.loads((tmp_path / "ledgers" / f"{credentials[0].device_id}.json").read_text())
    assert ledger["analyses"]["t.real"]["epsilon_used"] == 1_000_000_000
    assert ledger["analyses"]["t.real"]["reports_used"] == 1
    # And pinned the key each aggregator served itself.
    pins = json.loads((tmp_path / "ledgers" / "aggregator-keys.json").read_text())["aggregators"]
    assert set(pins) == {"leader", "helper"} and all(len(keys) == 1 for keys in pins.values())

    api.call("POST", f"/api/rounds/{real_round}/close/")
    real = api.wait_released(real_round)
    simulated = api.wait_released(api.run("t.sim"))
    print(
        f"devices uploaded in {uploaded:.1f} s; both rounds released {time.monotonic() - started:.1f} s after the start"
    )

    assert real["reports"] == simulated["reports"] == DEVICES
    assert real["epsilon_spent"] == simulated["epsilon_spent"] == 1.0
    assert real["rejected_reports"] == {} and real["refusals"] == {}
    assert Round.objects.get(pk=real_round).release.content["min_cohort"] == 206
    for a, b in zip(real["buckets"], simulated["buckets"], strict=True):
        assert a["label"] == b["label"]
        tolerance = 4 * math.hypot(a["standard_error"], b["standard_error"])
        assert abs(a["estimate"] - b["estimate"]) <= tolerance, (a, b)
    # And both are near the truth the test knows (the device data).
    ages = [r["profile"].get("age", math.nan) for r in records]
    truth = np.bincount(
        np.searchsorted([20, 30, 40, 50, 60, 70, 80], np.nan_to_num(ages, nan=-1), side="right"), minlength=8
    )
    for bucket, count in zip(real["buckets"], truth, strict=True):
        assert abs(bucket["estimate"] - count) <= 4 * bucket["standard_error"]
