"""One real device answering one task: decide, charge, encode, privatize, seal, token, upload.

Every step is the code the simulator runs, on a one-device slice of columns: the decision
(pfs_device.decision.decide: snapshot, query class, checks 1-3 of the policy's accountant), the
encoding (pfs_device.encode), retention (pfs_device.streams), the batch key (pfs_device.decision), the
randomizer (privacy.mechanisms through pfs_device.report_client) and the shares (privacy.field).
Only the coins differ: the device's own OS randomness, not a round's seed.

Fail closed: the device charges its ledger and writes it to disk before it asks for a token or
uploads anything. An upload that fails leaves the budget spent.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

import numpy as np

from pfs_device.budget import Accountant, Decision
from pfs_device.columns import Columns
from pfs_device.decision import DeviceTask, budget_request, cohort_keys, decide, snapshot_digest
from pfs_device.encode import encode_devices
from pfs_device.records import Parsed, columns_slice, parse_line, parsed_columns
from pfs_device.report_client import AggregatorKeys, report_seal, report_vector
from pfs_device.sdk.client import ClientError, issuer_key
from pfs_device.sdk.keys import KEY_MISMATCH, KEYS_UNAVAILABLE
from pfs_device.sdk.ledger import Ledger
from pfs_device.sdk.pacing import TOO_LITTLE_TIME, Pacing, Plan, TooLittleTime
from pfs_device.streams import apply_retention
from pfs_device.tokens import IssuerPublicKey, token_obtain
from pfs_device.wire import Report
from privacy.encoding import content_encoding
from privacy.mechanisms import mechanism_get
from privacy.report_vdaf import ReportShape, report_shape

# Not a Decision of the budget: the task is inconsistent (its report length is not the recipe's,
# or it cannot be encoded), so the device refuses it before deciding anything.
TASK_INVALID = "task_invalid"


class DataInvalid(ValueError):
    """The device's data file is not in the fleet JSONL format; ``errors`` says where."""

    def __init__(self, errors: list[str]) -> None:
        super().__init__("; ".join(errors))
        self.errors = errors


@dataclass(frozen=True)
class DeviceData:
    """One device's data as shard columns of one device, and the vocabularies they index."""

    columns: Columns
    vocabularies: dict[str, list[str]]


def data_read(lines: list[bytes], *, now: float | None = None) -> list[DeviceData]:
    """Devices from lines of the fleet JSONL format (docs/fleets.md), parsed as a fleet import parses them."""
    parsed = Parsed()
    reference = time.time() if now is None else now
    for number, raw in enumerate(lines, start=1):
        parse_line(number, raw, reference, parsed)
    if parsed.errors:
        raise DataInvalid(parsed.errors)
    if not parsed.ids:
        raise DataInvalid(["the data holds no device"])
    columns, vocabularies = parsed_columns(parsed)
    return [DeviceData(columns_slice(columns, i, i + 1), vocabularies) for i in range(len(parsed.ids))]


@dataclass(frozen=True)
class Offer:
    """One open round as the task endpoint sends it."""

    task: DeviceTask
    policy: dict
    policy_digest: str
    report_length: int
    issuer: IssuerPublicKey  # the collection's token key as served; checked against task.token_key
    # Seconds over which the collection expects its uploads (pfs_device.sdk.pacing), and its deadline.
    spread_seconds: float = 0.0
    closes_at: float | None = None  # seconds since the epoch

    @classmethod
    def from_json(cls, data: dict) -> Offer:
        closes_at = data.get("closes_at")
        return cls(
            task=DeviceTask.from_wire(data["task"]),
            policy=data["policy"]["content"],
            policy_digest=data["policy"]["digest"],
            report_length=int(data["report_length"]),
            issuer=issuer_key(data),
            spread_seconds=float(data.get("spread_seconds") or 0.0),
            closes_at=datetime.fromisoformat(closes_at).timestamp() if closes_at else None,
        )


