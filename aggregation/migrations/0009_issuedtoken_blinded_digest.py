from django.db import migrations, models


class Migration(migrations.Migration):
    """The issuer recognises a device's retry of its token request (the same blinded message)."""

    dependencies = [
        ("aggregation", "0008_helper_service"),
    ]

    operations = [
        migrations.AddField(
            model_name="issuedtoken",
            name="blinded_digest",
            field=models.CharField(blank=True, default="", max_length=64),
        ),
    ]
