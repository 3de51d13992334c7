"""The tamper-evident audit log: every event is a link whose hash covers its content and the previous hash.

An edited row no longer matches its own hash; a deleted or reordered row breaks the seq run or the
prev_hash link. Appends happen inside the caller's transaction, so an action whose audit write fails
rolls back with it: nothing is done unrecorded.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from console.models import AuditEvent
from preflight.canonical import digest

GENESIS = "sha256:" + "0" * 64

# Any constant works; it only has to be the same for every process appending to this database.
_ADVISORY_LOCK_KEY = 0x50524546  # "PREF"


def link_hash(
    *, seq: int, kind: str, execution_id: str | None, body: Any, created_at: datetime, prev_hash: str
) -> str:
    return digest(
        {
            "seq": seq,
            "kind": kind,
            "execution_id": execution_id,
            "body": body,
            # UTC with microseconds: what PostgreSQL and SQLite both store and give back unchanged.
            "created_at": created_at.astimezone(UTC).isoformat(),
            "prev_hash": prev_hash,
        }
    )


def _serialize_appends() -> None:
    # Two appends must not read the same "last" row. PostgreSQL: a transaction-scoped advisory lock (it
    # also covers the empty table, which a row lock cannot). SQLite serializes writers itself, and the
    # unique seq turns any race that slips through into a failed action, never a forked chain.
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_ADVISORY_LOCK_KEY])


def audit_append(*, kind: str, execution_id: uuid.UUID | str | None, body: Mapping[str, Any]) -> AuditEvent:
    if not connection.in_atomic_block:
        raise RuntimeError("audit_append must run inside the transaction of the action it records")
    _serialize_appends()
    # A plain read suffices under the lock (and a row lock would cost a heap write per append). The lock is
    # its own statement on purpose: in READ COMMITTED the next statement sees the previous holder's commit.
    last = AuditEvent.objects.order_by("-seq").only("seq", "hash").first()
    seq = last.seq + 1 if last else 1
    prev_hash = last.hash if last else GENESIS
    created_at = timezone.now()
    ex_id = str(execution_id) if execution_id is not None else None
    body = dict(body)
    event = AuditEvent(
        seq=seq,
        kind=kind,
        execution_id=ex_id,
        body=body,
        prev_hash=prev_hash,
        created_at=created_at,
        hash=link_hash(
            seq=seq, kind=kind, execution_id=ex_id, body=body, created_at=created_at, prev_hash=prev_hash
        ),
    )
    event.save(force_insert=True)
    return event


@dataclass(frozen=True, slots=True)
class Break:
    seq: int
    reason: str


def verify_chain(batch: int = 2000) -> Iterator[tuple[int, Break | None]]:
    """Walk the chain in seq order: (seq, None) per good link, then (seq, Break) at the first bad one."""
    expected_seq = 1
    prev_hash = GENESIS
    with transaction.atomic():
        rows = AuditEvent.objects.order_by("seq").values_list(
            "seq", "kind", "execution_id", "body", "created_at", "prev_hash", "hash"
        )
        for seq, kind, execution_id, body, created_at, stored_prev, stored_hash in rows.iterator(batch):
            if seq != expected_seq:
                what = "missing (deleted)" if seq > expected_seq else "out of order"
                yield seq, Break(expected_seq, f"seq {expected_seq} is {what}; found seq {seq} next")
                return
            if stored_prev != prev_hash:
                yield seq, Break(seq, "prev_hash does not match the hash of the previous event")
                return
            ex_id = str(execution_id) if execution_id is not None else None
            recomputed = link_hash(
                seq=seq,
                kind=kind,
                execution_id=ex_id,
                body=body,
                created_at=created_at,
                prev_hash=stored_prev,
            )
            if recomputed != stored_hash:
                yield seq, Break(seq, "content does not match its hash (the row was edited)")
                return
            yield seq, None
            prev_hash = stored_hash
            expected_seq += 1
