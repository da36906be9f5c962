"""The messages the leader and the helper exchange, modelled on DAP's aggregation sub-protocol.

draft-ietf-ppm-dap: the leader provisions a task at the helper, runs aggregation jobs in which
the helper verifies its own input shares of a job's reports and answers each with the verifier
message or a rejection, and asks the helper's aggregate share of each batch once. DAP's names are
kept (``AggregationJobInitReq``, ``VerifyInit``, ``VerifyResp``, ``AggregationJobResp``,
``AggregateShareReq``); the encoding is JSON (binary fields in standard base64), not DAP's TLS
presentation language, so the media types are this project's own and carry the version:
``application/vnd.pfs-studio.dap+json;message=<name>;version=1``. A helper refuses another version.

The paths are DAP's, under the helper's URL: ``/tasks/<task id>`` (the task's configuration),
``/tasks/<task id>/aggregation_jobs/<job id>`` (PUT: idempotent by job id, a replay of the same
body gets the same answer, another body under the same id is a conflict),
``/tasks/<task id>/aggregate_shares`` and, for simulated fleets only, ``/tasks/<task id>/simulated_shares``.
A task id is the unpadded base64url SHA-256 of the collection key (the key has slashes); every body
names its collection too, and the helper checks that they agree.

Every request carries ``Authorization: Bearer <token>``, DAP's aggregator auth token. The token is
per collection: HMAC-SHA256 of the collection key under the secret the two operators exchange at
set-up (``PFS_AGGREGATOR_AUTH_SECRET``), so a token seen in one collection's traffic opens no other.
This module is pure: no Django, no database.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import functools
import hashlib
import hmac
import json
from dataclasses import dataclass, fields, is_dataclass
from typing import Any

# SIMD base64: a job's request carries every report's shares (pfs_device.wire says why it matters).
import pybase64

VERSION = 1
MEDIA_BASE = "application/vnd.pfs-studio.dap+json"

TASK_CONFIG = "task-config"
JOB_INIT = "aggregation-job-init-req"
JOB_RESP = "aggregation-job-resp"
SHARE_REQ = "aggregate-share-req"
SHARE_RESP = "aggregate-share"
SIMULATED = "simulated-shares-req"

CONTINUE, REJECT = "continue", "reject"


class MessageError(ValueError):
    """A body that is not the message it claims to be (DAP's ``invalidMessage``)."""


def media_type(message: str) -> str:
    return f"{MEDIA_BASE};message={message};version={VERSION}"


def media_type_parse(value: str) -> tuple[str, int] | None:
    """(message, version) of a Content-Type this protocol uses; None for any other."""
    base, *params = (part.strip() for part in value.split(";"))
    if base != MEDIA_BASE:
        return None
    named = dict(param.partition("=")[::2] for param in params)
    try:
        return named.get("message", ""), int(named.get("version", ""))
    except ValueError:
        return None


def task_id(collection_key: str) -> str:
    """The task id in the helper's paths: unpadded base64url of the collection key's SHA-256."""
    digest = hashlib.sha256(collection_key.encode()).digest()
    return base64.urlsafe_b64encode(digest).decode("ascii").rstrip("=")


def auth_token(secret: bytes, collection_key: str) -> str:
    """The bearer token of one collection, derived from the secret both operators hold."""
    mac = hmac.new(secret, b"pfs-studio aggregator auth token|" + collection_key.encode(), hashlib.sha256)
    return base64.urlsafe_b64encode(mac.digest()).decode("ascii").rstrip("=")


def b64(data: bytes) -> str:
    return pybase64.b64encode(data).decode("ascii")


def unb64(value: Any, name: str) -> bytes:
    if not isinstance(value, str):
        raise MessageError(f"{name}: must be a base64 string")
    try:
        return pybase64.b64decode(value.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError) as error:
        raise MessageError(f"{name}: not valid base64") from error


def encode(message: Any) -> bytes:
    """A message's body: canonical JSON (sorted keys, no spaces), so that a retried request is
    byte for byte the first one, which is how the helper recognises a replay."""
    return json.dumps(_plain(message), sort_keys=True, separators=(",", ":")).encode("ascii")


def _plain(value: Any) -> Any:
    """dataclasses.asdict without its deep copies: a job's message holds a dataclass per report, and
    asdict's copying was a tenth of a Poplar1 level's work. Messages hold only dataclasses, lists,
    dicts, strings, numbers and None."""
    if is_dataclass(value):
        return {name: _plain(getattr(value, name)) for name in _field_names(type(value))}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    return value


@functools.cache
def _field_names(kind: type) -> tuple[str, ...]:
    return tuple(f.name for f in fields(kind))


def _object(body: bytes, keys: set[str], optional: set[str] = frozenset()) -> dict[str, Any]:
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, ValueError) as error:
        raise MessageError("the body is not JSON") from error
    return _fields(data, keys, optional, "body")


