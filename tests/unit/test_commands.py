"""Headless paths: create_analysis, run_recipe and seed_demo, including exit code 2 on bad input."""

from __future__ import annotations

import json

import pytest
from django.core.management import CommandError, call_command

from analyses.models import Analysis, Recipe
from devices.models import ShardLedger
from tests.conftest import SPEC

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def spec_file(tmp_path, fleet, analyst, officer):
    def write(spec: dict) -> str:
        path = tmp_path / "spec.json"
        path.write_text(json.dumps(spec))
        return str(path)

    return write


def test_create_analysis_from_a_spec_and_approve_it(spec_file, capsys) -> None:
    call_command("create_analysis", spec_file(SPEC), "--approve", "--owner", "alice", "--officer", "olivia")
    analysis = Analysis.objects.get(identifier="test.ages")
    assert analysis.is_approved
    assert analysis.snapshot.content["fields"]["age"] == {
        "localEpsilon": 4.0,
        "epsilon": 2.0,
        "reports": 2,
        "aggregatorNoise": False,
    }
    assert "created analysis test.ages" in capsys.readouterr().out


def test_create_analysis_with_a_bad_spec_exits_2_and_creates_nothing(spec_file) -> None:
    bad = {**SPEC, "budget": {"epsilon": -1, "reports": 0, "delta": 2}}
    with pytest.raises(CommandError) as raised:
        call_command("create_analysis", spec_file(bad), "--owner", "alice")
    assert raised.value.returncode == 2
    for path in ("budget.epsilon", "budget.reports", "budget.delta"):
        assert path in str(raised.value)
    assert not Analysis.objects.exists()


def test_run_recipe_prints_the_release_as_json(analysis, recipe, tmp_path, capsys, settings) -> None:
    path = tmp_path / "recipe.json"
    path.write_text(json.dumps(recipe))
    call_command("run_recipe", str(path), "--analysis", "test.ages", "--user", "alice", "--json")
    release = json.loads(capsys.readouterr().out)
    assert [b["label"] for b in release["buckets"]] == [
        "OOV",
        "[20, 30)",
        "[30, 40)",
        "[40, 50)",
        "[50, 60)",
        "[60, 70)",
        "[70, 80)",
        "[80, ∞)",
    ]
    assert {"estimate", "standard_error", "ci95"} <= set(release["buckets"][0])
    assert release["reports"] == 5_000 and release["min_cohort"] == 736 and release["epsilon_spent"] == 1.0
    assert release["refusals"] == {}


def test_run_recipe_with_bad_input_exits_2_and_spends_nothing(analysis, recipe, tmp_path) -> None:
    recipe["privacy"]["epsilon0"] = 0
    recipe["dataTypeContent"]["age"]["boundaries"] = [3, 2, 1]
    path = tmp_path / "recipe.json"
    path.write_text(json.dumps(recipe))
    with pytest.raises(CommandError) as raised:
        call_command("run_recipe", str(path), "--analysis", "test.ages", "--user", "alice")
    assert raised.value.returncode == 2
    assert "privacy.epsilon0" in str(raised.value) and "dataTypeContent.age.boundaries" in str(raised.value)
    assert not Recipe.objects.exists() and not ShardLedger.objects.exists()


def test_run_recipe_with_a_file_that_is_not_json_exits_2(analysis, tmp_path) -> None:
    path = tmp_path / "recipe.json"
    path.write_text("{not json")
    with pytest.raises(CommandError) as raised:
        call_command("run_recipe", str(path), "--analysis", "test.ages", "--user", "alice")
    assert raised.value.returncode == 2


