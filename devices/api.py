"""The endpoints real devices call with their credential (docs/devices-sdk.md).

    GET  /api/device/tasks/    the open rounds of the device's fleet, with everything to answer them
    POST /api/device/tokens/   one blind-signed token per device and collection

A device signs in with ``Authorization: Device <id>:<secret>`` (DeviceAuthentication); only these
endpoints accept it, and they accept nothing else. The report itself is uploaded anonymously
(aggregation.api): the token, not the credential, admits it.
"""

from __future__ import annotations

import base64
import binascii

from django.conf import settings
from rest_framework import serializers, status
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.exceptions import APIException, AuthenticationFailed, NotFound, PermissionDenied
from rest_framework.permissions import BasePermission
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from aggregation import helper_client
from aggregation.aggregators import LEADER
from aggregation.issuer import (
    RequestUnattested,
    TokenRefused,
    issuer_public_key,
    token_issue,
    token_request_authenticate,
)
from devices.credentials import device_authenticate
from devices.models import DeviceCredential
from devices.selectors import window_exists, window_open_get, windows_open
from pfs_base.api_bodies import StrictSerializer
from pfs_device.tokens import IssuerPublicKey
from pfs_device.wire import MAX_KEY_LENGTH

KEYWORD = "Device"


class DevicePrincipal:
    """``request.user`` for a device: authenticated, but no user of the dashboard or the analyst API."""

    is_authenticated = True
    is_anonymous = False
    is_active = True
    is_staff = False
    is_superuser = False

    def __init__(self, credential: DeviceCredential) -> None:
        self.credential = credential
        # Rate limits count per principal: a string, so it never equals an analyst's numeric id.
        self.pk = f"device:{credential.pk}"

    def get_username(self) -> str:
        return self.credential.device_id

    def __str__(self) -> str:
        return f"device {self.credential.device_id}"


class DeviceAuthentication(BaseAuthentication):
    """``Authorization: Device <id>:<secret>``, as device_register wrote them."""

    def authenticate(self, request: Request) -> tuple[DevicePrincipal, DeviceCredential] | None:
        parts = get_authorization_header(request).split()
        if not parts or parts[0].lower() != KEYWORD.lower().encode():
            return None
        try:
            device_id, secret = parts[1].decode("ascii").split(":", 1) if len(parts) == 2 else ("", "")
        except (UnicodeDecodeError, ValueError):
            device_id, secret = "", ""
        if not device_id or not secret:
            raise AuthenticationFailed("Malformed Device header: send 'Device <id>:<secret>'.")
        credential = device_authenticate(device_id=device_id, secret=secret)
        if credential is None:
            raise AuthenticationFailed("Unknown device, or a wrong secret.")
        return DevicePrincipal(credential), credential

    def authenticate_header(self, request: Request) -> str:
        return f'{KEYWORD} realm="devices"'


class IsDevice(BasePermission):
    message = "Only a registered device may call this endpoint."

    def has_permission(self, request: Request, view: APIView) -> bool:
        return isinstance(request.user, DevicePrincipal)


class DeviceView(APIView):
    authentication_classes = [DeviceAuthentication]
    permission_classes = [IsDevice]


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _integer_b64(value: int, size: int) -> str:
    return _b64(value.to_bytes(size, "big"))


def _issuer_json(issuer: IssuerPublicKey) -> dict:
    return {"modulus": _integer_b64(issuer.modulus, issuer.size), "exponent": issuer.exponent}


class DeviceTasks(DeviceView):
    """The open rounds of the device's fleet: each task, the snapshot to enforce, and the keys to seal with."""

    def get(self, request: Request) -> Response:
        credential: DeviceCredential = request.auth
        tasks = [
            {
                "task": open_window.window.task,
                # This collection's token key; the task commits to its digest (pfs_device.tokens).
                "issuer": _issuer_json(issuer_public_key(open_window.window.task_key)),
                "policy": {
                    "digest": open_window.window.snapshot.digest,
                    "content": open_window.window.snapshot.content,
                },
                "report_length": open_window.report_length,
                "closes_at": open_window.window.closes_at,
                # The device asks for its token and uploads at random times over this (pfs_device.sdk.pacing).
                "spread_seconds": settings.PFS_REPORT_SPREAD_SECONDS,
            }
            for open_window in windows_open(fleet=credential.fleet)
        ]
        return Response(
            {
                "device": credential.device_id,
                "fleet": credential.fleet.name,
                # What the device compares with the keys each aggregator serves at its own /hpke_config
                # (pfs_device.sdk.keys): it seals to those, and refuses a task whose keys differ. The
                # helper's is the one the helper serves the leader (aggregation.helper_client).
                "aggregators": {"leader": _b64(LEADER.public_key()), "helper": _b64(_helper_key())},
                "tasks": tasks,
            }
        )


