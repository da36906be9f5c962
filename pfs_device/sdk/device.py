"""One real device answering one task: decide, charge, encode, privatize, seal, token, upload.

Every step is the code the simulator runs, on a one-device slice of columns: the decision
(pfs_device.decision.decide: snapshot, query class, checks 1-3 of the policy's accountant), the
encoding (pfs_device.encode), retention (pfs_device.streams), the batch key (pfs_device.decision), the
randomizer (privacy.mechanisms through pfs_device.report_client) and the shares (privacy.field).
Only the coins differ: the device's own OS randomness, not a round's seed.

Fail closed, and never lose a report: each step is on disk before the next leaves the device
(pfs_device.sdk.ledger keeps it under the task's "pending" entry, each write atomic):

1. decide (policy, budget);
2. charge the ledger, and in the same write record the task as charged with its plan (the token's
   and the upload's times) and its privatized report vector;
3. draw the token's nonce, seal the report with it, and store the sealed report (the vector goes;
   for a heavy-hitters walk, the word it picked goes, sharded into one Poplar1 report);
4. blind the token request — its message names the sealed report (pfs_device.wire.report_digest),
   so the token carries that report only — and store the blinding, then ask the issuer (which
   signs the same blinded message again for the same device, aggregation.issuer.token_issue);
5. unblind the token and store the report with its token;
6. upload exactly those bytes;
7. record the outcome and delete the stored report.

A device stopped at any step resumes there when it is offered the task again: it never charges
twice, never seals a second report, never asks for a token with a second blinded message. A
report whose upload reached the leader though its answer was lost is refused as token_reused
when sent again: that is recorded as "already_received". A transient failure (the server
unreachable, a 5xx, 429) keeps the step for the next pass; a refusal ends the task, budget spent.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

import numpy as np

from pfs_device.budget import Accountant, Decision
from pfs_device.columns import Columns
from pfs_device.decision import DeviceTask, budget_request, cohort_keys, decide, snapshot_digest
from pfs_device.encode import device_words, encode_devices
from pfs_device.records import Parsed, columns_slice, parse_line, parsed_columns
from pfs_device.report_client import (
    AggregatorKeys,
    report_seal,
    report_sign,
    report_token_blind,
    report_vector,
    word_report_seal,
)
from pfs_device.sdk.client import RETRY_STATUSES, TRANSIENT_CODES, ClientError, issuer_key
from pfs_device.sdk.keys import KEY_MISMATCH, KEYS_UNAVAILABLE
from pfs_device.sdk.ledger import Ledger
from pfs_device.sdk.pacing import TOO_LITTLE_TIME, Pacing, TooLittleTime
from pfs_device.streams import apply_retention
from pfs_device.tokens import Blinding, IssuerPublicKey, token_finalize
from pfs_device.wire import Report, report_json, report_parse
from privacy.encoding import content_encoding
from privacy.heavy_hitters import Poplar1WordsType
from privacy.mechanisms import mechanism_get
from privacy.report_vdaf import ReportShape, report_shape

# Not a Decision of the budget: the task is inconsistent (its report length is not the recipe's,
# or it cannot be encoded), so the device refuses it before deciding anything.
TASK_INVALID = "task_invalid"
# The upload outcome of a stored report sent again after its first upload's answer was lost: the
# leader refused it as token_reused, so it had received it (only this report carries its token).
ALREADY_RECEIVED = "already_received"
# The steps a pending task can be at (its "pending" entry in the ledger), in order.
CHARGED, SEALED, TOKEN_REQUESTED, SIGNED = "charged", "sealed", "token_requested", "signed"
# The upload outcome of a task an SDK before wire format v4 left pending after its charge: its token
# (asked for before its report was sealed) names no report, and the leader refuses its v3 report.
OLDER_SDK = "failed: pending_from_older_sdk"

Progress = Callable[[dict], None]


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
    resumed: str = ""  # a task stopped before its upload: the step it was resumed at
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
    progress: Progress | None = None,
) -> Outcome:
    """Decide on ``offer`` once; when answering, charge the ledger, then upload one sealed report,
    each step on disk before the next (the module's docstring); a task stopped before its upload
    is resumed where it stopped.

    ``pacing``: ask for the token and upload at random times over the collection's spread
    (pfs_device.sdk.pacing; the CLI always paces), never over less than the pacing's own floor; a
    task whose deadline leaves less is declined (TOO_LITTLE_TIME) before anything is charged or sent.
    None sends both at once, which lets the issuer's and the aggregators' orders be joined: for tests
    of everything else. ``progress``: told each step as a JSON-able dict ({"task", "waiting":
    "token" or "upload", "until": ISO time} before each wait; {"task", "progress": ...} after)."""
    task = offer.task
    earlier = ledger.decision(task.task_key)
    if earlier is not None and "pending" not in earlier:
        return Outcome(task.task_key, earlier["decision"], earlier.get("upload", ""), repeated=True)
    say: Progress = progress or (lambda event: None)
    if earlier is not None:  # stopped before its upload: resume where it stopped
        step = earlier["pending"]["step"]
        say({"task": task.task_key, "resuming": step})
        return _proceed(task.task_key, offer, ledger, keys, service, pacing, say, resumed=step)
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
    plan: dict | None = None
    if pacing is not None:
        start = pacing.clock()
        try:
            drawn = pacing.plan(offer.spread_seconds, closes_at=offer.closes_at)
        except TooLittleTime as error:
            ledger.record(task.task_key, decision=TOO_LITTLE_TIME, problem=str(error))
            ledger.save()
            return Outcome(task.task_key, TOO_LITTLE_TIME, problem=str(error))
        plan = {"start": start, "token_delay": drawn.token_delay, "upload_delay": drawn.upload_delay}

    columns = ledger.columns(task.analysis)
    decision, accountant = _decide(offer, fleet, columns, rng)
    if decision != Decision.ANSWERED:
        ledger.record(task.task_key, decision=decision.label, snapshot=offer.policy_digest)
        ledger.save()
        return Outcome(task.task_key, decision.label)

    # The charge is on disk before anything leaves the device (fail closed), in the same write as
    # the task's plan and its privatized report: a device stopped after it resumes with both.
    if _walk_of(offer) is not None:  # a heavy-hitters walk: the device's word, no vector
        answer, batch_key = {"word": word_compute(offer, data, rng)}, ""
    else:
        vector, batch_key = report_compute(offer, data, rng)
        answer = {"vector": [int(v) for v in vector]}
    accountant.charge(columns, budget_request(task), np.ones(1, dtype=bool))
    ledger.store(task.analysis, columns)
    pending: dict = {"step": CHARGED, **answer, "batch_key": batch_key}
    if plan is not None:
        pending["plan"] = plan
    ledger.record(
        task.task_key,
        decision=decision.label,
        snapshot=offer.policy_digest,
        epsilon=task.privacy.epsilon,
        token_key=offer.issuer.digest,  # logged: the key this device's token is signed with
        pending=pending,
    )
    ledger.save()
    say({"task": task.task_key, "progress": CHARGED})
    return _proceed(task.task_key, offer, ledger, keys, service, pacing, say)


def _task_problem(offer: Offer) -> str:
    task = offer.task
    try:
        walk = _walk_of(offer)
        # Also: a Prio3 (or a Poplar1) is defined for the task's reports.
        length = walk.bits if walk is not None else report_shape_of(offer).length
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


def word_compute(offer: Offer, data: DeviceData, rng: np.random.Generator) -> str:
    """The device's word for a heavy-hitters walk: one of the words it typed within retention,
    uniformly by its own coins (pfs_device.encode.device_words, as the simulator); "" for none."""
    columns, _ = apply_retention(data.columns, now=time.time())
    return device_words(columns, data.vocabularies.get("tokens", []), rng)[0]


def _walk_of(offer: Offer) -> Poplar1WordsType | None:
    """The task's Poplar1 walk (its recipe's Poplar1Words schema), or None for a histogram."""
    _, encoding = offer.task.parsed_content or content_encoding(offer.task.data_types)
    return encoding if isinstance(encoding, Poplar1WordsType) else None


def report_shape_of(offer: Offer) -> ReportShape:
    """The Prio3 the aggregators verify this task's reports with, from the recipe alone (privacy.report_vdaf)."""
    task = offer.task
    # Parsed once per task (report_compute and the upload ask again); unparseable: raises here, with its reason.
    _, encoding = task.parsed_content or content_encoding(task.data_types)
    privacy = task.privacy
    mechanism = None if privacy.aggregator_noise else privacy.mechanism
    return report_shape(mechanism=mechanism, epsilon0=privacy.epsilon0, domain_size=encoding.size)


