"""REST API, read-only: budget burn-down, audit, policy of an analysis, and two releases compared.

The same analyses.reads.analysis_reads functions as the dashboard pages. An analysis or round the user
may not read is a 404; bad or missing round ids, or a round not released, a 400 by parameter.
"""

from __future__ import annotations

from rest_framework.exceptions import ValidationError
from rest_framework.generics import GenericAPIView
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from analyses.reads import analysis_reads, selectors
from pfs_base.errors import ValidationFailed


class AnalysisBudget(APIView):
    def get(self, request: Request, identifier: str) -> Response:
        analysis = selectors.analysis_get(user=request.user, identifier=identifier)
        return Response(analysis_reads.budget_burndown(analysis))


class AnalysisAudit(GenericAPIView):
    """Rounds newest first, paginated (``results``, ``next``); the adaptive runs ride along on every page."""

    def get(self, request: Request, identifier: str) -> Response:
        analysis = selectors.analysis_get(user=request.user, identifier=identifier)
        runs = analysis_reads.audit_adaptive_runs(analysis)
        starters = analysis_reads.adaptive_round_starters(runs)
        page = self.paginate_queryset(analysis_reads.audit_rounds(analysis))
        response = self.get_paginated_response([analysis_reads.audit_row(round_, starters) for round_ in page])
        response.data["adaptive_runs"] = [analysis_reads.adaptive_run_summary(run, starters) for run in runs]
        return response


class AnalysisPolicy(APIView):
    def get(self, request: Request, identifier: str) -> Response:
        analysis = selectors.analysis_get(user=request.user, identifier=identifier)
        return Response(analysis_reads.policy_summary(analysis))


class ReleaseCompare(APIView):
    def get(self, request: Request) -> Response:
        try:
            a, b = analysis_reads.compare_ids(request.query_params)
            return Response(analysis_reads.release_compare(user=request.user, a=a, b=b))
        except ValidationFailed as invalid:
            raise ValidationError(invalid.errors) from invalid