class HelperUnreachable(APIException):
    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_detail = "The helper aggregator does not answer; try again later."
    default_code = "helper_unavailable"


def _helper_key() -> bytes:
    try:
        return helper_client.public_key()
    except helper_client.HelperUnavailable as error:
        raise HelperUnreachable() from error


class TokenRequest(StrictSerializer):
    collection_key = serializers.CharField(max_length=MAX_KEY_LENGTH)
    blinded = serializers.CharField(max_length=4096, help_text="The blinded token message, big-endian, base64.")

    def validate_blinded(self, value: str) -> int:
        try:
            return int.from_bytes(base64.b64decode(value.encode("ascii"), validate=True), "big")
        except (binascii.Error, UnicodeEncodeError):
            raise serializers.ValidationError("Not valid base64.") from None


class AttestedTokenRequest(TokenRequest):
    """A token request with its device's attestation and the device's signature over it (pfs_device.attestation).

    Both optional here so that their absence is refused by the issuer's check with its own code
    (attestation_missing, 403), not as a malformed body."""

    attestation = serializers.JSONField(required=False, help_text="The attestation authority's attestation.")
    device_signature = serializers.CharField(
        required=False, max_length=128, help_text="The device's Ed25519 signature over the request, base64."
    )

    def validate_device_signature(self, value: str) -> bytes:
        try:
            return base64.b64decode(value.encode("ascii"), validate=True)
        except (binascii.Error, UnicodeEncodeError):
            raise serializers.ValidationError("Not valid base64.") from None


class TokenConflict(APIException):
    status_code = status.HTTP_409_CONFLICT
    default_detail = "The issuer will not sign this request."
    default_code = "conflict"


class DeviceTokens(DeviceView):
    """One blind signature per attested device and collection; the issuer never sees the token it signs.

    Refused with 403 and nothing written: a request without an attestation (attestation_missing), with
    one the attestation authority did not sign (attestation_invalid), or not signed by the attested
    device's own key (device_signature_invalid)."""

    def post(self, request: Request) -> Response:
        credential: DeviceCredential = request.auth
        body = AttestedTokenRequest(data=request.data)
        body.is_valid(raise_exception=True)
        key = body.validated_data["collection_key"]
        if window_open_get(fleet=credential.fleet, collection_key=key) is None:
            if window_exists(fleet=credential.fleet, collection_key=key):
                raise TokenConflict("The collection is closed: it takes no more reports.", code="collection_closed")
            raise NotFound("Your fleet has no collection with this key.", code="unknown_collection")
        issuer = issuer_public_key(key)
        blinded = body.validated_data["blinded"]
        if not 0 < blinded < issuer.modulus:
            raise serializers.ValidationError({"blinded": ["Must be an integer in (0, n) for the issuer's modulus n."]})
        try:
            # The issuer counts attested devices, not the leader's credentials (issue 29, requirement 1).
            identity = token_request_authenticate(
                attestation=body.validated_data.get("attestation"),
                device_signature=body.validated_data.get("device_signature"),
                collection_key=key,
                blinded=blinded,
            )
        except RequestUnattested as refused:
            raise PermissionDenied(str(refused), code=refused.code) from refused
        try:
            signature = token_issue(collection_key=key, device_identity=identity, blinded=blinded)
        except TokenRefused as refused:
            raise TokenConflict(str(refused), code="token_already_issued") from refused
        return Response({"blind_signature": _integer_b64(signature, issuer.size)}, status=status.HTTP_201_CREATED)
