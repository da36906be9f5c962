"""REST API: thin views that validate through services and shape the output."""

from __future__ import annotations

from rest_framework import status
from rest_framework.exceptions import NotFound, PermissionDenied, ValidationError
from rest_framework.generics import ListAPIView, RetrieveAPIView
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from analyses import selectors, services
from analyses.api.serializers import AnalysisSerializer, RecipeSerializer, RoundSerializer
from analyses.errors import NotAllowed, ValidationFailed
from analyses.models import Round


class AnalysisList(ListAPIView):
    serializer_class = AnalysisSerializer

    def get_queryset(self):
        return selectors.analysis_list(user=self.request.user).prefetch_related("field_policies")


class AnalysisDetail(RetrieveAPIView):
    serializer_class = AnalysisSerializer

    def get_object(self):
        return selectors.analysis_get(user=self.request.user, identifier=self.kwargs["identifier"])


class RecipeCreate(APIView):
    def post(self, request: Request, identifier: str) -> Response:
        analysis = selectors.analysis_get(user=request.user, identifier=identifier)
        try:
            recipe = services.recipe_create(analysis=analysis, content=request.data, user=request.user)
        except ValidationFailed as invalid:
            raise ValidationError(invalid.errors) from invalid
        return Response(RecipeSerializer(recipe).data, status=status.HTTP_201_CREATED)


class RecipeDryRun(APIView):
    """What the devices would do with a recipe, without starting a round or spending anything."""

    def post(self, request: Request, identifier: str) -> Response:
        analysis = selectors.analysis_get(user=request.user, identifier=identifier)
        try:
            return Response(services.round_dry_run(analysis=analysis, content=request.data))
        except ValidationFailed as invalid:
            raise ValidationError(invalid.errors) from invalid


class RecipeDetail(RetrieveAPIView):
    serializer_class = RecipeSerializer

    def get_object(self):
        return selectors.recipe_get(user=self.request.user, pk=self.kwargs["pk"])


class RoundStart(APIView):
    def post(self, request: Request, pk: int) -> Response:
        recipe = selectors.recipe_get(user=request.user, pk=pk)
        try:
            round_ = services.round_start(recipe=recipe, user=request.user)
        except NotAllowed as refusal:
            raise PermissionDenied(str(refusal)) from refusal
        return Response(RoundSerializer(round_).data, status=status.HTTP_202_ACCEPTED)


class RoundDetail(RetrieveAPIView):
    serializer_class = RoundSerializer

    def get_object(self):
        return selectors.round_get(user=self.request.user, pk=self.kwargs["pk"])


class ReleaseDetail(APIView):
    def get(self, request: Request, pk: int) -> Response:
        round_ = selectors.round_get(user=request.user, pk=pk)
        if round_.status != Round.Status.RELEASED:
            raise NotFound(f"No release: the round is {round_.get_status_display().lower()}.")
        try:
            view = services.ReleaseView(
                intervals=request.query_params.get("intervals", "per-bucket"),
                view=request.query_params.get("view", "raw"),
            )
        except ValidationFailed as invalid:
            raise ValidationError(invalid.errors) from invalid
        return Response(services.release_as_json(round_.release, view))
