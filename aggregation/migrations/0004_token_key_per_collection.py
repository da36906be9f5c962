# A token issuer key per collection (RFC 9474 blind signatures), and issue times kept to the day.

import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("aggregation", "0003_pending_reports"),
    ]

    operations = [
        migrations.AddField(
            model_name="tokenissuerkey",
            name="collection_key",
            field=models.CharField(default="", max_length=200),
            preserve_default=False,
        ),
        migrations.AlterField(
            model_name="tokenissuerkey",
            name="collection_key",
            field=models.CharField(max_length=200, unique=True),
        ),
        migrations.RemoveField(model_name="issuedtoken", name="issued_at"),
        migrations.AddField(
            model_name="issuedtoken",
            name="issued_on",
            field=models.DateField(auto_now_add=True, default=django.utils.timezone.now),
            preserve_default=False,
        ),
    ]
