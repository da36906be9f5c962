"""Dashboard pages: thin views over the same services as the API."""

from __future__ import annotations

import csv

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from analyses import selectors, services
from analyses.errors import NotAllowed, ValidationFailed
from analyses.forms import RecipeForm
from analyses.models import Round
from privacy.intervals import INTERVALS, VIEWS
from privacy.mechanisms import MECHANISMS


@login_required
def analysis_list(request: HttpRequest) -> HttpResponse:
    analyses = selectors.analysis_list(user=request.user)
    rows = [{"analysis": a, "spent": services.analysis_spent(a)} for a in analyses]
    return render(request, "analyses/list.html", {"rows": rows})


@login_required
@require_http_methods(["GET", "POST"])
def analysis_detail(request: HttpRequest, identifier: str) -> HttpResponse:
    analysis = selectors.analysis_get(user=request.user, identifier=identifier)
    form = RecipeForm(request.POST or None, analysis=analysis)
    dry_run = None
    if request.method == "POST" and form.is_valid():
        try:
            if request.POST.get("action") == "dry-run":
                dry_run = services.round_dry_run(analysis=analysis, content=form.recipe())
            else:
                round_ = services.round_create_and_start(analysis=analysis, content=form.recipe(), user=request.user)
                return redirect("round-detail", pk=round_.pk)
        except ValidationFailed as invalid:
            form.add_recipe_errors(invalid.errors)
        except NotAllowed as refusal:
            form.add_error(None, str(refusal))
    rounds = Round.objects.filter(recipe__analysis=analysis).select_related("recipe")[:20]
    spent = services.analysis_spent(analysis)
    field_rows = [
        {"field": p.field, "policy": p, "used": spent["fields"].get(p.field, {"epsilon": 0.0, "reports": 0})}
        for p in analysis.field_policies.all()
    ]
    context = {
        "analysis": analysis,
        "field_rows": field_rows,
        "spent": spent,
        "form": form,
        "rounds": rounds,
        "dry_run": dry_run,
        "deletion_model_mechanisms": [name for name, cls in MECHANISMS.items() if cls.privacy_model == "deletion"],
    }
    return render(request, "analyses/detail.html", context, status=400 if form.errors else 200)


def _release_view(request: HttpRequest) -> services.ReleaseView:
    """The intervals and view asked for in the query string; unknown values fall back to the defaults."""
    try:
        return services.ReleaseView(
            intervals=request.GET.get("intervals", "per-bucket"), view=request.GET.get("view", "raw")
        )
    except ValidationFailed:
        return services.ReleaseView()


@login_required
def round_detail(request: HttpRequest, pk: int) -> HttpResponse:
    round_ = selectors.round_get(user=request.user, pk=pk)
    release = getattr(round_, "release", None) if round_.status == Round.Status.RELEASED else None
    view = _release_view(request)
    context = {
        "round": round_,
        "recipe": round_.recipe,
        "progress": services.round_progress(round_),
        "release": release,
        "release_view": view,
        "interval_choices": INTERVALS,
        "view_choices": VIEWS,
        "release_json": services.release_as_json(release, view) if release else None,
        "table": services.release_table(release, view) if release else [],
    }
    return render(request, "analyses/round.html", context)


@login_required
def release_csv(request: HttpRequest, pk: int) -> HttpResponse:
    round_ = selectors.round_get(user=request.user, pk=pk)
    if round_.status != Round.Status.RELEASED:
        return HttpResponse("No release yet.", status=404, content_type="text/plain")
    response = HttpResponse(content_type="text/csv")
    response["Content-Disposition"] = f'attachment; filename="release-{round_.pk}.csv"'
    rows = services.release_table(round_.release, _release_view(request))
    writer = csv.DictWriter(
        response, fieldnames=["cohort", "bucket", "estimate", "standard_error", "ci_low", "ci_high"]
    )
    writer.writeheader()
    writer.writerows(rows)
    return response
