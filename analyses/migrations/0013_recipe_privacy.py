"""A recipe's privacy parameters in one JSON column (analyses.privacy_field), not seven.

Each stored recipe's column values are moved into ``privacy`` before the columns are dropped; the
way back fills them again. The numeric columns turn nullable first, so that the way back can add
them to a table that has rows.
"""

from django.db import migrations, models

import analyses.privacy_field

# The seven columns, named as privacy.parameters.PRIVACY_KEYS names them (frozen here: a
# migration must not change when the code does).
COLUMNS = ("noise", "mechanism", "epsilon0", "epsilon", "delta", "sampling_rate", "min_cohort")


def columns_into_privacy(apps, schema_editor):
    Recipe = apps.get_model("analyses", "Recipe")
    for row in Recipe.objects.values("pk", *COLUMNS):
        privacy = {name: row[name] for name in COLUMNS}
        Recipe.objects.filter(pk=row["pk"]).update(privacy=privacy)


def privacy_into_columns(apps, schema_editor):
    Recipe = apps.get_model("analyses", "Recipe")
    for pk, privacy in Recipe.objects.values_list("pk", "privacy"):
        Recipe.objects.filter(pk=pk).update(**privacy.as_json())


class Migration(migrations.Migration):

    dependencies = [
        ('analyses', '0012_policy_approval'),
    ]

    operations = [
        migrations.AddField(
            model_name='recipe',
            name='privacy',
            field=analyses.privacy_field.PrivacyParametersField(null=True),
        ),
        migrations.AlterField(model_name='recipe', name='epsilon', field=models.FloatField(null=True)),
        migrations.AlterField(model_name='recipe', name='delta', field=models.FloatField(null=True)),
        migrations.AlterField(model_name='recipe', name='sampling_rate', field=models.FloatField(null=True)),
        migrations.AlterField(model_name='recipe', name='min_cohort', field=models.PositiveIntegerField(null=True)),
        migrations.RunPython(columns_into_privacy, privacy_into_columns),
        migrations.RemoveField(model_name='recipe', name='noise'),
        migrations.RemoveField(model_name='recipe', name='mechanism'),
        migrations.RemoveField(model_name='recipe', name='epsilon0'),
        migrations.RemoveField(model_name='recipe', name='epsilon'),
        migrations.RemoveField(model_name='recipe', name='delta'),
        migrations.RemoveField(model_name='recipe', name='sampling_rate'),
        migrations.RemoveField(model_name='recipe', name='min_cohort'),
        migrations.AlterField(
            model_name='recipe',
            name='privacy',
            field=analyses.privacy_field.PrivacyParametersField(
                help_text="The privacy parameters, one JSON object (privacy.parameters.PrivacyParameters): noise, mechanism (blank with aggregator noise), epsilon0 (none with aggregator noise), epsilon, delta, sampling_rate and min_cohort (client noise: computed from epsilon0, epsilon and delta, or the recipe's larger one; aggregator noise: the recipe's, a hardening the guarantee does not depend on)."
            ),
        ),
    ]
