"""The migrations describe the models: a model change without its migration would ship a schema that is not
the one the code expects (0002 and 0003 were written by hand, so this is checked, not assumed)."""

from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connection


@pytest.mark.django_db  # makemigrations checks the applied history against the files
def test_the_models_need_no_migration_that_is_not_committed() -> None:
    out = StringIO()
    try:
        call_command("makemigrations", "--check", "--dry-run", stdout=out, stderr=out)
    except SystemExit as exc:  # --check exits 1 when a migration is missing
        pytest.fail(f"models and migrations disagree (exit {exc.code}):\n{out.getvalue()}")
    assert "No changes detected" in out.getvalue()


@pytest.mark.django_db
@pytest.mark.skipif("connection.vendor != 'postgresql'", reason="TOAST compression is PostgreSQL's")
def test_preflight_records_are_compressed_with_lz4_where_postgresql_has_it() -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT 'lz4' = ANY(enumvals) FROM pg_settings WHERE name = 'default_toast_compression'"
        )
        (has_lz4,) = cursor.fetchone()
        cursor.execute(
            "SELECT attcompression FROM pg_attribute"
            " WHERE attrelid = 'console_preflightrecord'::regclass AND attname = 'record'"
        )
        (compression,) = cursor.fetchone()

    assert compression == ("l" if has_lz4 else "")
