# Separated stores (issue 17): the helper's own store. Shares carry a pair id, uploads and spent
# tokens an aggregation job; the helper's rows of an older database move to the helper's store.

import hashlib

import django.db.models.deletion
from django.db import connections, migrations, models

import aggregation.batch_rules


def _pair_of(collection_key: str, batch_key: str, source: str) -> str:
    """The pair id of a share stored before pair ids: the same for the leader's and the helper's row
    (each batch held one pair per source)."""
    return hashlib.sha256(f"{collection_key}\0{batch_key}\0{source}".encode()).hexdigest()[:32]


def leader_pairs_name(apps, schema_editor):
    """On the default store: name the pair of every leader share stored before pair ids."""
    if schema_editor.connection.alias != "default":
        return
    share = apps.get_model("aggregation", "LeaderShare")
    for row in share.objects.using("default").filter(pair="").select_related("collection"):
        row.pair = _pair_of(row.collection.key, row.collection.batch_key, row.source)
        row.save(update_fields=["pair"])


# The helper's rows of the shared aggregator models (the filter picks them), the columns to copy, and
# the auto_now_add column written again after the copy.
HELPER_ROWS = (
    (
        "CollectionRules",
        {},
        ("key",),
        (
            "length",
            "min_cohort",
            "weight_bound",
            "vdaf",
            "verify_key",
            "noise_epsilon",
            "noise_delta",
            "expected_rate",
            "rate_window",
            "closed",
        ),
        "created_at",
    ),
    ("AggregatorKey", {"role": "helper"}, ("role", "public_key", "private_key"), ("retired_at",), "created_at"),
    ("SpentToken", {"role": "helper"}, ("role", "collection_key", "token_digest"), (), None),
    ("ReportRejection", {"role": "helper"}, ("role", "collection_key", "reason"), ("count",), None),
)


def helper_rows_move(apps, schema_editor):
    """Run on the helper's store: a database made before the helper had its own holds the helper's
    rows in the default one. Copy them here (an open collection keeps its helper shares, its key, its
    spent tokens), then delete them there, so that the leader's database keeps nothing of the helper's."""
    helper = schema_editor.connection.alias
    if helper == "default":
        return
    present = set(connections["default"].introspection.table_names())
    for name, where, unique, others, created in HELPER_ROWS:
        model = apps.get_model("aggregation", name)
        if model._meta.db_table not in present:
            continue
        # Only the columns the default table still has: it may be migrated further than this store
        # (0010 drops CollectionRules' rate columns), and what it no longer has takes the default here.
        with connections["default"].cursor() as cursor:
            kept = {
                c.name for c in connections["default"].introspection.get_table_description(cursor, model._meta.db_table)
            }
        column = {field.name: field.column for field in model._meta.concrete_fields}
        others = tuple(field for field in others if column.get(field) in kept)
        columns = [*unique, *others] + ([created] if created else [])
        for row in model.objects.using("default").filter(**where).values(*columns):
            key = {field: row[field] for field in unique}
            model.objects.using(helper).get_or_create(**key, defaults={field: row[field] for field in others})
            if created:
                model.objects.using(helper).filter(**key).update(**{created: row[created]})
        if where:  # the rules are the helper's copy: the leader keeps its own
            model.objects.using("default").filter(**where).delete()
    collection, share = apps.get_model("aggregation", "Collection"), apps.get_model("aggregation", "HelperShare")
    if share._meta.db_table not in present:
        return
    fields = ("source", "vector", "field", "reports", "min_cohort", "arrivals", "created_at")
    batches = {}
    old = share.objects.using("default").values("collection_id", *fields)
    for row in old:
        if row["collection_id"] not in batches:
            batch = collection.objects.using("default").get(pk=row["collection_id"])
            batches[row["collection_id"]], _ = collection.objects.using(helper).get_or_create(
                key=batch.key,
                batch_key=batch.batch_key,
                defaults={"length": batch.length, "created_at": batch.created_at},
            )
        into = batches[row["collection_id"]]
        pair = _pair_of(into.key, into.batch_key, row["source"])
        if not share.objects.using(helper).filter(collection=into, pair=pair).exists():
            share.objects.using(helper).create(collection=into, pair=pair, **{f: row[f] for f in fields})
    with connections["default"].cursor() as cursor:  # the old table's rows, whatever its columns now
        cursor.execute(f"DELETE FROM {share._meta.db_table}")  # noqa: S608 (a model's table)


class Migration(migrations.Migration):
    dependencies = [
        ("aggregation", "0006_prio3_output_shares"),
    ]

    operations = [
        migrations.CreateModel(
            name="HelperJob",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("collection_key", models.CharField(max_length=200)),
                ("job", models.CharField(max_length=100)),
                ("created_at", models.DateTimeField(default=aggregation.batch_rules.arrival_coarse)),
            ],
        ),
        migrations.RemoveConstraint(
            model_name="helpershare",
            name="unique_helpershare_source",
        ),
        migrations.AddField(
            model_name="helpershare",
            name="pair",
            field=models.CharField(blank=True, default="", max_length=100),
        ),
        migrations.AddField(
            model_name="leadershare",
            name="pair",
            field=models.CharField(blank=True, default="", max_length=100),
        ),
        migrations.AddField(
            model_name="pendingreport",
            name="job",
            field=models.CharField(blank=True, max_length=100, null=True),
        ),
        migrations.AddField(
            model_name="spenttoken",
            name="job",
            field=models.CharField(blank=True, max_length=100, null=True),
        ),
        migrations.AlterField(
            model_name="helpershare",
            name="collection",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.DO_NOTHING, related_name="+", to="aggregation.collection"
            ),
        ),
        migrations.AlterField(
            model_name="leadershare",
            name="collection",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.DO_NOTHING, related_name="+", to="aggregation.collection"
            ),
        ),
        migrations.AddConstraint(
            model_name="helpershare",
            constraint=models.UniqueConstraint(fields=("collection", "pair"), name="unique_helpershare_pair"),
        ),
        migrations.AddConstraint(
            model_name="helperjob",
            constraint=models.UniqueConstraint(fields=("collection_key", "job"), name="unique_helper_job"),
        ),
        migrations.CreateModel(
            name="HelperReportRejection",
            fields=[],
            options={"verbose_name": "helper report rejection", "proxy": True, "indexes": [], "constraints": []},
            bases=("aggregation.reportrejection",),
        ),
        # Routed as the models they write are (pfs_base.db_router).
        migrations.RunPython(leader_pairs_name, migrations.RunPython.noop, hints={"model_name": "leadershare"}),
        migrations.RunPython(helper_rows_move, migrations.RunPython.noop, hints={"model_name": "helpershare"}),
    ]
