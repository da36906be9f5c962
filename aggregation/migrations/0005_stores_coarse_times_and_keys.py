# Separated stores (issue 17): arrival times as coarse as rate validation needs, retired
# aggregator keys kept until their collections close, issuer keys sealed under a wrapping key.

import aggregation.batch_rules
from django.db import migrations, models


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
    ]
