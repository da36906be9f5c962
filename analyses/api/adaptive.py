"""REST API for adaptive runs (docs/adaptive.md): start, list, poll, pause, edit the next round, resume.

Thin views over analyses.adaptive, with the conventions of analyses.api.views: ValidationFailed is
a 400 keyed by field, an action the run's state does not allow (Conflict) a 409, any other
NotAllowed a 403, and a run of another analyst's analysis a 404 (pfs_base.api_errors).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import QuerySet
from django.urls import reverse
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.exceptions import ValidationError
from rest_framework.generics import GenericAPIView
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from analyses.adaptive.chain import adaptive_next_edit, adaptive_pause, adaptive_resume, adaptive_start
from analyses.adaptive.presenters import adaptive_output
from analyses.api.idempotent import idempotent_response
from analyses.api.schema import IDEMPOTENCY_KEY, JSON_OBJECT, body_errors, errors, status_parameter
from analyses.api.serializers import AdaptiveRunSerializer, RoundSerializer
from analyses.models import AdaptiveRun
from analyses.reads import selectors
from analyses.reads.selectors import adaptive_run_get, adaptive_run_list
from pfs_base.api_parsers import JSONParser

_DATETIME = serializers.DateTimeField()


def adaptive_run_json(run: AdaptiveRun) -> dict[str, Any]:
    """adaptive_output, with the run's dates and its current round (status and progress) if any."""
    output = adaptive_output(run)
    output["url"] = reverse("api-adaptive-run-detail", kwargs={"pk": run.pk})
    output["created_at"] = _DATETIME.to_representation(run.created_at)
    output["finished_at"] = _DATETIME.to_representation(run.finished_at) if run.finished_at else None
    round_ = run.current_round
    output["current_round"] = RoundSerializer(round_).data if round_ is not None else None
    return output


def _hidden_analyses(user: AbstractBaseUser, spec: Any) -> dict[str, list[str]]:
    """Analyses named by the spec that the user may not see, reported as if they did not exist."""
    if not isinstance(spec, dict):
        return {}
    named = {"analysis": spec.get("analysis")}
    if isinstance(spec.get("baseline"), dict):
        named["baseline.analysis"] = spec["baseline"].get("analysis")
    visible = selectors.analysis_list(user=user)
    return {
        key: [f"No analysis {identifier!r}."]
        for key, identifier in named.items()
        if isinstance(identifier, str) and identifier and not visible.filter(identifier=identifier).exists()
    }


class AdaptiveRunList(GenericAPIView):
    parser_classes = [JSONParser]
    serializer_class = AdaptiveRunSerializer  # for the schema; adaptive_run_json shapes the output

    @property
    def throttle_scope(self) -> str | None:
        # Starting a run starts rounds; listing runs is an ordinary read.
        return "round_start" if self.request.method == "POST" else None

    def get_queryset(self) -> QuerySet[AdaptiveRun]:
        runs = adaptive_run_list(user=self.request.user)
        params = self.request.query_params
        if params.get("status") and params["status"] not in AdaptiveRun.Status.values:
            raise ValidationError({"status": [f"Must be one of {', '.join(AdaptiveRun.Status.values)}."]})
        if params.get("status"):
            runs = runs.filter(status=params["status"])
        if params.get("analysis"):
            runs = runs.filter(analysis__identifier=params["analysis"])
        return runs

    @extend_schema(
        summary="Your adaptive runs, newest first",
        parameters=[
            OpenApiParameter("analysis", str, required=False, description="Only runs of this analysis (identifier)."),
            status_parameter(AdaptiveRun.Status.values, "runs"),
        ],
        responses={200: AdaptiveRunSerializer(many=True), **errors(400, 404)},
    )
    def get(self, request: Request) -> Response:
        page = self.paginate_queryset(self.get_queryset())
        return self.get_paginated_response([adaptive_run_json(run) for run in page])

    @extend_schema(
        summary="Start an adaptive run",
        description="The body is the run's spec (docs/adaptive.md). Its whole budget plan is checked before "
        "round 1 starts. Send an Idempotency-Key to make a retry safe.",
        request=JSON_OBJECT,
        parameters=[IDEMPOTENCY_KEY],
        responses={201: AdaptiveRunSerializer, **body_errors(400, 403, 422)},
    )
    def post(self, request: Request) -> Response:
        hidden = _hidden_analyses(request.user, request.data)
        if hidden:
            raise ValidationError(hidden)

        def start() -> tuple[int, Any, dict[str, str]]:
            output = adaptive_run_json(adaptive_start(spec=request.data, user=request.user))
            return status.HTTP_201_CREATED, output, {"Location": output["url"]}

        return idempotent_response(request, endpoint="adaptive-run-start", respond=start)


@extend_schema(summary="An adaptive run", responses={200: AdaptiveRunSerializer, **errors(404)})
class AdaptiveRunDetail(APIView):
    def get(self, request: Request, pk: int) -> Response:
        return Response(adaptive_run_json(adaptive_run_get(user=request.user, pk=pk)))


@extend_schema(
    summary="Pause a running run",
    description="The current round finishes; the next one then waits in next_recipe. 409 unless running.",
    request=None,
    responses={200: AdaptiveRunSerializer, **errors(403, 404, 409)},
)
class AdaptiveRunPause(APIView):
    def post(self, request: Request, pk: int) -> Response:
        run = adaptive_run_get(user=request.user, pk=pk)
        return _steer(lambda: adaptive_pause(run=run, user=request.user))


@extend_schema(
    summary="Resume a paused run",
    description="Sends the waiting round, or lets the current one continue. 409 unless paused.",
    request=None,
    responses={200: AdaptiveRunSerializer, **errors(403, 404, 409)},
)
class AdaptiveRunResume(APIView):
    def post(self, request: Request, pk: int) -> Response:
        run = adaptive_run_get(user=request.user, pk=pk)
        return _steer(lambda: adaptive_resume(run=run, user=request.user))


class AdaptiveRunNextRecipe(APIView):
    parser_classes = [JSONParser]

    @extend_schema(
        summary="Replace the waiting round's recipe",
        description="The body is the recipe (docs/formats.md); its privacy and its question must stay the "
        "planned ones. 409 unless paused with a round waiting.",
        request=JSON_OBJECT,
        responses={200: AdaptiveRunSerializer, **body_errors(400, 403, 404, 409)},
    )
    def put(self, request: Request, pk: int) -> Response:
        run = adaptive_run_get(user=request.user, pk=pk)
        return _steer(lambda: adaptive_next_edit(run=run, recipe=request.data, user=request.user))


def _steer(action: Callable[[], AdaptiveRun]) -> Response:
    run = action()
    # The services return the run re-read from the database; read it once more with its relations.
    return Response(
        adaptive_run_json(AdaptiveRun.objects.select_related("analysis", "current_round__recipe").get(pk=run.pk))
    )
