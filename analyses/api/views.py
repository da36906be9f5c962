"""REST API: thin views that validate through services and shape the output.

Errors leave as exceptions and pfs_base.api_errors gives them the one format: a service's
ValidationFailed is a 400 by field, Conflict a 409, NotAllowed a 403, a missing or hidden object
a 404. Each operation is described for the OpenAPI schema (analyses.api.schema).
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import authenticate
from django.db.models import QuerySet
from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.authtoken.serializers import AuthTokenSerializer
from rest_framework.authtoken.views import ObtainAuthToken
from rest_framework.exceptions import AuthenticationFailed, NotFound, ValidationError
from rest_framework.generics import ListAPIView, RetrieveAPIView
from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.parsers import FormParser, MultiPartParser
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from analyses.api.idempotent import idempotent_response
from analyses.api.schema import IDEMPOTENCY_KEY, JSON_OBJECT, body_errors, errors, status_parameter
from analyses.api.serializers import (
    AnalysisSerializer,
    DryRunSerializer,
    FleetSerializer,
    ProposeAnswerSerializer,
    RecipeSerializer,
    ReleaseSerializer,
    RoundSerializer,
)
from analyses.models import Analysis, Recipe, Round
from analyses.presenters.releases import PAGE_BUCKETS, release_file_name, release_page
from analyses.reads import release_cache, selectors
from analyses.reads.recipe_preview import recipe_preview
from analyses.services.accuracy import recipe_propose
from analyses.services.policy import analyses_spent
from analyses.services.recipes import recipe_create
from analyses.services.releases import ReleaseView
from analyses.services.rounds import round_cancel, round_dry_run, round_start, rounds_progress
from devices.models import Fleet
from pfs_base.api_bodies import StrictSerializer, refuse_unknown_keys
from pfs_base.api_limits import UserRateThrottle
from pfs_base.api_parsers import JSONParser
from pfs_base.errors import ValidationFailed
from privacy.intervals import INTERVALS, VIEWS
from privacy.limits import MAX_BUCKETS

BAD_CREDENTIALS = "Wrong username or password: no token was given."


class StrictAuthTokenSerializer(AuthTokenSerializer):
    def to_internal_value(self, data: Any) -> Any:
        refuse_unknown_keys(data, self.fields)
        return super().to_internal_value(data)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        # DRF's serializer answers wrong credentials as bad input (400); they are a failed sign-in, a
        # 401, which clients tell apart from a malformed request. Missing or blank fields stay a 400,
        # by field (the fields are required and not blank).
        user = authenticate(request=self.context.get("request"), username=attrs["username"], password=attrs["password"])
        if user is None:  # also an inactive user: ModelBackend authenticates none
            raise AuthenticationFailed(BAD_CREDENTIALS)
        return {**attrs, "user": user}


class TokenObtain(ObtainAuthToken):
    """DRF's token view, but counted against the anonymous rate per address: guessing passwords is slow.
    Wrong credentials are a 401 ``authentication_failed`` (``WWW-Authenticate: Token``)."""

    serializer_class = StrictAuthTokenSerializer
    throttle_classes = [UserRateThrottle]
    parser_classes = [JSONParser, FormParser, MultiPartParser]  # DRF's names its own JSON parser


def _whole(params: Any, name: str, *, default: int, low: int, high: int) -> int:
    """A whole-number query parameter within [low, high]; a 400 by parameter otherwise."""
    raw = params.get(name)
    if raw is None or raw == "":
        return default
    if not raw.isdigit() or not low <= int(raw) <= high:
        raise ValidationError({name: [f"Must be a whole number from {low:,} to {high:,}."]})
    return int(raw)


def _choice(params: Any, name: str, choices: list[str]) -> str | None:
    """A query parameter that must be one of ``choices`` when given; a 400 by parameter otherwise."""
    value = params.get(name)
    if value and value not in choices:
        raise ValidationError({name: [f"Must be one of {', '.join(choices)}."]})
    return value or None


@extend_schema(
    summary="The analyses you may see",
    parameters=[
        status_parameter(Analysis.Status.values, "analyses"),
        OpenApiParameter("fleet", str, required=False, description="Only analyses on this fleet (its name)."),
    ],
    responses={200: AnalysisSerializer(many=True), **errors(400, 404)},
)
class AnalysisList(ListAPIView):
    serializer_class = AnalysisSerializer

    def get_queryset(self) -> QuerySet[Analysis]:
        analyses = selectors.analysis_list(user=self.request.user).prefetch_related("field_policies")
        wanted = _choice(self.request.query_params, "status", Analysis.Status.values)
        if wanted:
            analyses = analyses.filter(status=wanted)
        if self.request.query_params.get("fleet"):
            analyses = analyses.filter(fleet__name=self.request.query_params["fleet"])
        return analyses

    def get_serializer(self, *args: Any, **kwargs: Any) -> AnalysisSerializer:
        if args and isinstance(args[0], list | QuerySet):  # a page of analyses: their spending in one query
            kwargs["context"] = {**self.get_serializer_context(), "spent": analyses_spent(args[0])}
        return super().get_serializer(*args, **kwargs)


@extend_schema(summary="One analysis", responses={200: AnalysisSerializer, **errors(404)})
class AnalysisDetail(RetrieveAPIView):
    serializer_class = AnalysisSerializer

    def get_object(self) -> Analysis:
        return selectors.analysis_get(user=self.request.user, identifier=self.kwargs["identifier"])


class RecipeCreate(ListAPIView):
    """The analysis's stored recipes (GET, newest first), and storing a new one (POST)."""

    serializer_class = RecipeSerializer

    @extend_schema(
        summary="The analysis's stored recipes, newest first", responses={200: RecipeSerializer, **errors(404)}
    )
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().get(request, *args, **kwargs)

    def get_queryset(self) -> QuerySet[Recipe]:
        analysis = selectors.analysis_get(user=self.request.user, identifier=self.kwargs["identifier"])
        return analysis.recipes.select_related("analysis__fleet").order_by("-created_at", "-pk")

    @extend_schema(
        summary="Validate and store a recipe",
        description="The body is a recipe (docs/formats.md). A bad recipe is a 400 keyed by recipe key. "
        "Send an Idempotency-Key to make a retry safe: a repeat answers the stored recipe again.",
        request=JSON_OBJECT,
        parameters=[IDEMPOTENCY_KEY],
        responses={201: RecipeSerializer, **body_errors(400, 404, 422)},
    )
    def post(self, request: Request, identifier: str) -> Response:
        analysis = selectors.analysis_get(user=request.user, identifier=identifier)

        def store() -> tuple[int, Any, dict[str, str]]:
            recipe = recipe_create(analysis=analysis, content=request.data, user=request.user)
            return status.HTTP_201_CREATED, RecipeSerializer(recipe).data, {}

        return idempotent_response(request, endpoint=f"recipe-create:analysis={analysis.pk}", respond=store)


