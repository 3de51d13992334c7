"""Django's PostgreSQL backend, with a health check that costs no round trip while the connection is sound,
and writes that wait for the COMMIT to go with it.

Django checks a persistent connection before the first query of every request (CONN_HEALTH_CHECKS) with a
`SELECT 1`: one round trip more on every API request and every lookup task. On this 2-core machine the first
round trip after an idle moment cost ~0.3 ms of CPU in the client and ~0.1 ms in PostgreSQL (a round trip
within a burst, ~0.06 and ~0.03). A connection that PostgreSQL has ended (a restart, pg_terminate_backend, an
idle timeout) has something to read while it idles: the server's FATAL message, or the end of the stream. So
a connection with nothing to read is taken as usable, and one with something to read gets Django's own
`SELECT 1`, which decides. A peer that vanished without a word is not caught by either check (`SELECT 1`
would wait for TCP to give up); the query that finds out fails, the request is a 503, and Django drops the
connection after it.

Writes that need no answer (`wait_for_commit`: INSERTs of rows whose ids are known, an UPDATE of a row the
transaction holds) wait for the COMMIT, and go with it in one round trip: a transaction then ends in the round
trip of its last writes instead of one of its own (on this machine each round trip after an idle moment cost
~0.3-1 ms, and two of them sat in every preflight stored, twice between two levels of lookups). Their errors
come with the COMMIT's answer, so the COMMIT fails and the transaction rolls back: an action whose writes fail
still fails, as the caller of `transaction.atomic` sees it. Any other statement sends what waits first, in
order: a read in the transaction sees its writes, a savepoint released keeps them, and nothing that waits
outlives its transaction (a rollback, or a rollback to a savepoint, which would undo them, drops them).
"""

from __future__ import annotations

import select
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from django.db.backends.postgresql import base
from django.db.backends.utils import debug_transaction

Statement = tuple[str, Sequence[Any]]


class DatabaseWrapper(base.DatabaseWrapper):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._waiting: list[Statement] = []
        # First in the list, so outermost: it runs before any wrapper a caller adds (a test's spy sees what
        # waited go first).
        self.execute_wrappers.append(self._waiting_first)

    def wait_for_commit(self, statements: Sequence[Statement]) -> bool:
        """Send these writes with the COMMIT, or with the next statement before it. They must need no answer:
        nothing reads what they return, and their errors may surface only at that statement. False (nothing
        queued) outside a transaction, or where parameters are bound on the client (psycopg pipelines only
        with server-side binding)."""
        if not self.in_atomic_block or not self.settings_dict["OPTIONS"].get("server_side_binding"):
            return False
        self._waiting.extend(statements)
        return True

    def take_waiting(self) -> list[Statement]:
        """What waits for the COMMIT, handed over: for a caller that sends it in a round trip of its own."""
        waiting, self._waiting = self._waiting, []
        return waiting

    def _waiting_first(
        self, execute: Callable[..., Any], sql: str, params: Any, many: bool, context: dict[str, Any]
    ) -> Any:
        if self._waiting:
            self._send_waiting(commit=False)
        return execute(sql, params, many, context)

    def _send_waiting(self, *, commit: bool) -> None:
        with self.pipelined(self.take_waiting(), commit=commit):
            pass

    @contextmanager
    def pipelined(self, statements: Sequence[Statement], *, commit: bool = False) -> Iterator[list[Any]]:
        """Run these statements in one round trip, and the COMMIT with them if `commit`; yields their cursors,
        closed on the way out. Through Django's cursors, so that they are logged and seen by execute wrappers
        like any other. A pipelined statement's error surfaces when the pipeline ends, outside the cursors'
        own wrapping: translated here as theirs would be (Django's error classes; a broken connection marked
        as such)."""
        self.ensure_connection()
        cursors = [self.cursor() for _ in statements]
        try:
            if len(cursors) == 1 and not commit:
                cursors[0].execute(*statements[0])  # one statement needs no pipeline
            else:
                with self.wrap_database_errors, self.connection.pipeline():
                    for cursor, (sql, params) in zip(cursors, statements, strict=True):
                        cursor.execute(sql, params)
                    if commit:
                        self.connection.commit()
            yield cursors
        finally:
            for cursor in cursors:
                cursor.close()

    def _commit(self) -> None:
        if self._waiting and self.connection is not None:
            with debug_transaction(self, "COMMIT"):
                self._send_waiting(commit=True)
            return
        super()._commit()

    def _rollback(self) -> None:
        self._waiting.clear()
        super()._rollback()

    def _savepoint_rollback(self, sid: str) -> None:
        # What waits was written after the last savepoint statement (which sent what waited before it), so
        # rolling back to any savepoint would undo it.
        self._waiting.clear()
        super()._savepoint_rollback(sid)

    def _close(self) -> None:
        self._waiting.clear()
        super()._close()

    def is_usable(self) -> bool:
        conn = self.connection
        if conn is None or conn.closed:
            return False
        try:
            readable, _, _ = select.select([conn.fileno()], [], [], 0)
        except (OSError, ValueError):  # the descriptor is gone
            return False
        return not readable or bool(super().is_usable())