@dataclass(frozen=True)
class ServerKeys:
    """What the device seals with (each offer brings its token key).

    ``aggregators``: each aggregator's HPKE key as that aggregator itself serves it
    (pfs_device.sdk.keys), or None when it could not be had (``unavailable`` says why, a refusal of
    pfs_device.sdk.keys). ``announced``: the keys the tasks answer names; a task is answered only if
    they are exactly ``aggregators`` (a leader naming a helper key of its own would open both shares).
    """

    aggregators: AggregatorKeys | None
    announced: AggregatorKeys | None = None
    unavailable: str = ""
    detail: str = ""

    def problem(self) -> tuple[str, str]:
        """(the refusal, why), or ("", "") when the device may seal to ``aggregators``."""
        if self.aggregators is None:
            return self.unavailable or KEYS_UNAVAILABLE, self.detail or "the aggregators' keys could not be fetched"
        if self.announced != self.aggregators:
            differ = [
                role
                for role in ("leader", "helper")
                if getattr(self.announced, role, None) != getattr(self.aggregators, role)
            ]
            return KEY_MISMATCH, f"the task names {' and '.join(differ)} keys the aggregators themselves do not serve"
        return "", ""


class Service(Protocol):
    """The server, as the device sees it (pfs_device.sdk.client.DeviceClient over HTTP)."""

    def token(self, collection_key: str, blinded: int) -> int: ...

    def upload(self, report: Report) -> str:
        """ "accepted", or raises ClientError."""
        ...


@dataclass(frozen=True)
class Outcome:
    task_key: str
    decision: str  # a Decision label, TASK_INVALID or TOO_LITTLE_TIME
    upload: str = ""  # with "answered": "accepted", or why the upload failed
    repeated: bool = False  # decided before: nothing was done this time
    problem: str = ""  # with a refusal for the aggregators' keys, or TOO_LITTLE_TIME: why


def task_answer(
    *,
    offer: Offer,
    data: DeviceData,
    fleet: str,
    ledger: Ledger,
    keys: ServerKeys,
    service: Service,
    rng: np.random.Generator | None = None,
    pacing: Pacing | None = None,
) -> Outcome:
    """Decide on ``offer`` once; when answering, charge the ledger, then upload one sealed report.

    ``pacing``: ask for the token and upload at random times over the collection's spread
    (pfs_device.sdk.pacing; the CLI always paces), never over less than the pacing's own floor; a
    task whose deadline leaves less is declined (TOO_LITTLE_TIME) before anything is charged or sent.
    None sends both at once, which lets the issuer's and the aggregators' orders be joined: for tests
    of everything else."""
    task = offer.task
    earlier = ledger.decision(task.task_key)
    if earlier is not None:
        return Outcome(task.task_key, earlier["decision"], earlier.get("upload", ""), repeated=True)
    rng = rng or np.random.default_rng(secrets.randbits(128))

    problem = _task_problem(offer)
    if problem:
        ledger.record(task.task_key, decision=TASK_INVALID, problem=problem)
        ledger.save()
        return Outcome(task.task_key, TASK_INVALID)
    # Before anything is charged or sent. Not a decision the ledger keeps: once the aggregators'
    # keys are the ones they serve themselves, the device decides on the task as on any other.
    refusal, why = keys.problem()
    if refusal:
        return Outcome(task.task_key, refusal, problem=why)
    # The times are drawn before deciding, so that a deadline too near is declined, not rushed:
    # nothing charged, no token, no upload. The ledger keeps the decision, as it keeps a refusal.
    paced: tuple[Pacing, float, Plan] | None = None
    if pacing is not None:
        start = pacing.clock()
        try:
            paced = (pacing, start, pacing.plan(offer.spread_seconds, closes_at=offer.closes_at))
        except TooLittleTime as error:
            ledger.record(task.task_key, decision=TOO_LITTLE_TIME, problem=str(error))
            ledger.save()
            return Outcome(task.task_key, TOO_LITTLE_TIME, problem=str(error))

    columns = ledger.columns(task.analysis)
    decision, accountant = _decide(offer, fleet, columns, rng)
    if decision != Decision.ANSWERED:
        ledger.record(task.task_key, decision=decision.label, snapshot=offer.policy_digest)
        ledger.save()
        return Outcome(task.task_key, decision.label)

    # The charge is on disk before anything leaves the device (fail closed).
    accountant.charge(columns, budget_request(task), np.ones(1, dtype=bool))
    ledger.store(task.analysis, columns)
    ledger.record(
        task.task_key,
        decision=decision.label,
        snapshot=offer.policy_digest,
        epsilon=task.privacy.epsilon,
        token_key=offer.issuer.digest,  # logged: the key this device's token is signed with
    )
    ledger.save()

    vector, batch_key = report_compute(offer, data, rng)
    upload = _send(task.task_key, vector, batch_key, offer, keys, service, paced, report_shape_of(offer))
    ledger.record(task.task_key, upload=upload)
    ledger.save()
    return Outcome(task.task_key, decision.label, upload)


