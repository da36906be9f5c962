# Separated stores (issue 17): arrival times as coarse as rate validation needs, retired
# aggregator keys kept until their collections close, issuer keys sealed under a wrapping key.

import aggregation.batch_rules
from django.db import connections, migrations, models

# Each of the issuer's models: its unique key, and the other fields to copy (the last one is set on
# creation, auto_now_add, so it is written again after the copy).
ISSUER_TABLES = (
    ("TokenIssuerKey", ("collection_key",), ("modulus", "public_exponent", "prime_p", "prime_q"), "created_at"),
    ("IssuedToken", ("collection_key", "device_digest"), (), "issued_on"),
)


def issuer_rows_move(apps, schema_editor):
    """Run on the issuer's store: a database made before it had its own holds the issuer's rows in the
    default one. Copy them here (an open collection keeps its token key, a device its one token),
    then empty the old tables, so that the aggregators' database keeps no record of who got a token."""
    issuer = schema_editor.connection.alias
    if issuer == "default":
        return
    present = set(connections["default"].introspection.table_names())
    for name, unique, others, created in ISSUER_TABLES:
        model = apps.get_model("aggregation", name)
        if model._meta.db_table not in present:
            continue
        for row in model.objects.using("default").values(*unique, *others, created):
            key = {field: row[field] for field in unique}
            model.objects.using(issuer).get_or_create(**key, defaults={field: row[field] for field in others})
            model.objects.using(issuer).filter(**key).update(**{created: row[created]})
        model.objects.using("default").all().delete()


class Migration(migrations.Migration):
    dependencies = [
        ("aggregation", "0004_token_key_per_collection"),
    ]

    operations = [
        migrations.AddField(
            model_name="aggregatorkey",
            name="retired_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="tokenissuerkey",
            name="wrapped",
            field=models.BinaryField(blank=True, default=b""),
        ),
        migrations.AddField(
            model_name="tokenissuerkey",
            name="wrapping_key",
            field=models.CharField(blank=True, help_text="Which wrapping key sealed it.", max_length=16),
        ),
        migrations.AlterField(
            model_name="aggregatorkey",
            name="role",
            field=models.CharField(max_length=16),
        ),
        migrations.AlterField(
            model_name="collection",
            name="created_at",
            field=models.DateTimeField(default=aggregation.batch_rules.arrival_coarse),
        ),
        migrations.AlterField(
            model_name="helpershare",
            name="created_at",
            field=models.DateTimeField(default=aggregation.batch_rules.arrival_coarse),
        ),
        migrations.AlterField(
            model_name="leadershare",
            name="created_at",
            field=models.DateTimeField(default=aggregation.batch_rules.arrival_coarse),
        ),
        migrations.AlterField(
            model_name="pendingreport",
            name="received_at",
            field=models.DateTimeField(default=aggregation.batch_rules.arrival_coarse),
        ),
        migrations.AddConstraint(
            model_name="aggregatorkey",
            constraint=models.UniqueConstraint(
                condition=models.Q(("retired_at__isnull", True)), fields=("role",), name="one_current_aggregator_key"
            ),
        ),
        # Routed as the issuer's models are (pfs_base.db_router): it runs on the issuer's store only.
        migrations.RunPython(issuer_rows_move, migrations.RunPython.noop, hints={"model_name": "tokenissuerkey"}),
    ]