def _fields(data: Any, keys: set[str], optional: set[str], where: str) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise MessageError(f"{where}: must be an object")
    unknown = set(data) - keys - optional
    missing = keys - set(data)
    if unknown or missing:
        raise MessageError(f"{where}: unknown fields {sorted(unknown)}, missing fields {sorted(missing)}")
    return data


def _int(value: Any, name: str, *, low: int = 0) -> int:
    if type(value) is not int or value < low:
        raise MessageError(f"{name}: must be an integer of at least {low}")
    return value


def _number(value: Any, name: str, *, zero: bool = False) -> float | None:
    """A positive number (or, with ``zero``, a non-negative one), or None for null."""
    if value is None:
        return None
    if type(value) not in (int, float) or not (value > 0 or (zero and value == 0)):
        raise MessageError(f"{name}: must be a {'non-negative' if zero else 'positive'} number or null")
    return float(value)


def _text(value: Any, name: str, *, limit: int = 200) -> str:
    if not isinstance(value, str) or len(value) > limit:
        raise MessageError(f"{name}: must be a string of at most {limit} characters")
    return value


# ------------------------------------------------------------------ the task's configuration


@dataclass(frozen=True)
class TaskConfig:
    """What the helper is configured with for one collection (PUT /tasks/<task id>).

    ``token_key``: the issuer's public key of the collection as decimal strings {"n", "e"} (the
    key the devices' task commits to); None for a simulated fleet's collection, whose shares come
    pre-summed or in simulated jobs and never with a token. A helper that does not take simulated
    fleets (``PFS_HELPER_ACCEPT_SIMULATED``) refuses such a task. No rate: the helper validates a
    collection of devices against the issuer's signed count and its own pacing floor (batch_rules).
    """

    collection: str
    length: int
    min_cohort: int
    weight_bound: int
    vdaf: str
    verify_key: str  # base64 of the Prio3 verification key both aggregators share
    noise_epsilon: float | None
    noise_delta: float | None
    token_key: dict[str, str] | None
    # Poplar1 only: the levels of the prefix tree released in all (the noise is calibrated for them).
    # Optional in the message (a Prio3 task sends null), so the message version stays 1.
    levels: int | None = None

    @classmethod
    def parse(cls, body: bytes) -> TaskConfig:
        data = _object(body, {f.name for f in cls.__dataclass_fields__.values()} - {"levels"}, {"levels"})
        levels = data.get("levels")
        token_key = data["token_key"]
        if token_key is not None:
            _fields(token_key, {"n", "e"}, set(), "token_key")
            if not all(isinstance(v, str) and v.isdigit() for v in token_key.values()):
                raise MessageError("token_key: n and e must be decimal strings")
        if len(unb64(data["verify_key"], "verify_key")) != 32:
            raise MessageError("verify_key: must be 32 bytes")
        return cls(
            collection=_text(data["collection"], "collection"),
            length=_int(data["length"], "length", low=1),
            min_cohort=_int(data["min_cohort"], "min_cohort", low=1),
            weight_bound=_int(data["weight_bound"], "weight_bound", low=1),
            vdaf=_text(data["vdaf"], "vdaf", limit=16),
            verify_key=data["verify_key"],
            noise_epsilon=_number(data["noise_epsilon"], "noise_epsilon"),
            noise_delta=_number(data["noise_delta"], "noise_delta", zero=True),  # 0: the discrete Laplace
            token_key=token_key,
            levels=None if levels is None else _int(levels, "levels", low=1),
        )


# ------------------------------------------------------------------ aggregation jobs