class RecipeDryRun(APIView):
    """What the devices would do with a recipe, without starting a round or spending anything."""

    @extend_schema(
        summary="Dry-run a recipe on the fleet",
        request=JSON_OBJECT,
        responses={200: DryRunSerializer, **body_errors(400, 404)},
    )
    def post(self, request: Request, identifier: str) -> Response:
        analysis = selectors.analysis_get(user=request.user, identifier=identifier)
        return Response(round_dry_run(analysis=analysis, content=request.data))


class ProposeRequest(StrictSerializer):
    recipe = serializers.DictField(
        help_text="A recipe (docs/formats.md): its field, buckets, noise and mechanism are kept."
    )
    target = serializers.DictField(
        help_text='{"halfWidth": X} (± X devices per bucket at 95%) or {"relativeError": r} (on the largest bucket).'
    )


class RecipePropose(APIView):
    """Accuracy first: the cheapest parameters within the policy that meet an accuracy target."""

    @extend_schema(
        summary="Propose the cheapest recipe parameters that meet an accuracy target",
        description="Searches epsilon, epsilon0 and the sampling rate within the analysis's policy (docs/accuracy.md) "
        "and answers the least-epsilon parameters that meet the target, or met = false with the best within the "
        "policy. Nothing is stored or spent.",
        request=ProposeRequest,
        responses={200: ProposeAnswerSerializer, **body_errors(400, 404)},
    )
    def post(self, request: Request, identifier: str) -> Response:
        analysis = selectors.analysis_get(user=request.user, identifier=identifier)
        body = ProposeRequest(data=request.data)
        body.is_valid(raise_exception=True)
        return Response(
            recipe_propose(
                analysis=analysis, content=body.validated_data["recipe"], target=body.validated_data["target"]
            )
        )


