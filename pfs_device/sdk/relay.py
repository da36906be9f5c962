"""The upload through an Oblivious HTTP relay (RFC 9458; docs/devices-sdk.md, "Through a relay").

The device writes its ``POST /api/device/reports/`` as a Binary HTTP request (pfs_device.bhttp),
seals it to the leader's gateway key (pfs_device.ohttp) and posts the capsule to the relay its
enrolment names. The relay (pfs_relay, a third operator's) sees the device's address and
ciphertext; the leader opens the capsule and sees the report and the relay's address. Its answer
comes back sealed to this one request: the relay can drop it, not read or alter it.

The gateway key is taken from the leader (``{leader}/api/ohttp/keys``) and pinned per key id
beside the aggregators' keys (pfs_device.sdk.keys); before it is used, the copy the relay gives every
client (``{relay}/leader/api/ohttp/keys``) must be the same, so the leader cannot hand this device a key
of its own to recognise its uploads, and the relay cannot hand it a key of the relay's.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from dataclasses import dataclass

from pfs_device import bhttp, ohttp

USER_AGENT = "pfs-device-sdk/1"
MAX_KEYS_BYTES = 65_536
# The leader's answer to an upload is a short JSON body; the sealed one is that and 16 bytes of tag.
MAX_ANSWER_BYTES = 65_536
GATEWAY_KEYS_PATH = "/api/ohttp/keys"
# The relay serves its copies of the leader's public key paths under this prefix (pfs_relay.relay).
RELAY_LEADER_PREFIX = "/leader"


class RelayError(Exception):
    """The exchange through the relay failed. ``code``: why (docs/devices-sdk.md). Never the
    report's fault (the device sealed it itself), so the report is kept for a later pass whatever the
    code; ``retry_now``: a new capsule may do better at once (no answer, a 5xx or 429 on the way, an
    answer that did not open)."""

    def __init__(
        self,
        message: str,
        *,
        code: str,
        status: int | None = None,
        retry_now: bool = False,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.status = status
        self.retry_now = retry_now
        self.retry_after = retry_after


@dataclass(frozen=True)
class RelayRoute:
    """Where a pass sends its uploads: the relay, and the gateway key they are sealed to."""

    url: str
    gateway: ohttp.KeyConfig


def http_get(url: str, *, accept: str, timeout: float = 30.0, limit: int = MAX_KEYS_BYTES) -> tuple[str, bytes]:
    """(media type, body) of a GET; OSError-like failures and HTTP errors as RelayError."""
    request = urllib.request.Request(url, headers={"Accept": accept, "User-Agent": USER_AGENT})  # noqa: S310
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 (http(s) checked by the caller)
            body = response.read(limit + 1)
            media_type = response.headers.get("Content-Type") or ""
    except urllib.error.HTTPError as error:
        raise RelayError(f"{url} answered HTTP {error.code}", code="unreachable", status=error.code) from None
    except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as error:
        raise RelayError(f"cannot reach {url}: {error}", code="unreachable") from None
    if len(body) > limit:
        raise RelayError(f"{url} answered more than {limit} bytes", code="unreachable")
    return media_type, body


def gateway_config_fetch(url: str, *, timeout: float = 30.0) -> tuple[ohttp.KeyConfig, bytes]:
    """The first supported key configuration ``url`` serves as ``application/ohttp-keys``, and the
    body it came in (what two copies are compared by). RelayError if none."""
    media_type, body = http_get(url, accept=ohttp.KEYS_MEDIA_TYPE, timeout=timeout)
    if media_type.split(";")[0].strip().lower() != ohttp.KEYS_MEDIA_TYPE:
        raise RelayError(f"{url} answered {media_type or 'no media type'!r}, not {ohttp.KEYS_MEDIA_TYPE}", code="keys")
    try:
        return ohttp.key_configs_decode(body)[0], body
    except ohttp.OhttpError as error:
        raise RelayError(f"{url}: {error}", code="keys") from None


def exchange(
    route: RelayRoute, method: str, path: str, *, body: bytes, headers: dict[str, str], timeout: float = 30.0
) -> tuple[int, dict[str, str], bytes]:
    """Send one request to the leader through the relay: (status, headers, content) of the leader's
    answer, opened. Each call seals afresh (a new HPKE context): a capsule is never sent twice."""
    inner = bhttp.Request(
        method=method.encode(),
        scheme=b"https",
        authority=b"",
        path=path.encode(),
        headers=tuple((name.lower().encode(), value.encode()) for name, value in headers.items()),
        content=body,
    )
    capsule, keying = ohttp.request_encapsulate(route.gateway, bhttp.request_encode(inner))
    request = urllib.request.Request(  # noqa: S310 (http(s) checked by the caller)
        route.url,
        data=capsule,
        method="POST",
        headers={
            "Content-Type": ohttp.REQUEST_MEDIA_TYPE,
            "Accept": ohttp.RESPONSE_MEDIA_TYPE,
            "User-Agent": USER_AGENT,
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
            media_type = response.headers.get("Content-Type") or ""
            sealed = response.read(MAX_ANSWER_BYTES + 1)
    except urllib.error.HTTPError as error:
        raise _outer_refusal(error) from None
    except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as error:
        raise RelayError(f"cannot reach the relay {route.url}: {error}", code="unreachable", retry_now=True) from None
    if media_type.split(";")[0].strip().lower() != ohttp.RESPONSE_MEDIA_TYPE or len(sealed) > MAX_ANSWER_BYTES:
        raise RelayError(
            f"the relay answered {media_type or 'no media type'!r}", code="relay_answer_invalid", retry_now=True
        )
    try:
        answer = bhttp.response_decode(ohttp.response_decapsulate(keying, sealed))
    except (ohttp.OhttpError, bhttp.BinaryHttpError) as error:
        # Altered on the way, or another request's: nothing of it is believed. Whether the leader
        # stored the report is unknown; a new capsule settles it (a second copy is refused as used).
        raise RelayError(
            f"the answer through the relay does not open: {error}", code="relay_answer_invalid", retry_now=True
        ) from None
    fields = {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in answer.headers}
    return answer.status, fields, answer.content


def _outer_refusal(error: urllib.error.HTTPError) -> RelayError:
    """The relay's refusal, or the gateway's of a capsule that did not open (RFC 9458 Section 5.2):
    the device's capsule was whole when it left, so a refusal of it says the way altered it."""
    try:
        retry_after = max(0.0, float(error.headers.get("Retry-After", "")))
    except ValueError:
        retry_after = None
    media_type = (error.headers.get("Content-Type") or "").split(";")[0].strip().lower()
    if media_type == "application/problem+json":  # the gateway no longer holds the key: the next pass refetches it
        return RelayError(
            f"the gateway refused the key (HTTP {error.code})", code="gateway_key_outdated", status=error.code
        )
    if error.code in (429, 500, 502, 503, 504):
        return RelayError(
            f"the relay answered HTTP {error.code}",
            code="relay_unavailable",
            status=error.code,
            retry_now=True,
            retry_after=retry_after,
        )
    return RelayError(
        f"the capsule was refused on its way (HTTP {error.code})", code="relay_refused", status=error.code
    )
