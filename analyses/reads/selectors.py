"""Read access for analysts: an analyst sees their own analyses; a privacy officer sees all."""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Count, QuerySet
from django.http import Http404
from django.shortcuts import get_object_or_404

from analyses.audit_log import refusal_log
from analyses.models import AdaptiveRun, Analysis, Recipe, Release, Round
from devices.models import Fleet


def analysis_list(*, user: AbstractBaseUser) -> QuerySet[Analysis]:
    analyses = Analysis.objects.select_related("fleet", "owner")
    return analyses if user.is_staff else analyses.filter(owner=user)


def analysis_get(*, user: AbstractBaseUser, identifier: str) -> Analysis:
    return _visible_or_404(analysis_list(user=user), user, identifier=identifier)


def recipe_get(*, user: AbstractBaseUser, pk: int) -> Recipe:
    recipes = Recipe.objects.select_related("analysis__fleet")
    if not user.is_staff:
        recipes = recipes.filter(analysis__owner=user)
    return _visible_or_404(recipes, user, pk=pk)


def round_list(*, user: AbstractBaseUser) -> QuerySet[Round]:
    """The rounds of the analyses the user may see, newest first."""
    rounds = Round.objects.select_related("recipe__analysis__fleet", "created_by").order_by("-created_at", "-pk")
    return rounds if user.is_staff else rounds.filter(recipe__analysis__owner=user)


def round_get(*, user: AbstractBaseUser, pk: int) -> Round:
    return _visible_or_404(round_list(user=user), user, pk=pk)


def round_release(round_: Round) -> Release:
    """The release of a released round, its content read only when used: what is shown of it
    comes from analyses.reads.release_cache, which needs only its id and date."""
    return Release.objects.defer("content").get(round=round_)


def last_releases(*, analyses: list[Analysis]) -> dict[int, Round]:
    """Each analysis's most recently released round, by analysis id (one query for the list page)."""
    released = (
        Round.objects.filter(recipe__analysis__in=analyses, status=Round.Status.RELEASED)
        .select_related("recipe")
        .order_by("recipe__analysis_id", "-finished_at", "-pk")
    )
    latest: dict[int, Round] = {}
    for round_ in released:
        latest.setdefault(round_.recipe.analysis_id, round_)
    return latest


def fleet_list() -> QuerySet[Fleet]:
    """Every fleet with its shard count; a fleet's devices and their data are never part of it."""
    return Fleet.objects.defer("vocabularies").annotate(shard_count=Count("shards")).order_by("name")


def fleet_get(*, name: str) -> Fleet:
    return get_object_or_404(fleet_list(), name=name)


def adaptive_run_list(*, user: AbstractBaseUser) -> QuerySet[AdaptiveRun]:
    runs = AdaptiveRun.objects.select_related("analysis__fleet", "current_round__recipe").order_by("-created_at", "-pk")
    return runs if user.is_staff else runs.filter(analysis__owner=user)


def adaptive_run_get(*, user: AbstractBaseUser, pk: int) -> AdaptiveRun:
    return _visible_or_404(adaptive_run_list(user=user), user, pk=pk)


def _visible_or_404(visible: QuerySet, user: AbstractBaseUser, **lookup: object) -> object:
    """The object if ``user`` may see it, else 404, the same whether it is someone else's or does
    not exist; asking for someone else's is logged."""
    try:
        return visible.get(**lookup)
    except visible.model.DoesNotExist:
        if visible.model._default_manager.filter(**lookup).exists():
            target = f"{visible.model._meta.model_name} {next(iter(lookup.values()))}"
            refusal_log(user=user, action="read", target=target, reasons="owned by another analyst")
        raise Http404(f"No {visible.model._meta.verbose_name} matches the given query.") from None
