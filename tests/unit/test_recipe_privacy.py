"""A recipe holds its privacy parameters as one value, and its encoding is parsed once per recipe.

One JSON column (analyses.privacy_field) read as a PrivacyParameters; the migration that moved the
seven columns into it, both ways; and a whole round, started, run shard by shard and aggregated,
parsing its recipe's dataTypeContent once (analyses.recipe_content).
"""

from __future__ import annotations

import pytest
from django.core import serializers
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

import privacy.encoding
from analyses.models import Recipe, Round
from analyses.services.policy import analysis_spent
from analyses.services.rounds import round_create_and_start, round_dry_run
from privacy.parameters import PrivacyParameters

pytestmark = pytest.mark.django_db

STORED = PrivacyParameters(
    noise="client", mechanism="asymmetric_ohe", epsilon0=3.0, epsilon=1.0, delta=1e-6, sampling_rate=0.5, min_cohort=974
)


@pytest.fixture
def parses(monkeypatch) -> list[dict]:
    """Every schema content_encoding parses, wherever it is called from (each caller imports
    content_encoding itself, so the count is taken one step down, where they all meet)."""
    seen: list[dict] = []
    parse = privacy.encoding.encoding_from_json

    def counted(schema: dict):
        seen.append(schema)
        return parse(schema)

    monkeypatch.setattr(privacy.encoding, "encoding_from_json", counted)
    return seen


def test_a_round_parses_its_recipe_once_however_many_shards_run(
    analysis, recipe, analyst, parses, django_capture_on_commit_callbacks
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        round_ = round_create_and_start(analysis=analysis, content=recipe, user=analyst)
    round_.refresh_from_db()
    assert round_.status == Round.Status.RELEASED and round_.shards_total == 5
    # Validation parsed it; the batch rules, the five shards' tasks and the aggregation reused that.
    assert len(parses) == 1


def test_a_recipe_read_anew_reuses_the_parse_and_an_unsaved_one_parses_itself(analysis, recipe, analyst) -> None:
    with pytest.MonkeyPatch.context() as patch:
        round_create_and_start(analysis=analysis, content=recipe, user=analyst)
        stored = Recipe.objects.get()
        patch.setattr(privacy.encoding, "encoding_from_json", pytest.fail)  # any parse now fails the test
        assert stored.encoding.size == 8 and stored.parsed_content[0] == ("age",)
    unsaved = Recipe(content=recipe, privacy=STORED)
    assert unsaved.parsed_content == stored.parsed_content and unsaved.parsed_content is not stored.parsed_content


def test_a_dry_run_parses_the_recipe_once_for_every_shard(analysis, recipe, parses) -> None:
    assert round_dry_run(analysis=analysis, content=recipe)["devices"] == 5_000
    assert len(parses) == 1


def test_the_privacy_column_reads_back_as_one_value(analysis, recipe, analyst) -> None:
    round_create_and_start(analysis=analysis, content=recipe, user=analyst)
    stored = Recipe.objects.get()
    assert stored.privacy == PrivacyParameters(
        noise="client",
        mechanism="asymmetric_ohe",
        epsilon0=3.0,
        epsilon=1.0,
        delta=1e-6,
        sampling_rate=1.0,
        min_cohort=736,
    )
    assert Recipe.objects.filter(privacy__epsilon=1.0, privacy__noise="client").count() == 1
    assert analysis_spent(analysis)["epsilon"] == 1.0  # summed in the database, from the JSON key
    # dumpdata writes the JSON object, and loaddata reads it back as the value.
    (dumped,) = serializers.serialize("python", [stored])
    assert dumped["fields"]["privacy"] == stored.privacy.as_json()
    (loaded,) = serializers.deserialize("python", [dumped])
    assert loaded.object.privacy == stored.privacy


@pytest.mark.django_db(transaction=True)  # the schema changes: migrations run outside a test transaction
def test_the_migration_moves_the_seven_columns_into_one_and_back(analysis, analyst) -> None:
    before, after = [("analyses", "0012_policy_approval")], [("analyses", "0013_recipe_privacy")]
    executor = MigrationExecutor(connection)
    try:
        executor.migrate(before)
        OldRecipe = executor.loader.project_state(before).apps.get_model("analyses", "Recipe")
        OldRecipe.objects.create(
            analysis_id=analysis.pk, identifier="old", content={}, encoded_field="age", created_by_id=analyst.pk,
            **STORED.as_json(),
        )  # fmt: skip
        OldRecipe.objects.create(
            analysis_id=analysis.pk, identifier="old-aggregator", content={}, encoded_field="age",
            created_by_id=analyst.pk, noise="aggregator", mechanism="", epsilon0=None, epsilon=2.0, delta=1e-5,
            sampling_rate=1.0, min_cohort=1_000,
        )  # fmt: skip
        executor = MigrationExecutor(connection)
        executor.migrate(after)
        moved = {r.identifier: r.privacy for r in Recipe.objects.all()}
        assert moved["old"] == STORED
        assert moved["old-aggregator"].aggregator_noise and moved["old-aggregator"].epsilon0 is None

        executor = MigrationExecutor(connection)
        executor.migrate(before)
        OldRecipe = executor.loader.project_state(before).apps.get_model("analyses", "Recipe")
        back = OldRecipe.objects.get(identifier="old")
        assert {name: getattr(back, name) for name in STORED.as_json()} == STORED.as_json()
    finally:
        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        executor.migrate(executor.loader.graph.leaf_nodes())


def test_the_admin_lists_a_recipes_parameters_and_shows_them_as_json(
    client, analysis, recipe, analyst, officer
) -> None:
    round_create_and_start(analysis=analysis, content=recipe, user=analyst)
    stored = Recipe.objects.get()
    client.force_login(officer)
    listed = client.get("/admin/analyses/recipe/").content.decode()
    assert "asymmetric_ohe" in listed and "736" in listed and "Min cohort" in listed
    shown = client.get(f"/admin/analyses/recipe/{stored.pk}/change/").content.decode()
    assert "&quot;min_cohort&quot;: 736" in shown and "PrivacyParameters(" not in shown
