"""A token stolen in transit, put on other content (issue 29, requirement 2).

Whoever sees a device's upload on its way (anyone on the wire, or the leader's operator) takes its
token, builds a report of its own around it — its own Prio3 shares, sealed to both aggregators
under the stolen token's nonce, so that both shares open — and gets it in first. Before tokens
were bound to their report, the attacker's report was counted and the victim's refused as
token_reused. Now a token's signed message names its report (pfs_device.wire.report_digest: the
batch, the public share and both sealed shares), and each aggregator recomputes that digest from
what it holds: the attacker's report is refused as token_invalid, spends nothing, and the
victim's, arriving after it, is counted.

Through the public interfaces: the leader's upload endpoint (HTTP) and the ingestion job with the
helper (in process), and the helper's own job endpoint with the collection's bearer token for a
leader that splices.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from aggregation import dap
from aggregation.aggregators import LEADER, rules_shape
from aggregation.ingest import reports_ingest
from aggregation.models import HelperShare, LeaderShare, PendingReport, SpentToken
from aggregation.reports import rejections, verify_init_of
from aggregation.verification import AggregatorVerification, VerifyConfig
from analyses.services.collector import ClientNoiseEstimator, collection_release
from pfs_device import wire
from pfs_device.report_client import report_seal, report_sign
from privacy.report_vdaf import report_nonce
from privacy.vdaf.field import Field128
from tests.adversarial import test_helper_protocol
from tests.adversarial.test_helper_protocol import HELPER_STORE, send
from tests.unit.test_device_http import upload
from tests.unit.test_report_ingest import receive, stored_sums
from tests.unit.test_report_protocol import DOMAIN, KEY, keys, one_hot, report, rules_open, shape_for

pytestmark = pytest.mark.django_db
helper = test_helper_protocol.helper  # an HTTP client of the helper's service (its URLs, its views)
KARY = ClientNoiseEstimator(mechanism="asymmetric_ohe", epsilon0=3.0, domain_size=DOMAIN)


@pytest.fixture
def rules():
    return rules_open()


def spent(token_digest: str) -> list[str]:
    """The aggregators that recorded the token spent, each in its own store."""
    return [
        role
        for role, store in (("leader", "default"), ("helper", HELPER_STORE))
        if SpentToken.objects.using(store).filter(role=role, token_digest=token_digest).exists()
    ]


def counted() -> tuple[int, int]:
    """The reports in the leader's and the helper's stored shares."""
    return (
        sum(LeaderShare.objects.values_list("reports", flat=True)),
        sum(HelperShare.objects.using(HELPER_STORE).values_list("reports", flat=True)),
    )


def combined_sum() -> list[int]:
    """The leader's and the helper's stored shares added: the vector the release estimates from."""
    (leader, helper_sum, _), *others = stored_sums().values()
    assert not others  # one batch
    return [(a + b) % Field128.MODULUS for a, b in zip(leader, helper_sum, strict=True)]


def stolen(victim: wire.Report, **changes) -> wire.Report:
    """The attacker's own report (a vector of its choosing), sealed under the victim's token nonce so
    both its shares open, and carrying the victim's token."""
    forged = report("attacker", one_hot(7), tok=victim.token)
    return replace(forged, **changes)


# ------------------------------------------------------------------ (a) a stolen token with other content


@pytest.mark.parametrize("together", [False, True], ids=["in separate jobs", "in one job"])
def test_a_stolen_token_on_the_attackers_report_is_refused_and_the_victims_report_is_released(rules, together) -> None:
    victim = report("victim", one_hot(2))
    attack = stolen(victim)
    assert attack.token == victim.token and attack.leader != victim.leader

    assert upload(attack).status_code == 202  # the attacker's first: the leader only stores at the door
    if not together:
        result = reports_ingest(collection_key=KEY)
        assert (result.accepted, result.rejected) == (0, 1)
        # Refused before the spent record is read: nothing counted, the token spent at neither aggregator.
        assert rejections(KEY) == {"leader": {"token_invalid": 1}}
        assert counted() == (0, 0) and spent(victim.token.digest) == []
    assert upload(victim).status_code == 202
    for device in ("b", "c"):  # two more devices, so the batch reaches the minimum cohort of 3
        assert upload(report(device, one_hot(5))).status_code == 202
    reports_ingest(collection_key=KEY)

    assert rejections(KEY) == {"leader": {"token_invalid": 1}}
    assert counted() == (3, 3) and spent(victim.token.digest) == ["leader", "helper"]
    expected = one_hot(2) + 2 * one_hot(5)  # the victim's report, not the attacker's (bucket 7)
    assert combined_sum() == expected.tolist()
    (batch,) = collection_release(collection_key=KEY, estimator=KARY)
    assert batch.reports == 3 and not batch.suppressed
    released, _ = KARY.estimate(expected, 3)
    assert np.allclose(batch.estimates, released)


def test_a_stolen_token_on_the_same_vector_in_another_batch_is_refused(rules) -> None:
    victim = report("victim", one_hot(2))
    # The victim's very vector, sealed in another cohort under the victim's nonce: the token names the batch too.
    moved = report_seal(
        collection_key=KEY,
        batch_key="locale=fr_FR",
        vector=one_hot(2),
        keys=keys(),
        shape=shape_for(KEY),
        nonce=victim.token.nonce,
    )
    assert upload(report_sign(moved, victim.token)).status_code == 202
    assert reports_ingest(collection_key=KEY).rejected == 1
    assert rejections(KEY) == {"leader": {"token_invalid": 1}} and spent(victim.token.digest) == []