class RecipeValidate(APIView):
    """The recipe editor's check as you type: recipe_validate's verdict and the recipe's figures; creates nothing."""

    @extend_schema(
        parameters=[
            OpenApiParameter(
                "verdict",
                bool,
                required=False,
                description="With verdict=1 a recipe that does not validate is a 200 {valid: false, errors: "
                "{key: [messages]}}, a valid one {valid: true, ...}: an editor checking each keystroke "
                "expects refusals and should not see them as failed requests. Without it, a 400 by key.",
            )
        ],
    )
    def post(self, request: Request, identifier: str) -> Response:
        analysis = selectors.analysis_get(user=request.user, identifier=identifier)
        if request.query_params.get("verdict") not in ("1", "true"):
            return Response(recipe_preview(analysis=analysis, content=request.data))
        try:
            preview = recipe_preview(analysis=analysis, content=request.data)
        except ValidationFailed as invalid:
            return Response({"valid": False, "errors": invalid.errors})
        return Response({"valid": True, **preview})


@extend_schema(summary="One recipe", responses={200: RecipeSerializer, **errors(404)})
class RecipeDetail(RetrieveAPIView):
    serializer_class = RecipeSerializer

    def get_object(self):
        return selectors.recipe_get(user=self.request.user, pk=self.kwargs["pk"])


class RoundStartRequest(StrictSerializer):
    confirmSmallCohorts = serializers.BooleanField(  # noqa: N815 - the API's camelCase key
        required=False,
        help_text="Start even if some cohorts are expected below the minimum cohort (their devices would spend "
        "budget for a suppressed batch); without it such a start is a 400 naming them.",
    )


class RoundStart(APIView):
    throttle_scope = "round_start"

    @extend_schema(
        summary="Start a round of a recipe",
        description="Every device of the analysis's fleet is asked; the round is queued and answers 202. "
        "Send an Idempotency-Key to make a retry safe.",
        request=RoundStartRequest,
        parameters=[IDEMPOTENCY_KEY],
        responses={202: RoundSerializer, **errors(400, 403, 404, 409, 413, 422)},
    )
    def post(self, request: Request, pk: int) -> Response:
        recipe = selectors.recipe_get(user=request.user, pk=pk)
        body = RoundStartRequest(data=request.data or {})
        body.is_valid(raise_exception=True)
        confirmed = body.validated_data.get("confirmSmallCohorts", False)

        def start() -> tuple[int, Any, dict[str, str]]:
            round_ = round_start(recipe=recipe, user=request.user, confirm_small_cohorts=confirmed)
            return status.HTTP_202_ACCEPTED, RoundSerializer(round_).data, {}

        return idempotent_response(request, endpoint=f"round-start:recipe={recipe.pk}", respond=start)


@extend_schema(
    summary="Your rounds, newest first",
    parameters=[
        OpenApiParameter("analysis", str, required=False, description="Only rounds of this analysis (identifier)."),
        status_parameter(Round.Status.values, "rounds"),
    ],
    responses={200: RoundSerializer(many=True), **errors(400, 404)},
)
class RoundList(ListAPIView):
    serializer_class = RoundSerializer

    def get_queryset(self) -> QuerySet[Round]:
        rounds = selectors.round_list(user=self.request.user)
        wanted = _choice(self.request.query_params, "status", Round.Status.values)
        if wanted:
            rounds = rounds.filter(status=wanted)
        if self.request.query_params.get("analysis"):
            rounds = rounds.filter(recipe__analysis__identifier=self.request.query_params["analysis"])
        return rounds

    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        page = self.paginate_queryset(self.get_queryset())
        rounds = list(page if page is not None else self.get_queryset())
        context = {**self.get_serializer_context(), "progress": rounds_progress(rounds)}
        data = RoundSerializer(rounds, many=True, context=context).data
        return self.get_paginated_response(data) if page is not None else Response(data)


@extend_schema(summary="A round: status and progress", responses={200: RoundSerializer, **errors(404)})
class RoundDetail(RetrieveAPIView):
    serializer_class = RoundSerializer

    def get_object(self) -> Round:
        return selectors.round_get(user=self.request.user, pk=self.kwargs["pk"])


class RoundCancel(APIView):
    @extend_schema(
        summary="Cancel a round that has not finished",
        description="Nothing is released and the stored shares are dropped; devices that already answered "
        "keep their budget spent. A finished round is a 409.",
        request=None,
        responses={200: RoundSerializer, **errors(404, 409)},
    )
    def post(self, request: Request, pk: int) -> Response:
        round_ = selectors.round_get(user=request.user, pk=pk)
        cancelled = round_cancel(round_=round_, user=request.user)
        return Response(RoundSerializer(selectors.round_get(user=request.user, pk=cancelled.pk)).data)


