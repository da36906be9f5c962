# Prio3 (issue 18): a simulated fleet may send per-device Prio3 reports, verified by both aggregators.

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("devices", "0004_real_devices"),
    ]

    operations = [
        migrations.AddField(
            model_name="fleet",
            name="prio3_reports",
            field=models.BooleanField(
                default=False, help_text="Simulated devices send per-device Prio3 reports instead of pre-summed shares."
            ),
        ),
    ]
