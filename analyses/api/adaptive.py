"""REST API for adaptive runs (docs/adaptive.md): start, list, poll, pause, edit the next round, resume.

Thin views over analyses.adaptive, with the conventions of analyses.api.views: ValidationFailed is
a 400 keyed by field, NotAllowed a 403, and a run of another analyst's analysis a 404.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import QuerySet
from django.urls import reverse
from rest_framework import serializers, status
from rest_framework.exceptions import PermissionDenied, ValidationError
from rest_framework.generics import GenericAPIView
from rest_framework.parsers import JSONParser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from analyses import selectors
from analyses.adaptive import adaptive_next_edit, adaptive_output, adaptive_pause, adaptive_resume, adaptive_start
from analyses.api.serializers import RoundSerializer
from analyses.errors import NotAllowed, ValidationFailed
from analyses.models import AdaptiveRun
from analyses.selectors import adaptive_run_get, adaptive_run_list

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

    def get(self, request: Request) -> Response:
        page = self.paginate_queryset(self.get_queryset())
        return self.get_paginated_response([adaptive_run_json(run) for run in page])

    def post(self, request: Request) -> Response:
        hidden = _hidden_analyses(request.user, request.data)
        if hidden:
            raise ValidationError(hidden)
        try:
            run = adaptive_start(spec=request.data, user=request.user)
        except ValidationFailed as invalid:
            raise ValidationError(invalid.errors) from invalid
        except NotAllowed as refusal:
            raise PermissionDenied(str(refusal)) from refusal
        output = adaptive_run_json(run)
        return Response(output, status=status.HTTP_201_CREATED, headers={"Location": output["url"]})


class AdaptiveRunDetail(APIView):
    def get(self, request: Request, pk: int) -> Response:
        return Response(adaptive_run_json(adaptive_run_get(user=request.user, pk=pk)))


class AdaptiveRunPause(APIView):
    def post(self, request: Request, pk: int) -> Response:
        run = adaptive_run_get(user=request.user, pk=pk)
        return _steer(lambda: adaptive_pause(run=run, user=request.user))


class AdaptiveRunResume(APIView):
    def post(self, request: Request, pk: int) -> Response:
        run = adaptive_run_get(user=request.user, pk=pk)
        return _steer(lambda: adaptive_resume(run=run, user=request.user))


class AdaptiveRunNextRecipe(APIView):
    parser_classes = [JSONParser]

    def put(self, request: Request, pk: int) -> Response:
        run = adaptive_run_get(user=request.user, pk=pk)
        return _steer(lambda: adaptive_next_edit(run=run, recipe=request.data, user=request.user))


def _steer(action: Callable[[], AdaptiveRun]) -> Response:
    try:
        run = action()
    except ValidationFailed as invalid:
        raise ValidationError(invalid.errors) from invalid
    except NotAllowed as refusal:
        raise PermissionDenied(str(refusal)) from refusal
    # The services return the run re-read from the database; read it once more with its relations.
    return Response(
        adaptive_run_json(AdaptiveRun.objects.select_related("analysis", "current_round__recipe").get(pk=run.pk))
    )
