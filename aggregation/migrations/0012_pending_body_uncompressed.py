"""PostgreSQL stores PendingReport.body out of line without trying to compress it (STORAGE EXTERNAL).

A body is sealed shares in base64: pglz cannot shrink it by the quarter it asks for, gives up, and
stores it as it is, after spending about 0.13 ms of the server's CPU a 25 KB body on the attempt
(bench/results/upload_prio3.md). SQLite has no such setting: nothing to do there.
"""

from django.db import migrations


def _storage(storage: str):
    def apply(apps, schema_editor) -> None:
        if schema_editor.connection.vendor != "postgresql":
            return
        table = schema_editor.quote_name(apps.get_model("aggregation", "PendingReport")._meta.db_table)
        schema_editor.execute(f"ALTER TABLE {table} ALTER COLUMN body SET STORAGE {storage}")

    return apply


class Migration(migrations.Migration):
    dependencies = [("aggregation", "0011_poplar1")]

    operations = [migrations.RunPython(_storage("EXTERNAL"), _storage("EXTENDED"))]
