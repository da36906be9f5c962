"""The leader's and the helper's messages for a Poplar1 collection (heavy hitters), after DAP's.

Poplar1 verifies a report in two rounds (privacy.vdaf.poplar1), so an aggregation job is DAP's
init then continue, under one job id and one path, ``/tasks/<task id>/poplar1_jobs/<job id>``:

- ``Poplar1JobInitReq`` (PUT): the level's aggregation parameter (Poplar1's own encoding, base64)
  and, per report, the leader's first verifier share (its masked sketch share). The helper answers
  ``Poplar1JobResp``: per report, the round's verifier message (the masked sketch) and its own
  second share (its share of the sketch's check), or a rejection;
- ``Poplar1JobContinueReq`` (POST): per report, the leader's second share. The helper adds the two,
  decides (the sketch must be zero), and commits the output shares of the reports it accepted; it
  answers ``Poplar1JobResp`` again, ``finish`` or ``reject`` per report.

``Poplar1ReportsReq`` carries a simulated fleet's helper input shares (in the clear: a simulated
fleet's shares never leave the operators' machines); ``Poplar1UploadsReq`` real devices' reports,
each with the helper's share sealed to its key and the device's token; ``Poplar1ShareReq`` asks the helper's noised
aggregate share of a level, once, with the leader's own (so that both know the released counts,
against which the next level's prefixes are checked). The media types, the auth token and the JSON
conventions are aggregation.dap's. Pure: no Django.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aggregation.dap import CONTINUE, REJECT, MessageError, VerifyInit, _fields, _int, _object, _text, unb64

REPORTS = "poplar1-reports-req"
UPLOADS = "poplar1-uploads-req"
JOB_INIT = "poplar1-job-init-req"
JOB_CONTINUE = "poplar1-job-continue-req"
JOB_RESP = "poplar1-job-resp"
SHARE_REQ = "poplar1-aggregate-share-req"
SHARE_RESP = "poplar1-aggregate-share"

FINISH = "finish"

# The most reports in one job or one upload request, and candidate prefixes in one level: a job's
# work and a level's noise are bounded, whatever a leader sends.
MAX_JOB_REPORTS = 2000
MAX_PREFIXES = 4096
# The most output-share elements (reports x prefixes) one job holds between its two steps: the
# helper keeps them, so a job's memory is bounded too (the leader sizes its jobs under it).
MAX_JOB_ELEMENTS = 1 << 20


def _list(value: Any, name: str, *, limit: int) -> list:
    if not isinstance(value, list) or not value:
        raise MessageError(f"{name}: must be a non-empty list")
    if len(value) > limit:
        raise MessageError(f"{name}: at most {limit:,} items")
    return value


def _distinct(ids: list[str], name: str) -> None:
    if len(set(ids)) != len(ids):
        raise MessageError(f"{name}: report ids must be distinct")


@dataclass(frozen=True)
class Poplar1Report:
    report_id: str  # the nonce's hex
    public_share: str
    input_share: str


@dataclass(frozen=True)
class Poplar1ReportsReq:
    """POST /tasks/<task id>/poplar1_reports: a simulated fleet's helper input shares."""

    collection: str
    reports: list[Poplar1Report]

    @classmethod
    def parse(cls, body: bytes) -> Poplar1ReportsReq:
        data = _object(body, {"collection", "reports"})
        items = _list(data["reports"], "reports", limit=MAX_JOB_REPORTS)
        reports = []
        for i, item in enumerate(items):
            item = _fields(item, {"report_id", "public_share", "input_share"}, set(), f"reports[{i}]")
            reports.append(
                Poplar1Report(
                    report_id=_hex_id(item["report_id"], f"reports[{i}].report_id"),
                    public_share=_text(item["public_share"], f"reports[{i}].public_share", limit=1 << 16),
                    input_share=_text(item["input_share"], f"reports[{i}].input_share", limit=1 << 16),
                )
            )
        _distinct([r.report_id for r in reports], "reports")
        return cls(collection=_text(data["collection"], "collection"), reports=reports)


@dataclass(frozen=True)
class Poplar1UploadsReq:
    """PUT /tasks/<task id>/poplar1_uploads/<job id>: real devices' reports the leader accepted, each
    with the helper's input share sealed to the helper's key and the device's token, as a Prio3 job's
    ``VerifyInit`` carries them (no verifier share: a Poplar1 report is verified level by level, in
    the walk's jobs). The helper checks each token and opens its share itself, keeps what it
    accepted, and answers ``Poplar1JobResp``: ``finish`` (kept) or ``reject`` with why, per report."""

    collection: str
    uploads: list[VerifyInit]

    @classmethod
    def parse(cls, body: bytes) -> Poplar1UploadsReq:
        data = _object(body, {"collection", "uploads"})
        items = _list(data["uploads"], "uploads", limit=MAX_JOB_REPORTS)
        uploads = [VerifyInit.parse(item, f"uploads[{i}]") for i, item in enumerate(items)]
        for i, upload in enumerate(uploads):
            if upload.token is None:
                raise MessageError(f"uploads[{i}]: a device's report carries its token and its sealed share")
        _distinct([u.report_id for u in uploads], "uploads")
        return cls(collection=_text(data["collection"], "collection"), uploads=uploads)


