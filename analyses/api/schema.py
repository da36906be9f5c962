"""The OpenAPI description's shared parts: the error format, error responses, common parameters.

``errors(404, 409)`` gives an operation's documented error answers in the one format of
pfs_base.api_errors; every operation also documents 400 (a NUL character anywhere is refused, and
Django refuses some requests before a view runs), 401 and 429, which any of them may answer.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension, OpenApiViewExtension
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_view,
    inline_serializer,
)
from rest_framework import serializers

from analyses.api.serializers import RoundSerializer
from privacy.mechanisms import MECHANISMS
from privacy.shuffling import METHODS

ErrorSerializer = inline_serializer(
    name="Error",
    fields={
        "detail": serializers.CharField(help_text="One sentence for a person."),
        "code": serializers.CharField(
            help_text="For a program: invalid, not_found, permission_denied, not_authenticated, "
            "authentication_failed, conflict, throttled, payload_too_large, idempotency_conflict, "
            "unsupported_media_type, parse_error, method_not_allowed, server_error."
        ),
        "fields": serializers.DictField(
            child=serializers.ListField(child=serializers.CharField()),
            help_text="Messages by field or recipe key (a dotted JSON path); non_field_errors for the rest; "
            "empty when the error is not about fields.",
        ),
    },
)

_MEANING = {
    400: "Invalid input: messages by field in `fields`.",
    401: "Not signed in, or a bad token.",
    403: "Not allowed for this user.",
    404: "No such object, or one the user may not see (for a list: no such page).",
    409: "The object's state does not allow the action.",
    413: "The request body is over the API's limit.",
    415: "The body is not JSON.",
    422: "The Idempotency-Key was already used with another request.",
    429: "Too many requests: wait for Retry-After seconds.",
    503: "A service this answer needs is unavailable here (its key is not configured, or it does not answer).",
}


def errors(*statuses: int) -> dict[int, OpenApiResponse]:
    """Error responses for an operation: the given statuses, plus 400, 401 and 429 for every one."""
    return {
        status: OpenApiResponse(response=ErrorSerializer, description=_MEANING[status])
        for status in sorted({*statuses, 400, 401, 429})
    }


def body_errors(*statuses: int) -> dict[int, OpenApiResponse]:
    """errors() for an operation that reads a JSON body: it may also answer 413 and 415."""
    return errors(*statuses, 413, 415)


IDEMPOTENCY_KEY = OpenApiParameter(
    name="Idempotency-Key",
    type=str,
    location=OpenApiParameter.HEADER,
    required=False,
    description="1 to 255 printable ASCII characters. A repeat with the same key and body gets the first "
    "answer again (header Idempotent-Replayed: true) and starts nothing; another body under the key is a 422.",
)

JSON_OBJECT = OpenApiTypes.OBJECT


def status_parameter(choices: list[str], what: str) -> OpenApiParameter:
    return OpenApiParameter(
        name="status", type=str, enum=choices, required=False, description=f"Only {what} with this status."
    )


# ---------------------------------------------------------------- views written without annotations
#
# Described here rather than in their modules: the calculators, the budget reports and the recipe
# check are plain APIViews that return a service's dict. Each extension replaces the view, for the
# schema only, with a subclass carrying the description; `optional` keeps a view that is not
# there (yet) from being an error.


def _number(name: str, description: str, *, required: bool = True) -> OpenApiParameter:
    return OpenApiParameter(name, float, required=required, description=description)


def _text(name: str, description: str, *, required: bool = False, enum: list[str] | None = None) -> OpenApiParameter:
    return OpenApiParameter(name, str, required=required, enum=enum, description=description)


_METHOD = _text("method", "The amplification bound.", enum=list(METHODS))
_EPSILON0 = _number("epsilon0", "Local epsilon of each report.")
_DELTA = _number("delta", "Delta, strictly between 0 and 1.")

AmplifySerializer = inline_serializer(
    name="PrivacyAmplify",
    fields={
        "epsilon0": serializers.FloatField(),
        "n": serializers.IntegerField(),
        "delta": serializers.FloatField(),
        "method": serializers.ChoiceField(choices=list(METHODS)),
        "epsilon": serializers.FloatField(help_text="Aggregate epsilon after shuffling."),
    },
)
MinCohortSerializer = inline_serializer(
    name="PrivacyMinCohort",
    fields={
        "epsilon0": serializers.FloatField(),
        "epsilon": serializers.FloatField(),
        "delta": serializers.FloatField(),
        "method": serializers.ChoiceField(choices=list(METHODS)),
        "min_cohort": serializers.IntegerField(),
    },
)
GaussianSerializer = inline_serializer(
    name="PrivacyGaussian",
    fields={
        "epsilon": serializers.FloatField(),
        "delta": serializers.FloatField(),
        "sensitivity": serializers.FloatField(),
        "classical": serializers.BooleanField(),
        "discrete": serializers.BooleanField(),
        "sigma": serializers.FloatField(),
    },
)
CurveSerializer = inline_serializer(
    name="PrivacyCurve",
    fields={
        "epsilon0": serializers.FloatField(),
        "delta": serializers.FloatField(),
        "method": serializers.ChoiceField(choices=list(METHODS)),
        "n_min": serializers.IntegerField(),
        "n_max": serializers.IntegerField(),
        "points": inline_serializer(
            name="PrivacyCurvePoint",
            fields={
                "n": serializers.IntegerField(),
                "epsilon": serializers.FloatField(allow_null=True, help_text="null: no bound at this n."),
            },
            many=True,
        ),
    },
)

_ACCOUNT = serializers.FloatField(allow_null=True, help_text="null: this accountant gives no bound here.")
ComposeSerializer = inline_serializer(
    name="PrivacyCompose",
    fields={
        "epsilon": serializers.FloatField(help_text="The smallest epsilon of the accountants."),
        "accountant": serializers.ChoiceField(choices=["pld", "renyi", "advanced", "basic"]),
        "accountants": inline_serializer(
            name="PrivacyComposeAccountants",
            fields={"pld": _ACCOUNT, "renyi": _ACCOUNT, "advanced": _ACCOUNT, "basic": _ACCOUNT},
        ),
        "rounds": serializers.IntegerField(),
        "delta": serializers.FloatField(),
        "release": serializers.ChoiceField(choices=["recipe", "gaussian", "laplace"]),
        "mechanism": serializers.CharField(required=False),
        "epsilon0": serializers.FloatField(required=False),
        "n": serializers.IntegerField(required=False),
        "method": serializers.CharField(
            required=False, help_text="The bound devices enforce for the mechanism: stronger-2022 or clones-2020."
        ),
        "gaussian_sigma": serializers.FloatField(required=False),
        "laplace_scale": serializers.FloatField(required=False),
        "sensitivity": serializers.IntegerField(required=False),
        "pld_interval": serializers.FloatField(allow_null=True, help_text="The PLD's grid step."),
        "pld_rounding": serializers.FloatField(
            allow_null=True, help_text="How far above the exact composition the PLD may be (every loss rounded up)."
        ),
    },
)

_DESCRIBED: dict[str, dict[str, Any]] = {
    "analyses.api.views.TokenObtain": {
        "post": extend_schema(
            summary="Sign in for a token",
            description="Send `Authorization: Token <token>` with every later request.",
            responses={
                200: inline_serializer(name="AuthToken", fields={"token": serializers.CharField()}),
                **body_errors(400),
            },
        )
    },
    "analyses.api.calculators.PrivacyAmplify": {
        "get": extend_schema(
            summary="Aggregate epsilon of n shuffled reports",
            parameters=[_EPSILON0, _number("n", "Reports in the cohort, a whole number."), _DELTA, _METHOD],
            responses={200: AmplifySerializer, **errors(400)},
        )
    },
    "analyses.api.calculators.PrivacyMinCohort": {
        "get": extend_schema(
            summary="Smallest cohort that reaches an aggregate epsilon",
            parameters=[_EPSILON0, _number("epsilon", "The aggregate epsilon wanted."), _DELTA, _METHOD],
            responses={200: MinCohortSerializer, **errors(400)},
        )
    },
    "analyses.api.calculators.PrivacyGaussian": {
        "get": extend_schema(
            summary="Gaussian noise scale for (epsilon, delta)",
            parameters=[
                _number("epsilon", "Epsilon of the Gaussian mechanism."),
                _DELTA,
                _number("sensitivity", "L2 sensitivity."),
                _text("classical", "true: the classical bound (epsilon below 1) instead of the analytic one."),
                _text(
                    "discrete",
                    "true: the discrete Gaussian's exact calibration (what the aggregators add), for "
                    "sensitivity 1 or sqrt(2).",
                ),
            ],
            responses={200: GaussianSerializer, **errors(400)},
        )
    },
    "analyses.api.calculators.PrivacyCompose": {
        "get": extend_schema(
            summary="Epsilon of rounds composed, by every accountant",
            description=(
                "One release repeated `rounds` times (adaptively), at a total `delta`: a recipe's round "
                "(`mechanism`, `epsilon0`, `n`) or aggregator noise (`gaussian_sigma` or `laplace_scale`, with "
                "`sensitivity`). `epsilon` is the smallest of the privacy-loss-distribution (pld), Renyi, "
                "advanced and basic accountants' bounds; each is an upper bound (docs/privacy.md)."
            ),
            parameters=[
                _number("rounds", "Rounds composed, a whole number from 1 to 10,000."),
                _number("delta", "Total delta, from 1e-12 to below 1."),
                _text(
                    "mechanism",
                    "A recipe's mechanism: the clone pair of the bound devices enforce for it.",
                    enum=sorted(MECHANISMS),
                ),
                _number("epsilon0", "The recipe's local epsilon, replacement model.", required=False),
                _number("n", "Reports summed each round, at most 1e8.", required=False),
                _number("gaussian_sigma", "Sigma of each aggregator's discrete Gaussian noise.", required=False),
                _number("laplace_scale", "Scale b of each aggregator's discrete Laplace noise.", required=False),
                _number(
                    "sensitivity",
                    "Aggregator noise only: histogram coordinates one report's change moves by 1 (default 2, a "
                    "report moving between two buckets: L1 sensitivity 2, L2 sqrt(2)).",
                    required=False,
                ),
            ],
            responses={200: ComposeSerializer, **errors(400)},
        )
    },
    "analyses.api.calculators.PrivacyCurve": {
        "get": extend_schema(
            summary="Aggregate epsilon against the cohort size",
            parameters=[
                _EPSILON0,
                _DELTA,
                _METHOD,
                _number("points", "How many cohort sizes, spaced geometrically.", required=False),
                _number("n_min", "Smallest cohort size.", required=False),
                _number("n_max", "Largest cohort size.", required=False),
            ],
            responses={200: CurveSerializer, **errors(400)},
        )
    },
    "analyses.api.views.RecipeValidate": {
        "post": extend_schema(
            summary="Check a recipe without storing it",
            description="The recipe's verdict and figures (budget cost, what would remain, expected error); "
            "a bad recipe is a 400 keyed by recipe key. Creates nothing.",
            request=JSON_OBJECT,
            responses={200: JSON_OBJECT, **body_errors(400, 404)},
        )
    },
    "analyses.api.budget.AnalysisBudget": {
        "get": extend_schema(summary="An analysis's budget burn-down", responses={200: JSON_OBJECT, **errors(404)})
    },
    "analyses.api.budget.AnalysisAudit": {
        "get": extend_schema(
            summary="An analysis's rounds and adaptive runs, for audit",
            parameters=[OpenApiParameter("page", int, required=False, description="Page number.")],
            responses={200: JSON_OBJECT, **errors(404)},
        )
    },
    "analyses.api.budget.AnalysisPolicy": {
        "get": extend_schema(summary="An analysis's policy", responses={200: JSON_OBJECT, **errors(404)})
    },
    "analyses.api.budget.ReleaseCompare": {
        "get": extend_schema(
            summary="Two releases compared",
            parameters=[
                OpenApiParameter("a", int, required=True, description="A released round's id."),
                OpenApiParameter("b", int, required=True, description="Another released round's id."),
            ],
            responses={200: JSON_OBJECT, **errors(400, 404)},
        )
    },
    # Real devices (docs/devices-sdk.md): they authenticate as devices, never with a user's token.
    "devices.api.DeviceTasks": {
        "get": extend_schema(
            summary="A device's open tasks",
            description="The open rounds of the device's fleet: each task, the policy snapshot to enforce, and "
            "the keys to seal shares with. Authorization: Device <id>:<secret>.",
            responses={
                200: inline_serializer(
                    name="DeviceTasks",
                    fields={
                        "device": serializers.CharField(),
                        "fleet": serializers.CharField(),
                        "issuer": serializers.DictField(help_text="modulus (base64) and exponent of the token issuer."),
                        "aggregators": serializers.DictField(
                            child=serializers.CharField(), help_text="leader and helper HPKE public keys, base64."
                        ),
                        "tasks": serializers.ListField(child=serializers.DictField()),
                    },
                ),
                **errors(403),
            },
        )
    },
    "devices.api.DeviceTokens": {
        "post": extend_schema(
            summary="A blind signature for one collection's token",
            request=inline_serializer(
                name="DeviceTokenRequest",
                fields={
                    "collection_key": serializers.CharField(),
                    "blinded": serializers.CharField(help_text="The blinded token message, big-endian, base64."),
                    "attestation": serializers.DictField(
                        help_text="The attestation authority's attestation of the device's key "
                        "(device_key, signature, optionally expires_at)."
                    ),
                    "device_signature": serializers.CharField(
                        help_text="The device's Ed25519 signature over the request, base64 (pfs_device.attestation)."
                    ),
                },
            ),
            responses={
                201: inline_serializer(
                    name="DeviceTokenSignature", fields={"blind_signature": serializers.CharField()}
                ),
                **body_errors(400, 403, 404, 409),
            },
        )
    },
    "aggregation.api.ReportUpload": {
        "post": extend_schema(
            summary="Upload one report",
            description="Anonymous: the token, not the device, vouches for the report. The body is the sealed "
            "report (docs/devices-sdk.md). The upload is stored as received (202); both aggregators verify it "
            "later, in bulk, and count a rejected report by reason, so a device never learns whether its own "
            "report was accepted.",
            auth=[],
            request=JSON_OBJECT,
            responses={
                202: inline_serializer(name="ReportReceived", fields={"received": serializers.BooleanField()}),
                **errors(400, 409, 413, 429),
            },
        )
    },
    "aggregation.api.IssuedCount": {
        "get": extend_schema(
            summary="The issuer's signed count of a collection's tokens",
            description="Anonymous: how many tokens the token issuer issued for the collection, signed with its "
            "Ed25519 statement key (aggregation.statements). The helper verifies the copy the leader relays.",
            auth=[],
            responses={
                200: inline_serializer(
                    name="IssuedStatement",
                    fields={
                        "collection": serializers.CharField(),
                        "issued": serializers.IntegerField(),
                        "at": serializers.DateTimeField(),
                        "signature": serializers.CharField(help_text="Ed25519, base64."),
                    },
                ),
                **errors(404, 503),
            },
        )
    },
    "analyses.api.device_rounds.RoundClose": {
        "post": extend_schema(
            summary="Close a round on real devices, now or at a time",
            request=inline_serializer(
                name="RoundCloseRequest",
                fields={"at": serializers.DateTimeField(required=False, help_text="When; absent or past: now.")},
            ),
            responses={202: RoundSerializer, **body_errors(400, 404, 409)},
        )
    },
}


def _described(target: str, methods: dict[str, Any]) -> type[OpenApiViewExtension]:
    class Described(OpenApiViewExtension):
        target_class = target
        optional = True
        priority = 1  # over drf-spectacular's own extension for ObtainAuthToken and its subclasses

        def view_replacement(self) -> type:
            return extend_schema_view(**methods)(type(self.target.__name__, (self.target,), {}))

    return Described


DESCRIBED_VIEWS = [_described(target, methods) for target, methods in _DESCRIBED.items()]


class DeviceAuthenticationScheme(OpenApiAuthenticationExtension):
    """`Authorization: Device <id>:<secret>`, as a device was registered with."""

    target_class = "devices.api.DeviceAuthentication"
    name = "deviceAuth"
    optional = True

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {"type": "apiKey", "in": "header", "name": "Authorization", "description": "Device <id>:<secret>"}
