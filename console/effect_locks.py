"""One lock per effect key, held from the gate's re-check until the call's outcome is recorded, so two runs
that change one thing (one order) are one after the other and the second re-measures what the first did.

PostgreSQL: a session-level advisory lock, taken with a `lock_timeout` and not tied to a transaction (the
gate commits the consumed nonce and records the outcome in transactions of their own, and no transaction is
held open across the downstream call). If the connection drops, PostgreSQL releases the lock with it.
SQLite (embedded mode, one process): a lock per key in the process.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from django.db import DatabaseError, OperationalError, connection, transaction

from console.errors import Conflict

__all__ = ["effect_lock"]

logger = logging.getLogger(__name__)

_local_guard = threading.Lock()
_local: dict[str, threading.Lock] = {}


@contextmanager
def effect_lock(key: str, *, timeout_s: float) -> Iterator[None]:
    """Hold the lock of `key`; Conflict `effect_busy` if another run holds it for longer than `timeout_s`."""
    if connection.vendor == "postgresql":
        with _advisory(key, timeout_s):
            yield
        return
    with _local_guard:
        lock = _local.setdefault(key, threading.Lock())
    if not lock.acquire(timeout=timeout_s):
        raise Conflict("effect_busy", f"another run of {key!r} is under way; try again")
    try:
        yield
    finally:
        lock.release()


@contextmanager
def _advisory(key: str, timeout_s: float) -> Iterator[None]:
    # Advisory locks are keyed by a bigint: the first 8 bytes of the key's SHA-256, signed.
    lock_id = int.from_bytes(hashlib.sha256(key.encode("utf-8")).digest()[:8], "big", signed=True)
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            # lock_timeout bounds the wait (it applies to advisory locks); set_config(..., true) is SET LOCAL.
            cursor.execute(
                "SELECT set_config('lock_timeout', %s, true)", [f"{max(1, int(timeout_s * 1000))}ms"]
            )
            cursor.execute("SELECT pg_advisory_lock(%s)", [lock_id])
    except OperationalError:
        raise Conflict("effect_busy", f"another run of {key!r} is under way; try again") from None
    try:
        yield
    finally:
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(%s)", [lock_id])
        except DatabaseError:
            # The session is gone, and its locks with it.
            logger.warning("could not release the effect lock of %r", key, exc_info=True)
