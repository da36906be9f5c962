"""Dashboard pages: thin views over the same services as the API."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import AbstractBaseUser
from django.contrib.messages.storage.base import Message
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from analyses import device_rounds
from analyses.forms.recipe_editor import RecipeForm, recipe_problem_said
from analyses.models import Analysis, Round
from analyses.presenters.releases import release_file_name, walks
from analyses.reads import drilldown, release_cache, selectors
from analyses.reads.recipe_preview import recipe_preview, spend_digest
from analyses.rules.roles import check_may_run, check_may_stop
from analyses.services import rounds
from analyses.services.accuracy import recipe_propose
from analyses.services.budget import analysis_guarantees, recipe_budget_request, rounds_affordable
from analyses.services.policy import analyses_spent, analysis_spent
from analyses.services.releases import ReleaseView
from analyses.services.rounds import round_create_and_start, round_dry_run, round_progress
from pfs_base.errors import Conflict, NotAllowed, Unavailable, ValidationFailed
from privacy.mechanisms import MECHANISMS


@login_required
def analysis_list(request: HttpRequest) -> HttpResponse:
    analyses = list(selectors.analysis_list(user=request.user))
    latest = selectors.last_releases(analyses=analyses)
    spent = analyses_spent(analyses)
    rows = [{"analysis": a, "spent": spent[a.pk], "last_release": latest.get(a.pk)} for a in analyses]
    return render(request, "analyses/list.html", {"rows": rows})


@login_required
@require_http_methods(["GET", "POST"])
def analysis_detail(request: HttpRequest, identifier: str) -> HttpResponse:
    analysis = selectors.analysis_get(user=request.user, identifier=identifier)
    # Drill-down from a round page: ?refine=<round>&cohort=<c>&bucket=<i> prefills a refined recipe.
    refine = (
        drilldown.refinement_for_page(user=request.user, analysis=analysis, query=request.GET)
        if "refine" in request.GET
        else None
    )
    if refine is not None:
        refine["ask"] = request.GET.get("ask") == "1"  # "Run this refinement…" posted without a script
    form = RecipeForm(request.POST or None, analysis=analysis, initial=(refine or {}).get("initial"))
    dry_run = spend_question = proposal = None
    if request.method == "POST" and form.is_valid():
        action = request.POST.get("action")
        try:
            if action == "propose":
                # Accuracy first: the cheapest parameters that meet the target fill the form, to run or change.
                proposal = recipe_propose(analysis=analysis, content=form.recipe(), target=form.target())
                if proposal["met"]:
                    form = form.with_proposal(proposal["recipe"])
                    messages.success(request, f"{proposal['message']} The form holds them now: nothing is run yet.")
                else:
                    messages.warning(request, proposal["message"])
            elif action == "dry-run":
                dry_run = round_dry_run(analysis=analysis, content=form.recipe())
                messages.info(request, _dry_run_outcome(dry_run))
            elif action == "run" and request.POST.get("ask_before_spending"):
                # The page's form asks before an irreversible spend (its script asks in a dialog
                # and posts "run-confirmed"): what the round spends, what remains, what is suppressed.
                spend_question = _spend_question(analysis, form.recipe())
            elif action == "run-confirmed" and _asked_about_another(request, form.recipe()):
                # "Run and spend" under a question about a recipe changed since: asked again, nothing spent.
                spend_question = {**_spend_question(analysis, form.recipe()), "changed": True}
            else:
                round_ = round_create_and_start(
                    analysis=analysis,
                    content=form.recipe(),
                    user=request.user,
                    # One question before a spend: its answer covers the batches it said would be
                    # suppressed and the noise it said was too high, so no second question follows.
                    confirm_small_cohorts=form.cleaned_data.get("confirm_small_cohorts", False)
                    or _answered_question(request, action, form.recipe()),
                )
                _round_started(request, round_)
                return redirect("round-detail", pk=round_.pk)
        except ValidationFailed as invalid:
            form.add_recipe_errors(invalid.errors)
        except (NotAllowed, Unavailable) as refusal:  # Unavailable: the helper did not answer; nothing started
            form.add_error(None, str(refusal))
    if request.method == "POST" and form.errors:
        messages.error(request, _refusal_outcome(form))
    rounds = Round.objects.filter(recipe__analysis=analysis).select_related("recipe")[:20]
    spent = analysis_spent(analysis)
    enforced = analysis.enforced  # the approved policy; an unapproved edit is shown apart, as pending
    field_rows = [
        {"field": p.field, "policy": p, "used": spent["fields"].get(p.field, {"epsilon": 0.0, "reports": 0})}
        for p in enforced.field_budgets
    ]
    context = {
        "analysis": analysis,
        "enforced": enforced,
        "affordable": _affordable(analysis, rounds[0].recipe) if rounds else None,
        "may_run": analysis.owner_id == request.user.pk,
        "field_rows": field_rows,
        "spent": spent,
        "guarantee": analysis_guarantees(analysis)[None] if rounds else None,
        "form": form,
        "rounds": rounds,
        # A walk's release is words, not buckets: it offers no A or B (release_compare refuses it).
        "comparable": {r.pk for r in rounds if r.status == Round.Status.RELEASED and not walks(r.recipe)},
        "dry_run": dry_run,
        "spend_question": spend_question,
        "proposal": proposal,
        "deletion_model_mechanisms": [name for name, cls in MECHANISMS.items() if cls.privacy_model == "deletion"],
        "refine": refine,
    }
    invalid = form.errors or (refine and refine["error"])
    return render(request, "analyses/detail.html", context, status=400 if invalid else 200)


# A message about a round still running: stale once it has finished (round_detail drops it; on a
# page following the round, static/js/live.js does).
WHILE_RUNNING = "while-running"


def _round_started(request: HttpRequest, round_: Round) -> None:
    messages.success(
        request,
        f"Round {round_.pk} started: devices answer as they are asked. Its progress is below, "
        "and its release once enough devices have answered.",
        extra_tags=WHILE_RUNNING,
    )


def _messages_shown(request: HttpRequest, round_: Round) -> list[Any]:
    """The messages to show on ``round_``'s page (the context's ``messages``, over the context
    processor's): as they are, but one about the round running is said in the past once it has
    finished ("Round 12 started and has finished (released): …")."""
    shown = list(messages.get_messages(request))  # read: shown once, as the processor's would be
    if not round_.is_finished:
        return shown
    came_to = {Round.Status.WITHHELD: "nothing released"}.get(round_.status, round_.status)
    finished = f"Round {round_.pk} started and has finished ({came_to}): what it came to is below."
    return [Message(m.level, finished) if WHILE_RUNNING in m.extra_tags.split() else m for m in shown]


def _spend_question(analysis: Analysis, content: Any) -> dict[str, Any]:
    """What Run asks before it spends (recipe_preview's figures), and the digest of what it asked about."""
    return {**recipe_preview(analysis=analysis, content=content), "digest": spend_digest(content)}


def _asked_about_another(request: HttpRequest, content: Any) -> bool:
    asked = request.POST.get("spend_digest")
    return bool(asked) and asked != spend_digest(content)


def _answered_question(request: HttpRequest, action: str | None, content: Any) -> bool:
    """A "Run and spend" pressed under the server's question about exactly this recipe."""
    return action == "run-confirmed" and request.POST.get("spend_digest") == spend_digest(content)


# The analysis page counts the rounds the remaining budget affords up to here: each is one check
# and one charge of a one-device ledger (under a millisecond), twice (the accountant, and basic).
_AFFORDABLE_LIMIT = 200


def _affordable(analysis, recipe) -> dict[str, Any]:
    """How many more rounds of ``recipe`` (the last one run) the remaining budget affords: by the
    analysis's accountant, and by basic composition for comparison."""
    request = recipe_budget_request(recipe)
    count = rounds_affordable(analysis, request, limit=_AFFORDABLE_LIMIT)
    basic = rounds_affordable(analysis, request, composition="basic", limit=_AFFORDABLE_LIMIT)
    return {
        "recipe": recipe,
        "rounds": count,
        "basic": basic,
        "at_least": count == _AFFORDABLE_LIMIT,
        "accountant": analysis.enforced.accountant_phrase(),
    }


def _dry_run_outcome(dry_run: dict[str, Any]) -> str:
    """The dry run in one sentence, for the top of the page (its tables stay by the buttons); it reads
    the same per-batch verdict as the table (analyses.services.cohorts.cohort_release)."""
    answer = f"Dry run, nothing spent: {dry_run['would_answer']:,} of {dry_run['devices']:,} devices would answer"
    noisy = (
        " Its expected noise exceeds what most buckets can hold: running it will ask you to confirm."
        if dry_run["too_noisy"]
        else ""
    )
    minimum = f"the minimum cohort of {dry_run['min_cohort']:,}"
    if dry_run["release"] == "all":
        verdict = f", enough for {minimum}."
    elif dry_run["release"] == "some":
        verdict = (
            f"; {', '.join(dry_run['batches_released'])} would be released, {', '.join(dry_run['batches_below'])} "
            f"would not: below {minimum}, suppressed though their devices spend budget."
        )
    else:
        verdict = f": below {minimum}, so nothing would be released."
    return f"{answer}{verdict}{noisy} The details are below the Run button."


def _refusal_outcome(form: RecipeForm) -> str:
    """Why nothing ran, at the top of the page; each problem itself is shown under its field."""
    refusals = form.non_field_errors()
    if refusals:  # a refusal of the whole recipe (the budget, the rights): said here in full
        return "Nothing was run or spent: " + " ".join(refusals)
    fields = [str(form.fields[name].label or name) for name in form.errors if name in form.fields]
    problems = sum(len(errors) for errors in form.errors.values())
    where = f" ({', '.join(fields)})" if fields else ""
    noun = "problem" if problems == 1 else "problems"
    return f"Nothing was run or spent: the recipe has {problems} {noun}{where}, each shown under its field below."


def _release_view(request: HttpRequest) -> ReleaseView:
    """The intervals and view asked for in the query string; unknown values fall back to the defaults."""
    try:
        return ReleaseView(intervals=request.GET.get("intervals", "per-bucket"), view=request.GET.get("view", "raw"))
    except ValidationFailed:
        return ReleaseView()


@login_required
def round_detail(request: HttpRequest, pk: int) -> HttpResponse:
    round_ = selectors.round_get(user=request.user, pk=pk)
    release = selectors.round_release(round_) if round_.status == Round.Status.RELEASED else None
    context = {
        "round": round_,
        "recipe": round_.recipe,
        "progress": _progress(round_),
        "can_cancel": not round_.is_finished and _may(check_may_stop, request.user, round_),
        "can_close": not round_.is_finished and _may(check_may_run, request.user, round_),
        "release": release,
        "walk": walks(round_.recipe),
        "release_section": release_cache.release_section(round_, release, _release_view(request)) if release else "",
        "messages": _messages_shown(request, round_),
    }
    return render(request, "analyses/round.html", context)


@login_required
@require_GET
def round_status(request: HttpRequest, pk: int) -> JsonResponse:
    """What the round page's script polls: the progress as the page shows it."""
    return JsonResponse(_progress(selectors.round_get(user=request.user, pk=pk)))


@login_required
@require_POST
def round_cancel(request: HttpRequest, pk: int) -> HttpResponse:
    return _owner_acts(request, pk, "cancel", rounds.round_cancel, "Round {pk} cancelled: nothing will be released.")


@login_required
@require_POST
def round_close(request: HttpRequest, pk: int) -> HttpResponse:
    """Close the collection of a round on real devices: its reports are verified and released."""
    return _owner_acts(
        request, pk, "close", device_rounds.round_close, "Round {pk}: the collection is closed; its release follows."
    )


def _owner_acts(request: HttpRequest, pk: int, verb: str, act: Any, done: str) -> HttpResponse:
    """Run ``act`` (to ``verb`` a round); ``done`` (with {pk}) as a message. A state conflict (the round
    has finished) is a message on the round page; a refusal of the user's rights is a 403 page that
    says why (templates/403.html), as the API's 403 does."""
    round_ = selectors.round_get(user=request.user, pk=pk)
    try:
        act(round_=round_, user=request.user)
        messages.success(request, done.format(pk=round_.pk))
    except Conflict as conflict:
        messages.error(request, str(conflict))
    except NotAllowed as refusal:
        raise PermissionDenied(str(refusal)) from refusal
    return redirect("round-detail", pk=round_.pk)


@login_required
@require_POST
def round_refine(request: HttpRequest, pk: int) -> HttpResponse:
    """Run the drill-down's refined recipe as it was shown (rebuilt here from the round and the bucket)."""
    round_ = selectors.round_get(user=request.user, pk=pk)
    analysis = round_.recipe.analysis
    query = {
        "refine": str(round_.pk),
        "cohort": request.POST.get("cohort", ""),
        "bucket": request.POST.get("bucket", ""),
    }
    back = f"{reverse('analysis-detail', args=[analysis.identifier])}?{urlencode(query)}"
    try:
        refinement = drilldown.refined_recipe(round_=round_, cohort=query["cohort"], bucket=int(query["bucket"]))
        if refinement["recipe"] is None:
            raise NotAllowed(refinement["explanation"])
        if request.POST.get("spend_digest") != spend_digest(refinement["recipe"]):
            # Not asked yet (or asked about another recipe): the drill-down asks first, nothing is spent.
            return redirect(f"{back}&{urlencode({'ask': 1})}#refine-question")
        # The answer to the question covers the suppressed batches and the noise it named.
        new_round = round_create_and_start(
            analysis=analysis, content=refinement["recipe"], user=request.user, confirm_small_cohorts=True
        )
        _round_started(request, new_round)
    except ValueError:
        messages.error(request, "bucket must be a whole number.")
    except ValidationFailed as invalid:
        for path, problems in invalid.errors.items():
            for problem in problems:
                messages.error(request, recipe_problem_said(path, problem))
    except (NotAllowed, Unavailable) as refusal:
        messages.error(request, str(refusal))
    else:
        return redirect("round-detail", pk=new_round.pk)
    return redirect(back)


def _may(check: Any, user: AbstractBaseUser, round_: Round) -> bool:
    try:
        check(user, round_.recipe.analysis)
    except NotAllowed:
        return False
    return True


def _progress(round_: Round) -> dict[str, Any]:
    """round_progress with what the page says in words: status, elapsed time, time left."""
    progress = round_progress(round_)
    if round_.is_finished:
        eta = "done"
    elif progress["elapsed_seconds"] is None:
        eta = "waiting for a worker to start"
    elif progress["eta_seconds"] is None:
        eta = "estimating…"
    else:
        eta = f"about {_duration(progress['eta_seconds'])}"
    status = round_.get_status_display()
    walk = progress.get("walk")
    collecting = (progress.get("collection") or {}).get("open", False)  # real devices still uploading
    if (
        walk is not None
        and not round_.is_finished
        and not collecting
        and progress["shards_done"] >= progress["shards_total"]
    ):
        # Every device answered: the aggregators are walking the tree, a level at a time.
        status = f"Walking the prefix tree: {walk['released']} of at most {walk['levels']} levels released"
        eta = "until the walk ends"
    return {
        **progress,
        "finished": round_.is_finished,
        "status_display": status,
        "elapsed_text": "not started"
        if progress["elapsed_seconds"] is None
        else _duration(progress["elapsed_seconds"]),
        "eta_text": eta,
    }


def _duration(seconds: float) -> str:
    """1 h 02 min, 3 min 05 s, 12 s."""
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes:02d} min"
    if minutes:
        return f"{minutes} min {secs:02d} s"
    return f"{secs} s"


@login_required
def release_csv(request: HttpRequest, pk: int) -> HttpResponse:
    round_ = selectors.round_get(user=request.user, pk=pk)
    if round_.status != Round.Status.RELEASED:
        return HttpResponse("No release yet.", status=404, content_type="text/plain")
    view = _release_view(request)
    csv = release_cache.release_csv(selectors.round_release(round_), view)
    response = HttpResponse(csv, content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{release_file_name(round_, view, "csv")}"'
    return response


@login_required
def release_json(request: HttpRequest, pk: int) -> HttpResponse:
    """The release as the API gives it, as a file to download (the API's browsable page is not one)."""
    round_ = selectors.round_get(user=request.user, pk=pk)
    if round_.status != Round.Status.RELEASED:
        return HttpResponse("No release yet.", status=404, content_type="text/plain")
    view = _release_view(request)
    content = release_cache.release_json(selectors.round_release(round_), view)
    body = json.dumps(content, indent=2, ensure_ascii=False)
    response = HttpResponse(body, content_type="application/json")
    response["Content-Disposition"] = f'attachment; filename="{release_file_name(round_, view, "json")}"'
    return response
