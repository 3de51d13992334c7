"""console/pgbackend: the health check of a persistent connection reads the socket, not the server, unless
the server has said something; a connection the server ended is found and replaced before a query fails.
Writes that need no answer wait for the COMMIT and go with it; whatever else happens first sends or drops
them as the transaction would have treated them."""

from __future__ import annotations

import select
import time
from collections.abc import Iterator
from unittest import mock

import pytest
from console_helpers import round_trips
from django.db import IntegrityError, connection, connections, transaction
from django.db.backends.postgresql import base as django_base

from console.pgbackend.base import DatabaseWrapper

pytestmark = pytest.mark.skipif(connection.vendor != "postgresql", reason="the backend is PostgreSQL's")


@pytest.fixture
def own_connection(db: None):  # type: ignore[no-untyped-def]
    """A connection of its own to the test database, outside the test's transaction."""
    conn = connections.create_connection("default")
    conn.ensure_connection()
    yield conn
    conn.close()


def test_postgresql_connections_use_the_projects_backend() -> None:
    assert isinstance(connections["default"], DatabaseWrapper)


def test_a_sound_idle_connection_is_usable_without_a_query(own_connection: DatabaseWrapper) -> None:
    with mock.patch.object(django_base.DatabaseWrapper, "is_usable", return_value=False) as select_1:
        assert own_connection.is_usable()
    select_1.assert_not_called()


def test_a_connection_the_server_ended_is_unusable_and_the_next_query_gets_a_new_one(
    own_connection: DatabaseWrapper,
) -> None:
    old_pid = own_connection.connection.info.backend_pid
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [old_pid])
    fd = own_connection.connection.fileno()
    deadline = time.monotonic() + 5
    while not select.select([fd], [], [], 0.05)[0]:
        assert time.monotonic() < deadline, "the server's goodbye never arrived"

    assert not own_connection.is_usable()

    own_connection.health_check_done = False  # as at the start of a request
    own_connection.close_if_health_check_failed()
    with own_connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        (new_pid,) = cursor.fetchone()
    assert new_pid != old_pid


def test_a_closed_connection_is_unusable(own_connection: DatabaseWrapper) -> None:
    own_connection.connection.close()
    assert not own_connection.is_usable()


@pytest.fixture
def probe(transactional_db: None) -> Iterator[None]:
    """A table of its own, committed around the test (the writes under test commit)."""
    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE pgbackend_probe (id integer PRIMARY KEY)")
    yield
    with connection.cursor() as cursor:
        cursor.execute("DROP TABLE pgbackend_probe")


INSERT = "INSERT INTO pgbackend_probe (id) VALUES (%s)"


def ids() -> list[int]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT id FROM pgbackend_probe ORDER BY id")
        return [row[0] for row in cursor.fetchall()]


def shape(sql: str) -> str:
    return " ".join(sql.split()[:2])


def test_writes_that_wait_go_with_the_commit_in_one_round_trip(probe: None) -> None:
    with round_trips(shape) as trips, transaction.atomic():
        assert connection.wait_for_commit([(INSERT, [1]), (INSERT, [2])])

    assert trips == [["INSERT INTO", "INSERT INTO", "COMMIT"]]
    assert ids() == [1, 2]


def test_a_waiting_write_that_fails_fails_the_commit_and_the_transaction_rolls_back(probe: None) -> None:
    with pytest.raises(IntegrityError), transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(INSERT, [1])
        connection.wait_for_commit([(INSERT, [2]), (INSERT, [2])])

    assert ids() == []
    assert not connection.in_atomic_block
    assert ids() == []  # the connection is sound for the next transaction


def test_a_statement_in_the_transaction_sends_what_waits_first_and_sees_it(probe: None) -> None:
    with round_trips(shape) as trips, transaction.atomic():
        connection.wait_for_commit([(INSERT, [1])])
        assert ids() == [1]

    assert trips == [["INSERT INTO"], ["SELECT id"], ["COMMIT"]]


def test_a_released_savepoint_keeps_what_waited_inside_it(probe: None) -> None:
    with transaction.atomic():
        with transaction.atomic():
            connection.wait_for_commit([(INSERT, [1])])
        connection.wait_for_commit([(INSERT, [2])])

    assert ids() == [1, 2]


def test_a_rollback_to_a_savepoint_drops_what_waited_inside_it_unsent(probe: None) -> None:
    with round_trips(shape) as trips, transaction.atomic():
        connection.wait_for_commit([(INSERT, [1])])
        with pytest.raises(ZeroDivisionError), transaction.atomic():
            connection.wait_for_commit([(INSERT, [2])])
            raise ZeroDivisionError
        connection.wait_for_commit([(INSERT, [3])])

    assert ids() == [1, 3]
    sent = [statement for trip in trips for statement in trip]
    assert sent.count("INSERT INTO") == 2  # the first sent by the SAVEPOINT, the third with the COMMIT


def test_a_rolled_back_transaction_sends_nothing_that_waited(probe: None) -> None:
    with round_trips(shape) as trips, pytest.raises(ZeroDivisionError), transaction.atomic():
        connection.wait_for_commit([(INSERT, [1])])
        raise ZeroDivisionError

    assert trips == []
    assert ids() == []


def test_outside_a_transaction_nothing_waits(probe: None) -> None:
    assert not connection.in_atomic_block
    assert not connection.wait_for_commit([(INSERT, [1])])
    assert ids() == []
