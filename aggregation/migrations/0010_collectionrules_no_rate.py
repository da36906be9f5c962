from django.db import migrations


class Migration(migrations.Migration):
    """Rate validation reads the issuer's signed count of tokens and each aggregator's own pacing floor
    (aggregation.batch_rules): no rate provisioned by the leader any more (issue 29, requirement 1)."""

    dependencies = [
        ("aggregation", "0009_issuedtoken_blinded_digest"),
    ]

    operations = [
        migrations.RemoveField(model_name="collectionrules", name="expected_rate"),
        migrations.RemoveField(model_name="collectionrules", name="rate_window"),
    ]
