"""The plain-SQL reads of console/storage.py: `raw_reads` reads what `raw_rows` would, and on PostgreSQL a
read pipelined after a lock sees the previous holder's commit."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from typing import Any

import pytest
from django.db import (
    DataError,
    OperationalError,
    connection,
    connections,
    transaction,
)

from console import models, storage

on_postgresql = pytest.mark.skipif(connection.vendor != "postgresql", reason="pipelines are PostgreSQL's")

LOCK_KEY = 7_341_905  # an advisory lock no code of the project takes

AT = datetime(2030, 2, 3, 4, 5, 6, 789012, tzinfo=UTC)


@pytest.fixture
def execution(db: None) -> models.Execution:
    return models.Execution.objects.create(principal="user:test", request={}, verdict="measure")


def observation(execution: models.Execution, n: int, **fields: Any) -> models.Observation:
    """An unsaved lookup row whose every column differs from the other rows' (by `n`)."""
    defaults: dict[str, Any] = {
        "measure": f"balance_{n}",
        "lookup": "bank.balance",
        "args": {"account": f"DE{n:020d}", "options": {"depth": n, "tags": ["a", None]}},
        "args_digest": f"sha256:{n:064x}",
        "key": f"balance_{n}#{n:x}",
        "task_key": f"{execution.pk}:balance_{n}:{n}",
    }
    return models.Observation(execution=execution, **(defaults | fields))


def columns(obj: models.Observation) -> dict[str, Any]:
    return {f.attname: getattr(obj, f.attname) for f in models.Observation._meta.concrete_fields}


def varied_rows(execution: models.Execution, first: int, count: int) -> list[models.Observation]:
    """Rows with a nested JSON value, a JSON value of None (SQL NULL), an error, a string and no time."""
    kinds: list[dict[str, Any]] = [
        {"value": {"balance": {"amount": 12.5, "currency": "EUR"}, "none": None}, "observed_at": AT},
        {"value": None, "error": "bank.balance: ledger offline", "observed_at": AT},
        {"value": "O'Brien: ünïcode €", "observed_at": None},
        {"value": [1, 2.5, "three", None]},
    ]
    return [observation(execution, n, **kinds[n % len(kinds)]) for n in range(first, first + count)]


def reads_of(execution: models.Execution) -> list[tuple[str, list[Any]]]:
    obs = storage.table(models.Observation)
    pk = models.Execution._meta.get_field("id").get_db_prep_value(execution.pk, connection)
    return [
        (f"SELECT id, key, args FROM {obs} WHERE execution_id = %s ORDER BY id", [pk]),
        (f"SELECT id FROM {obs} WHERE key = %s", ["no such key"]),  # no rows
        (f"SELECT count(*), max(key) FROM {obs} WHERE execution_id = %s", [pk]),
    ]


def test_a_prefetched_read_is_answered_once_from_what_was_read_together(execution: models.Execution) -> None:
    models.Observation.objects.bulk_create(varied_rows(execution, 0, 3))
    rows_read, count_read = reads_of(execution)[0], reads_of(execution)[2]
    expected = storage.raw_rows(*rows_read)
    sent: list[str] = []

    def spy(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        sent.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(spy), storage.prefetched(rows_read):
        assert len(sent) == 1  # read now
        with storage.prefetched(rows_read, count_read):  # an inner block reads only what is new to it
            assert len(sent) == 2
            assert storage.raw_rows(*rows_read) == expected
            assert storage.raw_rows(*count_read) == [(3, expected[-1][1])]
            assert len(sent) == 2  # both answered from what was read
        models.Observation.objects.bulk_create(varied_rows(execution, 10, 1))
        assert len(storage.raw_rows(*rows_read)) == 4  # answered once, in the inner block: now the database
        assert sent[-1] == rows_read[0]
    with storage.prefetched(count_read):
        pass  # read and not asked for: not kept
    assert storage.raw_rows(*count_read)[0][0] == 4


def test_raw_reads_returns_what_separate_raw_rows_calls_return_in_order(execution: models.Execution) -> None:
    models.Observation.objects.bulk_create(varied_rows(execution, 0, 3))
    reads = reads_of(execution)

    assert storage.raw_reads(*reads) == [storage.raw_rows(sql, params) for sql, params in reads]
    assert [len(rows) for rows in storage.raw_reads(*reads)] == [3, 0, 1]


@on_postgresql
def test_on_postgresql_a_failing_pipelined_read_raises_djangos_database_error_as_raw_rows_does(
    execution: models.Execution,
) -> None:
    with pytest.raises(DataError), transaction.atomic():
        storage.raw_rows("SELECT 1 / 0", [])
    with pytest.raises(DataError), transaction.atomic():
        storage.raw_reads(("SELECT 1", []), ("SELECT 1 / 0", []))
    # A timeout (or an outage) is Django's OperationalError, which the API answers 503, and marks the
    # connection to be checked before it is used again.
    with pytest.raises(OperationalError), transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL statement_timeout = 20")
        storage.raw_reads(("SELECT 1", []), ("SELECT pg_sleep(0.2)", []))
    assert connection.errors_occurred


@on_postgresql
@pytest.mark.django_db(transaction=True)
def test_on_postgresql_a_read_pipelined_after_a_lock_sees_what_the_previous_holder_committed() -> None:
    assert connection.settings_dict["OPTIONS"].get("server_side_binding") is True  # else no pipeline
    scratch = "test_records_sql_scratch"
    with connection.cursor() as cursor:
        cursor.execute(f"CREATE TABLE {scratch} (id integer)")
    holding, failures = threading.Event(), []

    def holder() -> None:
        # Its own connection (Django's are per thread): takes the lock, writes, and commits only once the
        # test's connection is waiting for the lock, so the read's snapshot cannot predate the lock wait.
        try:
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_xact_lock(%s)", [LOCK_KEY])
                cursor.execute(f"INSERT INTO {scratch} VALUES (1)")
                holding.set()
                if not waiter_seen(cursor):
                    failures.append("the reader never waited for the lock")
        except Exception as exc:  # reported by the test, not lost in this thread
            failures.append(repr(exc))
            holding.set()
        finally:
            connections.close_all()

    thread = threading.Thread(target=holder)
    try:
        thread.start()
        assert holding.wait(10)
        with transaction.atomic():
            _, (count,) = storage.raw_reads(
                ("SELECT pg_advisory_xact_lock(%s)", [LOCK_KEY]), (f"SELECT count(*) FROM {scratch}", [])
            )
        thread.join(10)
        assert failures == []
        assert count == (1,)
    finally:
        thread.join(10)
        with connection.cursor() as cursor:
            cursor.execute(f"DROP TABLE {scratch}")


def waiter_seen(cursor: Any, timeout_s: float = 10.0) -> bool:
    """Whether another session comes to wait for LOCK_KEY within the timeout (pg_locks is read live)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        cursor.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND objid = %s"
            " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
            [LOCK_KEY],
        )
        if cursor.fetchone()[0]:
            return True
        time.sleep(0.01)
    return False