@dataclass(frozen=True)
class VerifyInit:
    """One report of a job: the helper's share of it and the leader's first verification message.

    ``report_id``: the token's digest (a simulated report's: its nonce's hex). ``time``: when the
    leader received it, floored to the aggregators' arrival grain (rate validation reads it).
    ``encrypted_input_share``: the helper's HPKE-sealed input share {"enc", "payload"}, as the
    device sealed it; a simulated report carries ``input_share`` in the clear instead, and no token.
    ``payload``: the leader's verifier share. ``leader_share_digest``: with a token, the SHA-256 of
    the leader's sealed share (pfs_device.wire.share_digest), base64: the helper recomputes from it,
    its own sealed share, the public share and the batch the report digest a wire v4 token signs.
    Optional in the message (an older leader sends none), so the message version stays 1; a helper
    refuses a v4 report without it as token_invalid.
    """

    report_id: str
    batch: str
    time: float
    version: int
    public_share: str
    token: dict[str, str] | None
    encrypted_input_share: dict[str, str] | None
    input_share: str | None
    payload: str
    leader_share_digest: str | None = None

    @classmethod
    def parse(cls, data: Any, where: str) -> VerifyInit:
        optional = {"leader_share_digest"}
        data = _fields(data, {f.name for f in cls.__dataclass_fields__.values()} - optional, optional, where)
        digest = data.get("leader_share_digest")
        if digest is not None and not isinstance(digest, str):
            raise MessageError(f"{where}.leader_share_digest: must be a base64 string or null")
        token, sealed = data["token"], data["encrypted_input_share"]
        if (token is None) != (sealed is None) or (sealed is None) == (data["input_share"] is None):
            raise MessageError(f"{where}: a token and an encrypted input share, or an input share in the clear")
        if token is not None:
            _fields(token, {"nonce", "signature"}, set(), f"{where}.token")
            _fields(sealed, {"enc", "payload"}, set(), f"{where}.encrypted_input_share")
        if type(data["time"]) not in (int, float) or data["time"] < 0:
            raise MessageError(f"{where}.time: must be a number of seconds")
        return cls(
            report_id=_text(data["report_id"], f"{where}.report_id", limit=64),
            batch=_text(data["batch"], f"{where}.batch"),
            time=float(data["time"]),
            version=_int(data["version"], f"{where}.version", low=1),
            public_share=_text(data["public_share"], f"{where}.public_share", limit=1 << 20),
            token=token,
            encrypted_input_share=sealed,
            input_share=data["input_share"],
            payload=_text(data["payload"], f"{where}.payload", limit=1 << 24),
            leader_share_digest=digest,
        )


@dataclass(frozen=True)
class AggregationJobInitReq:
    """PUT /tasks/<task id>/aggregation_jobs/<job id>: the reports of one job.

    ``min_cohort``: the minimum cohort the devices routed with their reports (their own check 3),
    when the leader knows it; the helper enforces the larger of it, its task's and its own floor.
    """

    collection: str
    min_cohort: int
    verify_inits: list[VerifyInit] = dataclasses.field(default_factory=list)

    @classmethod
    def parse(cls, body: bytes) -> AggregationJobInitReq:
        data = _object(body, {"collection", "min_cohort", "verify_inits"})
        inits = data["verify_inits"]
        if not isinstance(inits, list) or not inits:
            raise MessageError("verify_inits: must be a non-empty list")
        parsed = [VerifyInit.parse(item, f"verify_inits[{i}]") for i, item in enumerate(inits)]
        if len({init.report_id for init in parsed}) != len(parsed):
            raise MessageError("verify_inits: report ids must be distinct")  # as DAP requires
        return cls(
            collection=_text(data["collection"], "collection"),
            min_cohort=_int(data["min_cohort"], "min_cohort"),
            verify_inits=parsed,
        )


@dataclass(frozen=True)
class VerifyResp:
    """The helper's answer to one report: ``continue`` with the verifier message (the helper has
    committed its output share), or ``reject`` with why."""

    report_id: str
    type: str
    payload: str | None = None
    report_error: str | None = None