def _proceed(
    task_key: str,
    offer: Offer,
    ledger: Ledger,
    keys: ServerKeys,
    service: Service,
    pacing: Pacing | None,
    say: Progress,
    *,
    resumed: str = "",
) -> Outcome:
    """From the step the task's pending entry is at to its upload; each step saved before the next."""
    pending = ledger.decision(task_key)["pending"]
    decision = ledger.decision(task_key)["decision"]
    if pending["step"] in (CHARGED, SEALED, TOKEN_REQUESTED):
        # Resumed with another offer than the one charged for: nothing is sealed to keys or signed by
        # a key the device would refuse now. The task stays pending.
        refusal, why = ("", "") if not resumed else (TASK_INVALID, _task_problem(offer))
        if not why:
            refusal, why = keys.problem()
        if why:
            return Outcome(task_key, refusal, problem=why, resumed=resumed)
        if _older_sdk(pending):  # fail closed: the budget stays spent, nothing is sent
            return _failed(task_key, decision, ledger, OLDER_SDK, False, say, resumed)
        try:
            if pending["step"] == CHARGED:
                pending = _seal(task_key, offer, ledger, keys, pending, say)
            report = report_parse(pending["report"], signed=False)
            _wait(pacing, pending.get("plan"), "token", task_key, say)
            if pending["step"] == SEALED:
                blinding = report_token_blind(report, offer.issuer)
                pending.update(step=TOKEN_REQUESTED, blinding=_blinding_json(blinding))
                ledger.save()  # before the request leaves: a rerun asks with this very blinded message
            else:
                blinding = _blinding_parse(pending["blinding"])
            token = token_finalize(
                issuer=offer.issuer, blinding=blinding, blind_sig=service.token(task_key, blinding.blinded)
            )
        except ClientError as error:
            return _failed(task_key, decision, ledger, f"failed: {error.code}", _transient(error), say, resumed)
        except ValueError as error:  # the issuer's signature did not verify, or the report is over the weight bound
            return _failed(task_key, decision, ledger, f"failed: {error}", False, say, resumed)
        signed = report_sign(report, token)
        ledger.record(task_key, pending={"step": SIGNED, "report": report_json(signed), **_plan_of(pending)})
        ledger.save()  # the report and its token, before the upload
        pending = ledger.decision(task_key)["pending"]
        say({"task": task_key, "progress": SIGNED})

    report = report_parse(pending["report"])
    _wait(pacing, pending.get("plan"), "upload", task_key, say)
    try:
        upload = service.upload(report)
    except ClientError as error:
        if error.code == "token_reused" and resumed == SIGNED:
            upload = ALREADY_RECEIVED  # an earlier upload of these very bytes reached the leader
        else:
            return _failed(task_key, decision, ledger, f"failed: {error.code}", _transient(error), say, resumed)
    ledger.record(task_key, upload=upload)
    ledger.forget(task_key, "pending")
    ledger.save()
    say({"task": task_key, "progress": "uploaded", "upload": upload})
    return Outcome(task_key, decision, upload, resumed=resumed)