def _task_problem(offer: Offer) -> str:
    task = offer.task
    try:
        length = report_shape_of(offer).length  # also: a Prio3 is defined for the task's reports
    except (ValueError, KeyError, TypeError) as error:
        return f"the task cannot be encoded: {error}"
    if length != offer.report_length:
        return f"the aggregators expect reports of length {offer.report_length}, the recipe gives {length}"
    if offer.issuer.digest != task.token_key:
        # A key that is not the one the task commits to may be this device's alone: tokens signed
        # with it would link this device's report to it.
        return f"the token key served ({offer.issuer.digest[:16]}…) is not the one the task commits to"
    return ""


def _decide(offer: Offer, fleet: str, columns: Columns, rng: np.random.Generator) -> tuple[Decision, Accountant | None]:
    """The device's decision (pfs_device.decision.decide) on the snapshot whose hash it checked itself."""
    task = offer.task
    sampled = np.array([rng.random() < task.privacy.sampling_rate])
    held = offer.policy_digest == task.snapshot_digest and snapshot_digest(offer.policy) == offer.policy_digest
    decision, accountant = decide(
        task=task, policy=offer.policy if held else None, fleet_name=fleet, ledger=columns, sampled=sampled
    )
    return Decision(int(decision[0])), accountant


def report_compute(offer: Offer, data: DeviceData, rng: np.random.Generator) -> tuple[np.ndarray, str]:
    """(the privatized report vector, the batch key): retention, encoding and randomizer, as the simulator."""
    task = offer.task
    columns, _ = apply_retention(data.columns, now=time.time())
    parsed = task.parsed_content or content_encoding(task.data_types)  # unparseable: raises here
    _, encoding = parsed
    value = int(encode_devices(task.data_types, columns, data.vocabularies, rng, parsed)[0])
    privacy = task.privacy
    oracle = None if privacy.aggregator_noise else mechanism_get(privacy.mechanism, privacy.epsilon0)
    vector = report_vector(oracle, value, encoding.size, rng)
    batch_key = str(cohort_keys(task.cohorts, columns, data.vocabularies)[0])
    return vector, batch_key


def report_shape_of(offer: Offer) -> ReportShape:
    """The Prio3 the aggregators verify this task's reports with, from the recipe alone (privacy.report_vdaf)."""
    task = offer.task
    # Parsed once per task (report_compute and the upload ask again); unparseable: raises here, with its reason.
    _, encoding = task.parsed_content or content_encoding(task.data_types)
    privacy = task.privacy
    mechanism = None if privacy.aggregator_noise else privacy.mechanism
    return report_shape(mechanism=mechanism, epsilon0=privacy.epsilon0, domain_size=encoding.size)


def _send(
    task_key: str,
    vector: np.ndarray,
    batch_key: str,
    offer: Offer,
    keys: ServerKeys,
    service: Service,
    paced: tuple[Pacing, float, Plan] | None,
    shape: ReportShape,
) -> str:
    issue: Callable[[int], int] = lambda blinded: service.token(task_key, blinded)  # noqa: E731
    if paced is not None:
        pacing, start, plan = paced
        pacing.wait_until(start, plan.token_delay)
    try:
        token = token_obtain(collection_key=task_key, issuer=offer.issuer, issue=issue)
        report = report_seal(
            collection_key=task_key, batch_key=batch_key, vector=vector, keys=keys.aggregators, token=token, shape=shape
        )
        if paced is not None:
            pacing.wait_until(start, plan.upload_delay)
        return service.upload(report)
    except ClientError as error:  # the server refused or could not be reached: the budget stays spent
        return f"failed: {error.code}"
    except ValueError as error:  # the issuer's signature did not verify, or the report is over the weight bound
        return f"failed: {error}"