# ------------------------------------------------------------------ (b) the victim's report, partly swapped


@pytest.mark.parametrize(
    "swap",
    [
        pytest.param(lambda victim, attack: replace(victim, helper=attack.helper), id="another helper share"),
        pytest.param(lambda victim, attack: replace(victim, leader=attack.leader), id="another leader share"),
        pytest.param(
            lambda victim, attack: replace(victim, public=attack.public, helper=attack.helper),
            id="another public and helper share",
        ),
        pytest.param(lambda victim, attack: replace(victim, batch_key="locale=fr_FR"), id="another batch"),
    ],
)
def test_the_victims_report_with_a_part_swapped_is_refused_and_the_victim_still_counts(rules, swap) -> None:
    victim = report("victim", one_hot(2))
    attack = stolen(victim)
    assert upload(swap(victim, attack)).status_code == 202
    assert reports_ingest(collection_key=KEY).rejected == 1
    assert rejections(KEY) == {"leader": {"token_invalid": 1}}
    assert counted() == (0, 0) and spent(victim.token.digest) == []
    assert upload(victim).status_code == 202
    assert reports_ingest(collection_key=KEY).accepted == 1 and counted() == (1, 1)


# ------------------------------------------------------------------ (c) a leader that splices at the helper


def _job_entry(sealed: wire.Report, rules) -> dap.VerifyInit:
    """The entry a leader sends the helper for ``sealed``: it opens its own share and runs verify_init
    (a malicious leader can do all that: it holds its key), as aggregation.reports does."""
    config = VerifyConfig.of(collection_key=KEY, shape=rules_shape(rules), verify_key=bytes(rules.verify_key))
    share = LEADER.open_report(rules, sealed)
    (verifier_share,) = AggregatorVerification("leader", config).start(
        [report_nonce(sealed.token.nonce)], [sealed.public], [share]
    )
    return verify_init_of(sealed, verifier_share, 0.0)


@pytest.mark.parametrize(
    "entry",
    [
        # The attacker's report with the victim's token, and the digest of its own leader share.
        pytest.param(lambda victim, attack, rules: _job_entry(attack, rules), id="the attacker's content"),
        # The victim's leader share named (its digest), the attacker's helper and public share sent.
        pytest.param(
            lambda victim, attack, rules: replace(
                _job_entry(attack, rules), leader_share_digest=dap.b64(wire.share_digest(victim.leader))
            ),
            id="the victim's leader digest with another helper share",
        ),
        # No leader digest at all (an older leader's entry): the helper cannot recompute the digest.
        pytest.param(
            lambda victim, attack, rules: replace(_job_entry(attack, rules), leader_share_digest=None),
            id="no leader digest",
        ),
    ],
)
def test_the_helper_refuses_a_leaders_entry_with_the_victims_token_and_other_content(rules, helper, entry) -> None:
    victim = report("victim", one_hot(2))
    attack = stolen(victim)
    init = entry(victim, attack, rules)
    assert init.token == {"nonce": dap.b64(victim.token.nonce), "signature": dap.b64(victim.token.signature)}
    body = dap.encode(dap.AggregationJobInitReq(collection=KEY, min_cohort=0, verify_inits=[init]))
    answer = send(helper, "PUT", "/aggregation_jobs/spliced", dap.JOB_INIT, body)
    assert answer.status_code == 200, answer.content
    (resp,) = dap.AggregationJobResp.parse(answer.content).verify_resps
    assert (resp.type, resp.report_error) == (dap.REJECT, "token_invalid")
    assert not HelperShare.objects.using(HELPER_STORE).exists() and spent(victim.token.digest) == []
    # The victim's own report, through the honest path (the leader's upload function: this test's
    # URLs are the helper's), is counted at both aggregators.
    receive(victim)
    assert reports_ingest(collection_key=KEY).accepted == 1 and counted() == (1, 1)


def test_the_helper_takes_the_victims_entry_as_an_honest_leader_sends_it(rules, helper) -> None:
    # The same request path as above with the report the token names: accepted (the refusals above
    # are the content's, not the path's).
    victim = report("victim", one_hot(2))
    body = dap.encode(dap.AggregationJobInitReq(collection=KEY, min_cohort=0, verify_inits=[_job_entry(victim, rules)]))
    answer = send(helper, "PUT", "/aggregation_jobs/honest", dap.JOB_INIT, body)
    (resp,) = dap.AggregationJobResp.parse(answer.content).verify_resps
    assert resp.type == dap.CONTINUE and spent(victim.token.digest) == ["helper"]


# ------------------------------------------------------------------ (d) the victim's exact report again


def test_a_replay_of_the_victims_exact_report_is_refused_as_reused(rules) -> None:
    victim = report("victim", one_hot(2))
    assert upload(victim).status_code == 202
    assert reports_ingest(collection_key=KEY).accepted == 1
    assert upload(victim).status_code == 202  # the same bytes, seen on the wire and sent again
    assert reports_ingest(collection_key=KEY).rejected == 1
    assert rejections(KEY) == {"leader": {"token_reused": 1}}
    assert counted() == (1, 1) and not PendingReport.objects.exists()
