"""REST API for the privacy calculators: query parameters in, the same JSON as `manage.py privacy` out."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from analyses import calculators
from pfs_base.errors import ValidationFailed


def _answer(request: Request, service: Callable[..., dict[str, Any]], names: tuple[str, ...]) -> Response:
    # Parameters not sent reach the service as None, so it names them as required.
    try:
        return Response(service(**{name: request.query_params.get(name) for name in names}))
    except ValidationFailed as invalid:
        raise ValidationError(invalid.errors) from invalid


class PrivacyAmplify(APIView):
    def get(self, request: Request) -> Response:
        return _answer(request, calculators.privacy_amplify, ("epsilon0", "n", "delta", "method"))


class PrivacyMinCohort(APIView):
    def get(self, request: Request) -> Response:
        return _answer(request, calculators.privacy_min_cohort, ("epsilon0", "epsilon", "delta", "method", "mechanism"))


class PrivacyGaussian(APIView):
    def get(self, request: Request) -> Response:
        return _answer(
            request, calculators.privacy_gaussian, ("epsilon", "delta", "sensitivity", "classical", "discrete")
        )


class PrivacyCurve(APIView):
    def get(self, request: Request) -> Response:
        return _answer(request, calculators.privacy_curve, ("epsilon0", "delta", "method", "points", "n_min", "n_max"))


class PrivacyCompose(APIView):
    def get(self, request: Request) -> Response:
        return _answer(
            request,
            calculators.privacy_compose,
            ("rounds", "delta", "mechanism", "epsilon0", "n", "gaussian_sigma", "laplace_scale", "sensitivity"),
        )