def test_seed_demo_creates_table_1_policies_and_is_safe_to_rerun(capsys) -> None:
    call_command("seed_demo", "--devices", "3000", "--shard-size", "1000")
    call_command("seed_demo", "--devices", "3000", "--shard-size", "1000")
    demo = Analysis.objects.get(identifier="demo.keyboard")
    assert demo.is_approved and demo.fleet.name == "demo" and demo.fleet.shards.count() == 3
    assert demo.query_class == {"stream": "KeyboardNGrams", "fields": ["age", "ngrams"], "cohortFields": ["locale"]}
    # Table 1's per-round age budget (ε0 2, ε 0.3), three rounds of it: run, drill down, compare.
    assert (demo.epsilon_allowed, demo.reports_allowed) == (1.0, 3)
    policies = {p.field: (p.local_epsilon, p.epsilon, p.reports) for p in demo.field_policies.all()}
    assert policies == {"ngrams": (5.0, 1.0, 1), "age": (2.0, 0.9, 3)}
    out = capsys.readouterr().out
    assert "analyst-demo-password" in out and "(unchanged)" in out


def test_the_documented_example_files_run_as_the_readme_shows(db, analyst, officer, capsys, django_user_model) -> None:
    from devices.fleet_io import fleet_create

    fleet_create(name="demo", size=3_000, seed=3, shard_size=1_000)
    django_user_model.objects.create_user("analyst")
    django_user_model.objects.create_user("officer", is_staff=True)
    call_command("create_analysis", "docs/examples/analysis.json", "--approve")
    call_command("run_recipe", "docs/examples/recipe.json", "--analysis", "demo.ages", "--json")
    release = json.loads(capsys.readouterr().out.split("\n", 1)[1])
    assert release["analysis"] == "demo.ages" and release["reports"] == 3_000


def test_the_demo_officer_can_approve_in_the_admin_and_the_analyst_cannot(client) -> None:
    call_command("seed_demo", "--devices", "1000", "--shard-size", "1000")
    assert client.login(username="officer", password="officer-demo-password")
    assert client.get("/admin/analyses/analysis/").status_code == 200
    assert client.get("/admin/auth/user/").status_code == 403  # a privacy officer, not a superuser
    client.logout()
    assert client.login(username="analyst", password="analyst-demo-password")
    assert client.get("/admin/analyses/analysis/").status_code == 302


def test_an_analysis_can_choose_the_advanced_accountant_and_devices_receive_it(spec_file) -> None:
    spec = {**SPEC, "budget": {**SPEC["budget"], "accountant": "advanced"}}
    call_command("create_analysis", spec_file(spec), "--approve", "--owner", "alice", "--officer", "olivia")
    assert Analysis.objects.get().snapshot.content["budget"]["accountant"] == "advanced"


def test_an_unknown_accountant_is_refused(spec_file) -> None:
    spec = {**SPEC, "budget": {**SPEC["budget"], "accountant": "optimistic"}}
    with pytest.raises(CommandError, match="budget.accountant"):
        call_command("create_analysis", spec_file(spec), "--owner", "alice")
    assert not Analysis.objects.exists()


def test_seed_demo_reset_budgets_forgets_rounds_and_adaptive_runs(tmp_path) -> None:
    import copy

    from django.contrib.auth import get_user_model

    from analyses.adaptive.chain import adaptive_start
    from analyses.models import AdaptiveRun, Round
    from pfs_base.errors import ValidationFailed

    call_command("seed_demo", "--devices", "20000")
    spec = json.loads(open("docs/examples/bucket_refinement.json").read())
    spec["maxRounds"] = 3  # 3 of the policy's 4 epsilon: a second such plan does not fit
    analyst = get_user_model().objects.get(username="analyst")
    run = adaptive_start(spec=copy.deepcopy(spec), user=analyst)  # tasks run as each write commits
    run.refresh_from_db()
    assert run.status == AdaptiveRun.Status.FINISHED and Round.objects.count() >= 2
    assert ShardLedger.objects.filter(analysis_identifier="demo.refinement").exists()
    with pytest.raises(ValidationFailed):
        adaptive_start(spec=copy.deepcopy(spec), user=analyst)

    call_command("seed_demo", "--reset-budgets")
    assert not AdaptiveRun.objects.exists() and not Round.objects.exists()
    assert not ShardLedger.objects.filter(analysis_identifier="demo.refinement").exists()
    # The budget is whole again: the same plan is accepted.
    adaptive_start(spec=spec, user=analyst)
    assert AdaptiveRun.objects.count() == 1
