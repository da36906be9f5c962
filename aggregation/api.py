"""The leader's upload endpoint, where Django serves it: the answers of aggregation.intake.

    POST /api/device/reports/    body: a report in pfs_device.wire's JSON

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

from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from aggregation import intake


class ReportUpload(APIView):
    authentication_classes: list = []  # anonymous by design: see the module's docstring
    permission_classes = [AllowAny]
    parser_classes: list = []  # the body is read raw: its size is checked before it is parsed
    throttle_classes: list = []  # intake counts the ``uploads`` rate itself, as on the fast path
    throttle_scope = "uploads"

    def post(self, request: Request) -> Response:
        answer = intake.upload_answer(request.META, lambda _size: request.body)
        return Response(answer.body, status=answer.status, headers=answer.headers)
