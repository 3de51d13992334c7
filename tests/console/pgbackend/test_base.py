"""console/pgbackend: the health check of a persistent connection reads the socket, not the server, unless
the server has said something; a connection the server ended is found and replaced before a query fails."""

from __future__ import annotations

import select
import time
from unittest import mock

import pytest
from django.db import connection, connections
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