@dataclass(frozen=True)
class AggregationJobResp:
    verify_resps: list[VerifyResp]

    @classmethod
    def parse(cls, body: bytes) -> AggregationJobResp:
        data = _object(body, {"verify_resps"})
        if not isinstance(data["verify_resps"], list):
            raise MessageError("verify_resps: must be a list")
        resps = []
        for i, item in enumerate(data["verify_resps"]):
            item = _fields(item, {"report_id", "type", "payload", "report_error"}, set(), f"verify_resps[{i}]")
            if item["type"] not in (CONTINUE, REJECT):
                raise MessageError(f"verify_resps[{i}].type: must be continue or reject")
            resps.append(VerifyResp(**item))
        return cls(verify_resps=resps)


# ------------------------------------------------------------------ simulated fleets' shares


@dataclass(frozen=True)
class SimulatedShare:
    """A simulated shard's helper share of one batch: its devices' shares summed (Field64)."""

    batch: str
    pair: str
    vector: str  # base64 of little-endian uint64 residues
    reports: int
    min_cohort: int


@dataclass(frozen=True)
class SimulatedSharesReq:
    """POST /tasks/<task id>/simulated_shares: one shard's helper shares, every batch at once."""

    collection: str
    source: str
    shares: list[SimulatedShare]

    @classmethod
    def parse(cls, body: bytes) -> SimulatedSharesReq:
        data = _object(body, {"collection", "source", "shares"})
        if not isinstance(data["shares"], list):
            raise MessageError("shares: must be a list")
        shares = []
        for i, item in enumerate(data["shares"]):
            item = _fields(item, {"batch", "pair", "vector", "reports", "min_cohort"}, set(), f"shares[{i}]")
            shares.append(
                SimulatedShare(
                    batch=_text(item["batch"], f"shares[{i}].batch"),
                    pair=_text(item["pair"], f"shares[{i}].pair", limit=100),
                    vector=_text(item["vector"], f"shares[{i}].vector", limit=1 << 26),
                    reports=_int(item["reports"], f"shares[{i}].reports"),
                    min_cohort=_int(item["min_cohort"], f"shares[{i}].min_cohort"),
                )
            )
        return cls(
            collection=_text(data["collection"], "collection"), source=_text(data["source"], "source"), shares=shares
        )


# ------------------------------------------------------------------ aggregate shares


@dataclass(frozen=True)
class AggregateShareReq:
    """POST /tasks/<task id>/aggregate_shares: every batch of the collection the leader aggregated,
    with the ids of the pairs (jobs, shards) it summed in each. The helper answers once: a retry of
    the same request gets the same answer (the same noise), any other request a conflict."""

    collection: str
    batches: dict[str, list[str]]
    # The token issuer's signed count of the tokens it issued for the collection
    # (aggregation.statements), relayed: the helper verifies it and validates rates against it.
    issued_statement: dict | None = None

    @classmethod
    def parse(cls, body: bytes) -> AggregateShareReq:
        data = _object(body, {"collection", "batches"}, {"issued_statement"})
        batches = data["batches"]
        if not isinstance(batches, dict) or not all(
            isinstance(pairs, list) and all(isinstance(p, str) for p in pairs) for pairs in batches.values()
        ):
            raise MessageError("batches: must map each batch to a list of pair ids")
        statement = data.get("issued_statement")
        if statement is not None and not isinstance(statement, dict):
            raise MessageError("issued_statement: must be an object")
        return cls(collection=_text(data["collection"], "collection"), batches=batches, issued_statement=statement)


@dataclass(frozen=True)
class BatchShare:
    """The helper's aggregate share of one batch (``share``: its field's encoding), or its refusal."""

    reports: int | None
    min_cohort: int
    field: str | None = None
    share: str | None = None
    refused: str | None = None
    empty: bool = False
    pairs: list[str] = dataclasses.field(default_factory=list)


@dataclass(frozen=True)
class AggregateShareResp:
    batches: dict[str, BatchShare]

    @classmethod
    def parse(cls, body: bytes) -> AggregateShareResp:
        data = _object(body, {"batches"})
        if not isinstance(data["batches"], dict):
            raise MessageError("batches: must be an object")
        names = {f.name for f in BatchShare.__dataclass_fields__.values()}
        return cls(
            batches={
                key: BatchShare(**_fields(value, names, set(), f"batches.{key}"))
                for key, value in data["batches"].items()
            }
        )
