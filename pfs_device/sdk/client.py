"""The device API over HTTP, with urllib from the standard library (docs/devices-sdk.md).

Task and token requests carry the device's credential; a token request also carries the device's
attestation and the device's own signature over it (pfs_device.attestation), without which the
issuer signs nothing. The report upload carries none of these, so
nothing in it names the device. Transient failures (no connection, 5xx, 429) are retried with
backoff, honouring Retry-After; anything else is the server's answer and is raised.
"""

from __future__ import annotations

import base64
import json
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pfs_device.attestation import DeviceKey, token_request_sign
from pfs_device.sdk.relay import USER_AGENT, RelayError, RelayRoute, exchange
from pfs_device.tokens import IssuerPublicKey
from pfs_device.wire import Report, report_bytes

RETRY_STATUSES = {429, 500, 502, 503, 504}
# Failures a later pass may get past: no answer; through a relay, anything short of the leader's
# sealed answer (the report is whole: the way failed it), among them a gateway key the gateway no
# longer holds (the next pass fetches the keys again). The step stays.
TRANSIENT_CODES = {"unreachable", "relay_unavailable", "relay_refused", "relay_answer_invalid", "gateway_key_outdated"}


class ClientError(Exception):
    """The server could not be reached, or refused; ``code`` is the error's code (docs/api.md)."""

    def __init__(
        self, message: str, *, code: str, status: int | None = None, fields: dict | None = None, retried: bool = False
    ) -> None:
        super().__init__(message)
        self.code = code
        self.status = status
        self.fields = fields or {}
        self.retried = retried  # the request was sent more than once


@dataclass(frozen=True)
class Credential:
    device_id: str
    secret: str
    # The attestation it enrolled with (its JSON form) and its own key pair, kept in its state
    # (pfs_device.sdk.identity): they authenticate its token requests to the issuer.
    attestation: dict | None = None
    device_key: DeviceKey | None = None

    @property
    def header(self) -> str:
        return f"Device {self.device_id}:{self.secret}"


class DeviceClient:
    def __init__(
        self, server: str, credential: Credential, *, timeout: float = 30.0, attempts: int = 4, backoff: float = 0.5
    ) -> None:
        if not server.startswith(("http://", "https://")):
            raise ValueError(f"the server must be an http:// or https:// URL, not {server!r}")
        self.server = server.rstrip("/")
        self.credential = credential
        self.timeout = timeout
        self.attempts = attempts
        self.backoff = backoff

    # ------------------------------------------------------------ the endpoints

    def tasks(self) -> dict[str, Any]:
        """GET /api/device/tasks/: the open rounds of the device's fleet, and the aggregators' keys it names
        (which the device checks against each aggregator's own, pfs_device.sdk.keys)."""
        return self._request("GET", "/api/device/tasks/", authenticated=True)

    def token(self, collection_key: str, blinded: int) -> int:
        """POST /api/device/tokens/: the issuer's blind signature on ``blinded``."""
        size = (blinded.bit_length() + 7) // 8
        blinded_bytes = blinded.to_bytes(size, "big")
        body = {"collection_key": collection_key, "blinded": base64.b64encode(blinded_bytes).decode()}
        if self.credential.attestation is not None and self.credential.device_key is not None:
            signature = token_request_sign(self.credential.device_key, collection_key, blinded_bytes)
            body.update(attestation=self.credential.attestation, device_signature=base64.b64encode(signature).decode())
        answer = self._request("POST", "/api/device/tokens/", body=json.dumps(body).encode(), authenticated=True)
        return int.from_bytes(base64.b64decode(answer["blind_signature"]), "big")

    def upload(self, report: Report, *, relay: RelayRoute | None = None) -> str:
        """POST /api/device/reports/, anonymously: "accepted", or ClientError with the rejection's code.

        With ``relay``, sealed to the leader's gateway and sent through the relay (pfs_device.sdk.relay):
        the leader sees the relay's address, not this device's. Sent again after a transient failure,
        a report whose token is then found used was accepted the first time: the token can only have
        been spent by this very report.
        """
        try:
            self._request("POST", "/api/device/reports/", body=report_bytes(report), authenticated=False, relay=relay)
        except ClientError as error:
            if error.code == "token_reused" and error.retried:
                return "accepted"
            raise
        return "accepted"

    # ------------------------------------------------------------ transport

    def _request(
        self, method: str, path: str, *, body: bytes | None = None, authenticated: bool, relay: RelayRoute | None = None
    ) -> dict:
        headers = {"Accept": "application/json", "User-Agent": USER_AGENT}
        if body is not None:
            headers["Content-Type"] = "application/json"
        if authenticated:
            headers["Authorization"] = self.credential.header
        retried = False
        for attempt in range(self.attempts):
            try:
                status, answer_headers, content = self._send(method, path, body, headers, relay)
            except _Transient as error:
                if attempt + 1 < self.attempts:
                    retried = True
                    time.sleep(error.retry_after or self.backoff * 2**attempt)
                    continue
                raise ClientError(str(error), code=error.code, status=error.status, retried=retried) from None
            if status < 300:
                return json.loads(content or b"{}")
            if status in RETRY_STATUSES and attempt + 1 < self.attempts:
                retried = True
                time.sleep(_retry_after(answer_headers) or self.backoff * 2**attempt)
                continue
            payload = _error_json(content)
            raise ClientError(
                payload.get("detail") or f"HTTP {status}",
                code=payload.get("code") or f"http_{status}",
                status=status,
                fields=payload.get("fields"),
                retried=retried,
            )
        raise AssertionError("unreachable")  # the loop returns or raises

    def _send(
        self, method: str, path: str, body: bytes | None, headers: dict[str, str], relay: RelayRoute | None
    ) -> tuple[int, Mapping[str, str], bytes]:
        """(status, headers, content) of one request, directly or through the relay; _Transient if
        it did not get an answer worth believing."""
        if relay is not None:
            try:
                return exchange(relay, method, path, body=body or b"", headers=headers, timeout=self.timeout)
            except RelayError as error:
                if error.retry_now:
                    raise _Transient(str(error), error.code, error.status, error.retry_after) from None
                raise ClientError(str(error), code=error.code, status=error.status) from None
        request = urllib.request.Request(self.server + path, data=body, method=method, headers=headers)  # noqa: S310 (http(s) checked in __init__)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:  # noqa: S310
                return response.status, response.headers, response.read()
        except urllib.error.HTTPError as error:
            return error.code, error.headers, error.read()
        except (urllib.error.URLError, TimeoutError, ConnectionError) as error:
            raise _Transient(f"cannot reach {self.server}: {error}", "unreachable") from None


class _Transient(Exception):
    """No answer, or none to believe: the request may be sent again (sealed afresh through a relay)."""

    def __init__(self, message: str, code: str, status: int | None = None, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.code, self.status, self.retry_after = code, status, retry_after


def _error_json(content: bytes) -> dict:
    try:
        payload = json.loads(content or b"{}")
    except ValueError:
        return {}
    return payload if isinstance(payload, dict) else {}


def _retry_after(headers: Mapping[str, str]) -> float | None:
    try:
        return max(0.0, float(headers.get("Retry-After") or headers.get("retry-after") or ""))
    except ValueError:
        return None


def issuer_key(offer: dict) -> IssuerPublicKey:
    """One task's token key, as the tasks answer sends it."""
    return IssuerPublicKey(
        int.from_bytes(base64.b64decode(offer["issuer"]["modulus"]), "big"), int(offer["issuer"]["exponent"])
    )
