# Prio3 (issue 18): each collection names its VDAF and keeps the verification key; stored shares name their field.

from django.db import migrations, models

import aggregation.models


class Migration(migrations.Migration):
    dependencies = [
        ("aggregation", "0005_stores_coarse_times_and_keys"),
    ]

    operations = [
        migrations.AddField(
            model_name="collectionrules",
            name="vdaf",
            field=models.CharField(default="multihot", max_length=16),
        ),
        migrations.AddField(
            model_name="collectionrules",
            name="verify_key",
            field=models.BinaryField(default=aggregation.models.verify_key_new),
        ),
        migrations.AddField(
            model_name="helpershare",
            name="field",
            field=models.CharField(
                choices=[("field64", "Field64"), ("field128", "Field128")], default="field64", max_length=16
            ),
        ),
        migrations.AddField(
            model_name="leadershare",
            name="field",
            field=models.CharField(
                choices=[("field64", "Field64"), ("field128", "Field128")], default="field64", max_length=16
            ),
        ),
        migrations.AlterField(
            model_name="helpershare",
            name="vector",
            field=models.BinaryField(
                help_text="Residues of ``field``, little-endian: 8 bytes each (Field64), 16 (Field128)."
            ),
        ),
        migrations.AlterField(
            model_name="leadershare",
            name="vector",
            field=models.BinaryField(
                help_text="Residues of ``field``, little-endian: 8 bytes each (Field64), 16 (Field128)."
            ),
        ),
    ]
