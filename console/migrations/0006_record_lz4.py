# A preflight record (~6 KB of JSON for the demo bank's transfer) is compressed by PostgreSQL on every INSERT.
# lz4 compresses it ~0.1 ms faster than the default pglz (bench: 191-313 vs 288-385 us an INSERT), for ~13%
# more bytes stored; every preflight, and two per level of lookups, writes one. Where PostgreSQL was built
# without lz4, or on another database, nothing changes. Rows written before keep their compression.

from typing import Any

from django.db import migrations


def _lz4(apps: Any, schema_editor: Any) -> None:
    connection = schema_editor.connection
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT 'lz4' = ANY(enumvals) FROM pg_settings WHERE name = 'default_toast_compression'"
        )
        row = cursor.fetchone()
        if row and row[0]:
            cursor.execute("ALTER TABLE console_preflightrecord ALTER COLUMN record SET COMPRESSION lz4")


def _pglz(apps: Any, schema_editor: Any) -> None:
    connection = schema_editor.connection
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("ALTER TABLE console_preflightrecord ALTER COLUMN record SET COMPRESSION default")


class Migration(migrations.Migration):
    dependencies = [
        ("console", "0005_lean_indexes"),
    ]

    operations = [migrations.RunPython(_lz4, _pglz, elidable=False)]
