# The queue's search is a case-insensitive substring match (ILIKE '%word%') over the summary and the
# principal: without an index each search reads every row (bench/console.py: ~150 ms at 10,000 held). A
# trigram GIN index answers it from the index. PostgreSQL only: the extension and the index are skipped on
# SQLite (the embedded demo), where a search reads its few rows as before.

from typing import Any

from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.operations import TrigramExtension
from django.db import migrations

INDEXES = (
    GinIndex(fields=["summary"], opclasses=["gin_trgm_ops"], name="execution_summary_trgm"),
    GinIndex(fields=["principal"], opclasses=["gin_trgm_ops"], name="execution_principal_trgm"),
)


def _add(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor == "postgresql":
        for index in INDEXES:
            schema_editor.add_index(apps.get_model("console", "Execution"), index)


def _remove(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor == "postgresql":
        for index in INDEXES:
            schema_editor.remove_index(apps.get_model("console", "Execution"), index)


class Migration(migrations.Migration):
    dependencies = [
        ("console", "0012_review_claims"),
    ]

    operations = [
        TrigramExtension(),  # itself a no-op on other databases
        migrations.RunPython(_add, _remove, elidable=False),
    ]
