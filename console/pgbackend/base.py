"""Django's PostgreSQL backend, with a health check that costs no round trip while the connection is sound.

Django checks a persistent connection before the first query of every request (CONN_HEALTH_CHECKS) with a
`SELECT 1`: one round trip more on every API request and every lookup task. A connection that PostgreSQL has
ended (a restart, pg_terminate_backend, an idle timeout) has something to read while it idles: the server's
FATAL message, or the end of the stream. So a connection with nothing to read is taken as usable, and one
with something to read gets Django's own `SELECT 1`, which decides. A peer that vanished without a word is
not caught by either check (`SELECT 1` would wait for TCP to give up); the query that finds out fails, the
request is a 503, and Django drops the connection after it.
"""

from __future__ import annotations

import select

from django.db.backends.postgresql import base


class DatabaseWrapper(base.DatabaseWrapper):
    def is_usable(self) -> bool:
        conn = self.connection
        if conn is None or conn.closed:
            return False
        try:
            readable, _, _ = select.select([conn.fileno()], [], [], 0)
        except (OSError, ValueError):  # the descriptor is gone
            return False
        return not readable or bool(super().is_usable())
