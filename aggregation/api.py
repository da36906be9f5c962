"""The leader's upload endpoint, where Django serves it (the answers of aggregation.intake), and the
token issuer's public statement of how many tokens it issued for a collection.

    POST /api/device/reports/                          body: a report in pfs_device.wire's JSON
    GET  /api/issuer/collections/<collection>/issued   aggregation.statements.IssuedStatement, signed

No credential: the blind-signed token in the report admits it, so an upload cannot be linked to
the device that obtained the token. Answers: 202 received (verified later, in bulk: a report the
aggregators reject then is counted in ``rejections``, not answered); 400 not a report (``invalid``,
with fields) or ``unknown_collection``; 409 ``collection_closed``; 413 larger than any honest
report of the collection; 429 over the upload rate of its address.

Under gunicorn, pfs_web.wsgi sends this path to aggregation.intake before Django runs; this view
gives the same answers where Django serves the request itself (the test client, the live test
server), and describes the endpoint in the OpenAPI schema.
"""

from __future__ import annotations

from rest_framework.exceptions import NotFound
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from aggregation import intake
from aggregation.issuer import issued_statement
from aggregation.keys import KeysUnavailable
from aggregation.models import TokenIssuerKey
from pfs_base.api_errors import error_body


class ReportUpload(APIView):
    authentication_classes: list = []  # anonymous by design: see the module's docstring
    permission_classes = [AllowAny]
    parser_classes: list = []  # the body is read raw: its size is checked before it is parsed
    throttle_classes: list = []  # intake counts the ``uploads`` rate itself, as on the fast path
    throttle_scope = "uploads"

    def post(self, request: Request) -> Response:
        answer = intake.upload_answer(request.META, lambda _size: request.body)
        return Response(answer.body, status=answer.status, headers=answer.headers)


class IssuedCount(APIView):
    """The issuer's signed count of the tokens it issued for a collection: anyone may read it, and the
    helper checks the copy the leader relays (aggregation.statements). 404 for a collection the issuer
    has no key for; 503 where it holds no statement key."""

    authentication_classes: list = []
    permission_classes = [AllowAny]

    def get(self, request: Request, collection_key: str) -> Response:
        if not TokenIssuerKey.objects.filter(collection_key=collection_key).exists():
            raise NotFound("The issuer has no collection with this key.", code="unknown_collection")
        try:
            statement = issued_statement(collection_key)
        except KeysUnavailable as error:
            return Response(error_body(str(error), "issuer_unavailable"), status=503)
        return Response(statement.as_json())
