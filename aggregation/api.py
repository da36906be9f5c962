"""The leader's upload endpoint: an anonymous device report, checked by both aggregators.

    POST /api/device/reports/    body: a report in aggregation.wire's JSON

No credential: the blind-signed token in the report admits it, so an upload cannot be linked to
the device that obtained the token. Answers: 201 accepted; 400 malformed, or rejected by an
aggregator (``code`` is the reason, aggregation.reports); 409 its token was already used, or the
collection is closed; 413 larger than any honest report of the collection; 429 over the upload
rate of its address. Every rejection in a collection that exists is counted (``rejections``).
"""

from __future__ import annotations

import json

from rest_framework import status
from rest_framework.exceptions import APIException, ValidationError
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from aggregation import reports, wire

# Above any honest report of any collection this server runs (pfs_web's PFS_API_MAX_BODY_BYTES
# refuses a larger body before a view runs); a collection's own limit is usually far lower.
HARD_LIMIT = 1_048_576
# Rejected for what the report is, or for the collection's state: sending it again cannot help.
CONFLICTS = {reports.TOKEN_REUSED, reports.COLLECTION_CLOSED}


class PayloadTooLarge(APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = "The report is larger than any honest report of its collection."
    default_code = "payload_too_large"


class ReportRejected(APIException):
    status_code = status.HTTP_400_BAD_REQUEST
    default_detail = "The aggregators rejected the report."
    default_code = "rejected"


REASONS = {
    reports.UNKNOWN_COLLECTION: "No collection has this key.",
    reports.COLLECTION_CLOSED: "The collection is closed: it takes no more reports.",
    reports.TOKEN_INVALID: "The token is not the issuer's signature for this collection.",
    reports.TOKEN_REUSED: "The token was already used: one report per token.",
    reports.SHARE_UNOPENED: "A share does not open with its aggregator's key for this collection.",
    reports.SHARE_MALFORMED: "A share has the wrong length or a residue out of range.",
    reports.OVER_WEIGHT: "The report carries more ones than any honest report of this recipe.",
}


class ReportUpload(APIView):
    authentication_classes: list = []  # anonymous by design: see the module's docstring
    permission_classes = [AllowAny]
    parser_classes: list = []  # the body is read raw: its size is checked before it is parsed
    throttle_scope = "uploads"

    def post(self, request: Request) -> Response:
        body = request.body
        if len(body) > HARD_LIMIT:
            raise PayloadTooLarge(f"The body is {len(body):,} bytes; at most {HARD_LIMIT:,} are read.")
        try:
            data = json.loads(body)
        except (UnicodeDecodeError, ValueError):
            raise ValidationError({"non_field_errors": ["The body is not JSON."]}) from None
        key = wire.collection_key_of(data)
        rules = reports.collection_rules_get(collection_key=key) if key else None
        limit = reports.upload_body_limit(rules) if rules is not None else None
        if limit is not None and len(body) > limit:
            reports.report_refuse(collection_key=key, reason=reports.REPORT_TOO_LARGE)
            raise PayloadTooLarge(
                f"The body is {len(body):,} bytes; a report of this collection has at most {limit:,}."
            )
        try:
            report = wire.report_parse(data)
        except wire.WireError as malformed:
            if key:
                reports.report_refuse(collection_key=key, reason=reports.REPORT_MALFORMED)
            raise ValidationError(malformed.fields) from None
        outcome = reports.report_submit(report, rules=rules)
        if not outcome.accepted:
            rejected = ReportRejected(
                REASONS.get(outcome.reason, "The aggregators rejected the report."), outcome.reason
            )
            if outcome.reason in CONFLICTS:
                rejected.status_code = status.HTTP_409_CONFLICT
            raise rejected
        return Response({"accepted": True}, status=status.HTTP_201_CREATED)
