"""Read access for analysts: an analyst sees their own analyses; a privacy officer sees all."""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import QuerySet
from django.shortcuts import get_object_or_404

from analyses.models import AdaptiveRun, Analysis, Recipe, Round


def analysis_list(*, user: AbstractBaseUser) -> QuerySet[Analysis]:
    analyses = Analysis.objects.select_related("fleet", "owner")
    return analyses if user.is_staff else analyses.filter(owner=user)


def analysis_get(*, user: AbstractBaseUser, identifier: str) -> Analysis:
    return get_object_or_404(analysis_list(user=user), identifier=identifier)


def recipe_get(*, user: AbstractBaseUser, pk: int) -> Recipe:
    recipes = Recipe.objects.select_related("analysis")
    if not user.is_staff:
        recipes = recipes.filter(analysis__owner=user)
    return get_object_or_404(recipes, pk=pk)


def round_get(*, user: AbstractBaseUser, pk: int) -> Round:
    rounds = Round.objects.select_related("recipe__analysis__fleet", "created_by")
    if not user.is_staff:
        rounds = rounds.filter(recipe__analysis__owner=user)
    return get_object_or_404(rounds, pk=pk)


def adaptive_run_list(*, user: AbstractBaseUser) -> QuerySet[AdaptiveRun]:
    runs = AdaptiveRun.objects.select_related("analysis__fleet", "current_round__recipe").order_by("-created_at", "-pk")
    return runs if user.is_staff else runs.filter(analysis__owner=user)


def adaptive_run_get(*, user: AbstractBaseUser, pk: int) -> AdaptiveRun:
    return get_object_or_404(adaptive_run_list(user=user), pk=pk)