def _hex_id(value: Any, name: str) -> str:
    text = _text(value, name, limit=64)
    try:
        if len(bytes.fromhex(text)) != 16 or text != text.lower():
            raise ValueError
    except ValueError:
        raise MessageError(f"{name}: must be a 16-byte nonce in lower-case hex") from None
    return text


@dataclass(frozen=True)
class Poplar1Share:
    """One report's verifier share (or, in an answer, message) in a job step."""

    report_id: str
    payload: str


@dataclass(frozen=True)
class Poplar1JobInitReq:
    collection: str
    agg_param: str  # base64 of Poplar1.encode_agg_param
    shares: list[Poplar1Share]

    @classmethod
    def parse(cls, body: bytes) -> Poplar1JobInitReq:
        data = _object(body, {"collection", "agg_param", "shares"})
        unb64(data["agg_param"], "agg_param")
        return cls(
            collection=_text(data["collection"], "collection"),
            agg_param=data["agg_param"],
            shares=_shares(data["shares"]),
        )


@dataclass(frozen=True)
class Poplar1JobContinueReq:
    collection: str
    shares: list[Poplar1Share]

    @classmethod
    def parse(cls, body: bytes) -> Poplar1JobContinueReq:
        data = _object(body, {"collection", "shares"})
        return cls(collection=_text(data["collection"], "collection"), shares=_shares(data["shares"]))


def _shares(value: Any) -> list[Poplar1Share]:
    items = _list(value, "shares", limit=MAX_JOB_REPORTS)
    shares = []
    for i, item in enumerate(items):
        item = _fields(item, {"report_id", "payload"}, set(), f"shares[{i}]")
        unb64(item["payload"], f"shares[{i}].payload")
        shares.append(
            Poplar1Share(report_id=_hex_id(item["report_id"], f"shares[{i}].report_id"), payload=item["payload"])
        )
    _distinct([s.report_id for s in shares], "shares")
    return shares


@dataclass(frozen=True)
class Poplar1Resp:
    """The helper's answer to one report of a step: ``continue`` with its message and its next
    share (base64 of the two, message first), ``finish``, or ``reject`` with why."""

    report_id: str
    type: str
    payload: str | None = None
    report_error: str | None = None


@dataclass(frozen=True)
class Poplar1JobResp:
    resps: list[Poplar1Resp]

    @classmethod
    def parse(cls, body: bytes) -> Poplar1JobResp:
        data = _object(body, {"resps"})
        if not isinstance(data["resps"], list):
            raise MessageError("resps: must be a list")
        resps = []
        for i, item in enumerate(data["resps"]):
            item = _fields(item, {"report_id", "type", "payload", "report_error"}, set(), f"resps[{i}]")
            if item["type"] not in (CONTINUE, FINISH, REJECT):
                raise MessageError(f"resps[{i}].type: must be continue, finish or reject")
            resps.append(Poplar1Resp(**item))
        return cls(resps=resps)


@dataclass(frozen=True)
class Poplar1ShareReq:
    """POST /tasks/<task id>/poplar1_aggregate_shares: a level's release. ``leader_share``: the
    leader's aggregate share with its own noise (Poplar1.encode_agg_share, base64); ``reports``: how
    many reports it aggregated at the level."""

    collection: str
    level: int
    reports: int
    leader_share: str

    @classmethod
    def parse(cls, body: bytes) -> Poplar1ShareReq:
        data = _object(body, {"collection", "level", "reports", "leader_share"})
        unb64(data["leader_share"], "leader_share")
        return cls(
            collection=_text(data["collection"], "collection"),
            level=_int(data["level"], "level"),
            reports=_int(data["reports"], "reports"),
            leader_share=data["leader_share"],
        )


@dataclass(frozen=True)
class Poplar1ShareResp:
    """The helper's noised aggregate share of the level and how many reports it aggregated."""

    level: int
    reports: int
    helper_share: str

    @classmethod
    def parse(cls, body: bytes) -> Poplar1ShareResp:
        data = _object(body, {"level", "reports", "helper_share"})
        unb64(data["helper_share"], "helper_share")
        return cls(
            level=_int(data["level"], "level"),
            reports=_int(data["reports"], "reports"),
            helper_share=data["helper_share"],
        )


__all__ = ["CONTINUE", "FINISH", "REJECT"]
