"""The plain-SQL reads of console/storage.py fail as the ORM's reads do."""

from __future__ import annotations

import pytest
from django.db import DataError, OperationalError, connection, transaction

from console import storage


@pytest.mark.django_db
@pytest.mark.skipif(connection.vendor != "postgresql", reason="statement_timeout is PostgreSQL's")
def test_a_failing_raw_read_raises_djangos_database_errors() -> None:
    with pytest.raises(DataError), transaction.atomic():
        storage.raw_rows("SELECT 1 / 0", [])
    # A timeout (or an outage) is Django's OperationalError, which the API answers 503, and marks the
    # connection to be checked before it is used again.
    with pytest.raises(OperationalError), transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL statement_timeout = 20")
        storage.raw_rows("SELECT pg_sleep(0.2)", [])
    assert connection.errors_occurred