def _older_sdk(pending: dict) -> bool:
    """A pending entry an SDK before wire format v4 wrote: a token request with no sealed report
    beside it, or a report at "sealed" that already has its token."""
    if pending["step"] == TOKEN_REQUESTED:
        return "report" not in pending
    return pending["step"] == SEALED and bool(pending.get("report", {}).get("token", {}).get("signature"))


def _seal(task_key: str, offer: Offer, ledger: Ledger, keys: ServerKeys, pending: dict, say: Progress) -> dict:
    """Step 3: the report sealed under a fresh token nonce, stored in place of its vector (the
    token request names this sealed report, so it is sealed once). ValueError for a vector over
    the weight bound."""
    if "word" in pending:  # a heavy-hitters walk: one Poplar1 report of the word
        report = word_report_seal(
            collection_key=task_key,
            batch_key=pending["batch_key"],
            word=pending["word"],
            bits=_walk_of(offer).bits,
            keys=keys.aggregators,
        )
    else:
        report = report_seal(
            collection_key=task_key,
            batch_key=pending["batch_key"],
            vector=np.array(pending["vector"], dtype=np.int64),
            keys=keys.aggregators,
            shape=report_shape_of(offer),
        )
    ledger.record(task_key, pending={"step": SEALED, "report": report_json(report), **_plan_of(pending)})
    ledger.save()  # the sealed report, before its token is asked for
    say({"task": task_key, "progress": SEALED})
    return ledger.decision(task_key)["pending"]


def _failed(
    task_key: str, decision: str, ledger: Ledger, upload: str, transient: bool, say: Progress, resumed: str
) -> Outcome:
    """A failed request: kept pending for the next pass when transient; otherwise the task ends
    there, its budget spent (fail closed)."""
    ledger.record(task_key, upload=upload)
    if not transient:
        ledger.forget(task_key, "pending")
    ledger.save()
    say({"task": task_key, "progress": "failed", "upload": upload, "retry": transient})
    return Outcome(task_key, decision, upload, resumed=resumed)


def _transient(error: ClientError) -> bool:
    return error.code in TRANSIENT_CODES or error.status in RETRY_STATUSES


def _plan_of(pending: dict) -> dict:
    return {"plan": pending["plan"]} if "plan" in pending else {}


def _wait(pacing: Pacing | None, plan: dict | None, what: str, task_key: str, say: Progress) -> None:
    """Wait for the plan's time of ``what`` ("token" or "upload"), saying so first."""
    if pacing is None or plan is None:
        return
    delay = plan[f"{what}_delay"]
    until = plan["start"] + delay
    if until > pacing.clock():
        say(
            {
                "task": task_key,
                "waiting": what,
                "until": datetime.fromtimestamp(until, UTC).isoformat(timespec="seconds"),
            }
        )
    pacing.wait_until(plan["start"], delay)


def _blinding_json(blinding: Blinding) -> dict:
    return {
        "input_msg": blinding.input_msg.hex(),
        "blinded": format(blinding.blinded, "x"),
        "inv": format(blinding.inv, "x"),
    }


def _blinding_parse(stored: dict) -> Blinding:
    return Blinding(
        input_msg=bytes.fromhex(stored["input_msg"]), blinded=int(stored["blinded"], 16), inv=int(stored["inv"], 16)
    )
