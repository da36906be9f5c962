"""The README's walk on the seeded demo goes on without an officer (issue 31, item 11): run the demo
recipe, drill down into a bucket (asked first), compare the two releases; a fourth round of the
demo recipe is refused by the policy, which allows three."""

from __future__ import annotations

import pytest
from django.core.management import call_command

from analyses.models import Round

pytestmark = pytest.mark.django_db


def _defaults(page) -> dict[str, str]:
    """The analysis page's form as it comes: the demo recipe."""
    form = page.context["form"]
    fields = ("field", "boundaries", "noise", "mechanism", "epsilon0", "epsilon", "delta", "sampling_rate")
    return {name: str(form[name].value()) for name in fields}


def test_run_drill_down_and_compare_on_the_demo_without_an_officer(client, django_capture_on_commit_callbacks) -> None:
    call_command("seed_demo", "--devices", "5000", "--shard-size", "5000")
    assert client.login(username="analyst", password="analyst-demo-password")
    recipe = _defaults(client.get("/analyses/demo.keyboard/"))
    assert (recipe["epsilon0"], recipe["epsilon"], recipe["boundaries"]) == ("2.0", "0.3", "20, 30, 40, 50, 60, 70, 80")

    # Run, answered in the question (the page's script posts run-confirmed).
    with django_capture_on_commit_callbacks(execute=True):
        ran = client.post("/analyses/demo.keyboard/", {**recipe, "action": "run-confirmed", "ask_before_spending": "1"})
    assert ran.status_code == 302
    first = Round.objects.get()
    assert first.status == Round.Status.RELEASED

    # Drill down into [30, 40): the page asks, and the answer runs it.
    page = client.get(f"/analyses/demo.keyboard/?refine={first.pk}&cohort=&bucket=2").content.decode()
    assert "This refinement will be refused" not in page
    digest = page.split('id="refine-question"')[1].split('name="spend_digest" value="')[1].split('"')[0]
    with django_capture_on_commit_callbacks(execute=True):
        refined = client.post(f"/rounds/{first.pk}/refine/", {"cohort": "", "bucket": "2", "spend_digest": digest})
    second = Round.objects.exclude(pk=first.pk).get()
    assert refined["Location"] == f"/rounds/{second.pk}/" and second.status == Round.Status.RELEASED

    # Compare the two releases.
    compared = client.get(f"/compare/?a={first.pk}&b={second.pk}")
    assert compared.status_code == 200

    # A third round fits; a fourth is refused by the devices' rule for the demo's three reports.
    with django_capture_on_commit_callbacks(execute=True):
        third = client.post(
            "/analyses/demo.keyboard/", {**recipe, "action": "run-confirmed", "ask_before_spending": "1"}
        )
    assert third.status_code == 302
    fourth = client.post("/analyses/demo.keyboard/", {**recipe, "action": "run-confirmed", "ask_before_spending": "1"})
    assert fourth.status_code == 400 and Round.objects.count() == 3