RELEASE_PAGE = [
    OpenApiParameter("bucket_offset", int, required=False, description="The first bucket of the page (default 0)."),
    OpenApiParameter("bucket_limit", int, required=False, description="Buckets per page, 1 to 10,000 (default)."),
]
RELEASE_OPTIONS = [
    OpenApiParameter("intervals", str, enum=list(INTERVALS), required=False, description="Default per-bucket."),
    OpenApiParameter("view", str, enum=list(VIEWS), required=False, description="Default raw."),
]


def _released_round(request: Request, pk: int) -> tuple[Round, ReleaseView]:
    round_ = selectors.round_get(user=request.user, pk=pk)
    if round_.status != Round.Status.RELEASED:
        raise NotFound(f"No release: the round is {round_.get_status_display().lower()}.")
    try:
        view = ReleaseView(
            intervals=request.query_params.get("intervals", "per-bucket"),
            view=request.query_params.get("view", "raw"),
        )
    except ValidationFailed as invalid:
        raise ValidationError(invalid.errors) from invalid
    return round_, view


class ReleaseDetail(APIView):
    @extend_schema(
        summary="A round's release",
        description="404 until the round is released. A page holds at most 10,000 buckets of every batch; "
        "next_offset names the next page.",
        parameters=[*RELEASE_OPTIONS, *RELEASE_PAGE],
        responses={200: ReleaseSerializer, **errors(400, 404)},
    )
    def get(self, request: Request, pk: int) -> Response:
        round_, view = _released_round(request, pk)
        offset = _whole(request.query_params, "bucket_offset", default=0, low=0, high=MAX_BUCKETS)
        limit = _whole(request.query_params, "bucket_limit", default=PAGE_BUCKETS, low=1, high=PAGE_BUCKETS)
        release = release_cache.release_json(selectors.round_release(round_), view)
        return Response(release_page(release, offset=offset, limit=limit))


class JsonErrorsNegotiation(BaseContentNegotiation):
    """Whatever the client accepts: the view answers CSV itself, and an error is JSON in the API's format."""

    def select_parser(self, request: Request, parsers: list) -> Any:
        return parsers[0] if parsers else None

    def select_renderer(self, request: Request, renderers: list, format_suffix: str | None = None) -> Any:
        json_renderer = next(r for r in renderers if isinstance(r, JSONRenderer))
        return json_renderer, json_renderer.media_type


class ReleaseCsv(APIView):
    renderer_classes = [JSONRenderer]
    content_negotiation_class = JsonErrorsNegotiation

    @extend_schema(
        summary="A round's release as CSV",
        operation_id="rounds_release_csv_retrieve",
        description="Columns: cohort, bucket, estimate, standard_error, ci_low, ci_high; a Poplar1 round's "
        "(a walk): word, count, standard_error, complete. 404 until released.",
        parameters=RELEASE_OPTIONS,
        responses={
            (200, "text/csv"): OpenApiResponse(response=OpenApiTypes.STR, description="The release table."),
            **errors(400, 404),
        },
    )
    def get(self, request: Request, pk: int) -> HttpResponse:
        round_, view = _released_round(request, pk)
        csv = release_cache.release_csv(selectors.round_release(round_), view)
        response = HttpResponse(csv, content_type="text/csv; charset=utf-8")
        response["Content-Disposition"] = f'attachment; filename="{release_file_name(round_, view, "csv")}"'
        return response


def _fleet_analyses(request: Request) -> dict[int, list[str]]:
    """The identifiers of the analyses the user may see, by fleet."""
    by_fleet: dict[int, list[str]] = {}
    for fleet_id, identifier in selectors.analysis_list(user=request.user).values_list("fleet_id", "identifier"):
        by_fleet.setdefault(fleet_id, []).append(identifier)
    return by_fleet


@extend_schema(summary="The fleets", responses={200: FleetSerializer(many=True), **errors(404)})
class FleetList(ListAPIView):
    serializer_class = FleetSerializer

    def get_queryset(self) -> QuerySet[Fleet]:
        return selectors.fleet_list()

    def get_serializer_context(self) -> dict[str, Any]:
        return {**super().get_serializer_context(), "analyses": _fleet_analyses(self.request)}


@extend_schema(summary="One fleet", responses={200: FleetSerializer, **errors(404)})
class FleetDetail(RetrieveAPIView):
    serializer_class = FleetSerializer

    def get_object(self) -> Fleet:
        return selectors.fleet_get(name=self.kwargs["name"])

    def get_serializer_context(self) -> dict[str, Any]:
        return {**super().get_serializer_context(), "analyses": _fleet_analyses(self.request)}
