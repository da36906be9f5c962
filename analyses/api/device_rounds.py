"""The analyst's side of a round on real devices: close its collection window, or set its deadline.

POST /api/rounds/<pk>/close/              close now: reports stop, the round is aggregated
POST /api/rounds/<pk>/close/ {"at": T}    close at T (ISO 8601 with offset; the reaper closes it)
"""

from __future__ import annotations

from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from analyses.api.serializers import RoundSerializer
from analyses.device_rounds import round_close
from analyses.reads import selectors
from pfs_base.api_bodies import StrictSerializer
from pfs_base.api_errors import ConflictError
from pfs_base.errors import Conflict


class CloseRequest(StrictSerializer):
    at = serializers.DateTimeField(required=False, help_text="When to close; absent or past: now.")


class RoundClose(APIView):
    def post(self, request: Request, pk: int) -> Response:
        round_ = selectors.round_get(user=request.user, pk=pk)
        body = CloseRequest(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            round_ = round_close(round_=round_, user=request.user, at=body.validated_data.get("at"))
        except Conflict as conflict:
            raise ConflictError(str(conflict)) from conflict
        return Response(RoundSerializer(round_).data, status=status.HTTP_202_ACCEPTED)
