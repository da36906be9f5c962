"""A simulated fleet that opts into per-device Prio3 reports (Fleet.prio3_reports, `fleet create --prio3-reports`).

Each simulated device shards its own report with its validity proof, and both aggregators verify
every report before it counts, as for a real device (aggregation.upload.verified_reports_upload).
A round on such a fleet releases exactly what the same fleet releases through the pre-summed path
when the reports are the same (aggregator noise: the one-hot values, the noise from one seed), and
an invalid report handed over by a simulated device is rejected and counted, never summed.
"""

from __future__ import annotations

import copy
import io
import os

import numpy as np
import pytest
from django.core.management import call_command
from django.test import override_settings

from aggregation import aggregators
from aggregation.models import HelperShare, LeaderShare
from aggregation.reports import rejections
from aggregation.services import collection_rules_open
from aggregation.upload import verified_reports_upload
from analyses.models import Round
from analyses.services.policy import analysis_approve, analysis_create
from analyses.services.rounds import round_create_and_start
from devices import services
from devices.fleet_io import PRIO3_SHARD_SIZE, fleet_create
from devices.models import Fleet
from privacy.report_vdaf import ReportShape, context
from privacy.vdaf.field import Field128
from tests.conftest import RECIPE, SPEC

pytestmark = pytest.mark.django_db

DEVICES = 300
CENTRAL = {
    **RECIPE,
    "privacy": {"noise": "aggregator", "epsilon": 1.0, "delta": 1e-6, "minCohort": 3},
}
LAPLACE = {"noise": "aggregator", "noiseDistribution": "laplace", "epsilon": 1.0, "minCohort": 3}


def _analysis(fleet: str, analyst, officer):
    spec = copy.deepcopy(SPEC)
    spec.update(identifier=f"t.{fleet}", fleet=fleet)
    spec["budget"]["minCohort"] = 3
    spec["fields"]["age"]["aggregatorNoise"] = True
    return analysis_approve(analysis=analysis_create(spec=spec, owner=analyst), officer=officer)


def _release(fleet: str, analyst, officer, capture, *, prio3: bool, privacy: dict) -> Round:
    fleet_create(name=fleet, size=DEVICES, seed=11, shard_size=100, prio3_reports=prio3)
    analysis = _analysis(fleet, analyst, officer)
    with capture(execute=True):
        round_ = round_create_and_start(
            analysis=analysis,
            content={**CENTRAL, "AnalysisIdentifier": analysis.identifier, "privacy": privacy},
            user=analyst,
        )
    round_.refresh_from_db()
    assert round_.status == Round.Status.RELEASED, round_.error
    return round_


@pytest.mark.parametrize("privacy", [CENTRAL["privacy"], LAPLACE], ids=["discrete Gaussian", "discrete Laplace"])
def test_per_device_prio3_reports_release_what_the_pre_summed_shares_release(
    analyst, officer, monkeypatch, django_capture_on_commit_callbacks, privacy
) -> None:
    monkeypatch.setattr(aggregators, "noise_rng", lambda: np.random.default_rng(3))
    verified: list[int] = []
    real_upload = services.verified_reports_upload

    def counting(**kwargs):  # the verified path runs, once per shard
        verified.append(real_upload(**kwargs))
        return verified[-1]

    monkeypatch.setattr(services, "verified_reports_upload", counting)
    summed = _release("summed", analyst, officer, django_capture_on_commit_callbacks, prio3=False, privacy=privacy)
    assert verified == []
    proved = _release("proved", analyst, officer, django_capture_on_commit_callbacks, prio3=True, privacy=privacy)
    assert sum(verified) == DEVICES and len(verified) == 3
    assert rejections(proved.task_key) == {}
    assert proved.release.content["reports"] == summed.release.content["reports"] == DEVICES
    assert proved.release.content["batches"] == summed.release.content["batches"]
    # Each releases the noise the recipe chose: the discrete Laplace of scale 2 / epsilon, or the Gaussian.
    assert proved.release.content["aggregator_laplace_scale"] == (2.0 if privacy is LAPLACE else None)


def test_an_invalid_report_of_a_simulated_device_is_rejected_and_counted(analyst, officer) -> None:
    fleet_create(name="proved", size=10, seed=1, shard_size=10, prio3_reports=True)
    analysis = _analysis("proved", analyst, officer)
    key = "t.proved/direct/round-1"
    collection_rules_open(key=key, length=8, min_cohort=1, weight_bound=1, vdaf="histogram")
    vdaf = ReportShape("histogram", 8, 1).vdaf()
    reports = []
    for counts in ([0, 0, 1, 0, 0, 0, 0, 0], [0, 0, 2, 0, 0, 0, 0, Field128.MODULUS - 1]):
        nonce = os.urandom(16)
        public, (leader, helper) = vdaf.shard_encoded(context(key), counts, nonce, os.urandom(vdaf.RAND_SIZE))
        reports.append((nonce, vdaf.encode_public_share(public), *map(vdaf.encode_input_share, (leader, helper))))
    nonces, publics, leaders, helpers = map(list, zip(*reports, strict=True))
    accepted = verified_reports_upload(
        collection_key=key,
        batch_key="",
        source="shard:test",
        nonces=nonces,
        public_shares=publics,
        leader_shares=leaders,
        helper_shares=helpers,
        min_cohort=1,
    )
    assert accepted == 1 and analysis.fleet.prio3_reports
    assert rejections(key) == {"helper": {"proof_invalid": 1}}  # decided by the helper (DAP)
    leader_share, helper_share = LeaderShare.objects.get(), HelperShare.objects.get()
    total = [
        (a + b) % Field128.MODULUS for a, b in zip(leader_share.load_ints(), helper_share.load_ints(), strict=True)
    ]
    assert total == [0, 0, 1, 0, 0, 0, 0, 0] and leader_share.reports == 1 and leader_share.field == "field128"


def test_the_fleet_command_creates_a_fleet_with_per_device_reports() -> None:
    call_command("fleet", "create", "--name", "opted", "--size", "5", "--seed", "1", "--prio3-reports")
    call_command("fleet", "create", "--name", "plain", "--size", "5", "--seed", "1")
    assert Fleet.objects.get(name="opted").prio3_reports and not Fleet.objects.get(name="plain").prio3_reports


@pytest.mark.parametrize(
    ("flags", "shard_size"),
    [
        ((), 25_000),
        (("--prio3-reports",), PRIO3_SHARD_SIZE),  # each device proves its report under the shard's lock
        (("--prio3-reports", "--shard-size", "3000"), 3_000),  # asked for: taken as asked
    ],
)
@override_settings(PFS_SHARD_SIZE=25_000)
def test_a_fleet_of_per_device_reports_gets_small_shards_unless_asked(flags, shard_size) -> None:
    call_command("fleet", "create", "--name", "f", "--size", "60000", "--seed", "1", *flags, stdout=io.StringIO())
    sizes = list(Fleet.objects.get(name="f").shards.order_by("index").values_list("size", flat=True))
    assert sizes[0] == shard_size and sum(sizes) == 60_000
