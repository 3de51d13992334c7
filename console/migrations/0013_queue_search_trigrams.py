# The queue's search is a case-insensitive substring match (icontains) over the summary and the
# principal: without an index each search reads every row (bench/console.py: ~60 ms at 10,000 held). A
# trigram GIN index answers it from the index. PostgreSQL only: the extension and the index are skipped on
# SQLite (the embedded demo), where a search reads its few rows as before.

from typing import Any

from django.contrib.postgres.operations import TrigramExtension
from django.db import migrations

# Of UPPER(column): Django writes `icontains` on PostgreSQL as UPPER(column) LIKE UPPER(%s), which an index
# of the plain column does not serve. In SQL: Django 6.1 writes GinIndex(OpClass(Upper(...))) with the
# operator class inside the expression's parentheses, which PostgreSQL refuses.
INDEXES = {"execution_summary_trgm": "summary", "execution_principal_trgm": "principal"}


def _add(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor == "postgresql":
        for name, column in INDEXES.items():
            schema_editor.execute(
                f'CREATE INDEX "{name}" ON "console_execution" USING gin (UPPER("{column}") gin_trgm_ops)'
            )


def _remove(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor == "postgresql":
        for name in INDEXES:
            schema_editor.execute(f'DROP INDEX IF EXISTS "{name}"')


class Migration(migrations.Migration):
    dependencies = [
        ("console", "0012_review_claims"),
    ]

    operations = [
        TrigramExtension(),  # itself a no-op on other databases
        migrations.RunPython(_add, _remove, elidable=False),
    ]
