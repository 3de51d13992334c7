"""The tamper-evident audit log: every event is a link whose hash covers its content and the previous hash.

An edited row no longer matches its own hash; a deleted or reordered row breaks the seq run or the
prev_hash link. Appends happen inside the caller's transaction, so an action whose audit write fails
rolls back with it: nothing is done unrecorded.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from console.models import AuditEvent
from console.records import Read, insert_rows, per_vendor, prefetched_rows, raw_reads
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


def chain_head_reads() -> list[Read]:
    """The chain's lock and head as reads, for an action that will append to send with reads of its own,
    where the connection can pipeline (`records.prefetched`; else none): its append then costs no round
    trip of its own, and with the writes waiting for the COMMIT (console/pgbackend) storing a preflight is
    one round trip. The lock is then held from those reads to the COMMIT: for a preflight, while its engine
    runs (~0.5 ms), instead of for the two round trips it took before. Taken after any row lock of the
    action's (the order every appender keeps)."""
    options = connection.settings_dict["OPTIONS"]
    if connection.vendor != "postgresql" or not options.get("server_side_binding"):
        return []
    return list(_head_reads())


@per_vendor
def _head_reads() -> tuple[Read, Read]:
    lock = f"SELECT pg_advisory_xact_lock({_ADVISORY_LOCK_KEY:d})"
    table = connection.ops.quote_name(AuditEvent._meta.db_table)
    # The read must be a statement of its own, after the lock: in READ COMMITTED each statement takes its
    # snapshot when it starts, so only then does it see the previous lock holder's commit. A plain read
    # suffices under the lock (a row lock would cost a heap write per append).
    return (lock, ()), (f"SELECT seq, hash FROM {table} ORDER BY seq DESC LIMIT 1", ())


def _chain_head() -> tuple[int, str]:
    """(seq, hash) of the last event, read under the append lock; (0, GENESIS) for an empty chain."""
    # Two appends must not read the same "last" row. PostgreSQL: a transaction-scoped advisory lock (it
    # also covers the empty table, which a row lock cannot). SQLite serializes writers itself, and the
    # unique seq turns any race that slips through into a failed action, never a forked chain.
    if connection.vendor == "postgresql":
        (lock, _), (head, _) = _head_reads()
        if connection.settings_dict["OPTIONS"].get("server_side_binding"):
            # Both in one round trip, still two statements (`raw_reads`), unless read already
            # (`chain_head_reads`). The lock is held until commit, so each round trip less here is less time
            # every other writer waits.
            _, rows = prefetched_rows(*_head_reads()) or raw_reads(*_head_reads())
            row = rows[0] if rows else None
        else:
            with connection.cursor() as cursor:
                # Client-side binding sends a query without parameters over the simple protocol, which takes
                # several statements (each with its own snapshot): lock and read in one round trip.
                cursor.execute(f"{lock}; {head}")
                cursor.nextset()
                row = cursor.fetchone()
    else:
        row = AuditEvent.objects.order_by("-seq").values_list("seq", "hash").first()
    return (int(row[0]), str(row[1])) if row else (0, GENESIS)


def _write(events: list[AuditEvent]) -> None:
    """Link the events to the chain, in order, and insert them: one lock, one read, one INSERT."""
    if not connection.in_atomic_block:
        raise RuntimeError("audit events are written inside the transaction of the action they record")
    seq, prev_hash = _chain_head()
    for event in events:
        seq += 1
        event.seq = seq
        event.prev_hash = prev_hash
        event.created_at = timezone.now()
        event.hash = prev_hash = link_hash(
            seq=seq,
            kind=event.kind,
            execution_id=event.execution_id,
            body=event.body,
            created_at=event.created_at,
            prev_hash=event.prev_hash,
        )
    # Nobody reads an event's own id: inside `batched_writes` the INSERT waits, for the COMMIT at the latest.
    insert_rows(events, ids=False)


_batches = threading.local()


@contextmanager
def audit_batch() -> Iterator[None]:
    """Appends inside this block are linked and written together when it ends, still inside the caller's
    transaction, in the order they were made (nested blocks join the outermost one). One action that
    appends several events (a preflight, its gap report, its grant) then takes the chain lock once, and
    only for the write at its end rather than from its first append until commit. If a block raises, its
    appends are dropped with the work they record; if the write fails, the block raises.

    Inside a block, do not recover from an exception of a savepoint that appended: its events would still
    be written (wrap such a savepoint in a block of its own)."""
    outer = getattr(_batches, "events", None)
    if outer is not None:
        mark = len(outer)
        try:
            yield
        except BaseException:
            # Services are atomic: what this block recorded rolls back with its savepoint, so do its events.
            del outer[mark:]
            raise
        return
    events: list[AuditEvent] = []
    _batches.events = events
    try:
        yield
    finally:
        _batches.events = None
    if events:
        _write(events)


def audit_append(*, kind: str, execution_id: uuid.UUID | str | None, body: Mapping[str, Any]) -> AuditEvent:
    """Append one event (inside an `audit_batch`, when the batch ends). seq, prev_hash, created_at and hash
    are set when it is written."""
    if not connection.in_atomic_block:
        raise RuntimeError("audit_append must run inside the transaction of the action it records")
    event = AuditEvent(
        kind=kind,
        execution_id=str(execution_id) if execution_id is not None else None,
        body=dict(body),
    )
    batch = getattr(_batches, "events", None)
    if batch is not None:
        batch.append(event)
    else:
        _write([event])
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


@dataclass(frozen=True, slots=True)
class ChainReport:
    """What `verify_audit` and the console's "verify chain" report: the head to keep, or the first break."""

    events: int
    head: int | None  # seq of the last good event
    records: int  # preflight records that still hash to their digest
    broken: str | None  # the first broken link or record, in words; None when everything verified

    @property
    def ok(self) -> bool:
        return self.broken is None


def verify_all() -> ChainReport:
    """Walk the audit chain, then check every stored preflight record against its own digest."""
    from console.models import PreflightRecord
    from console.records import record_body_digest

    events = 0
    head = None
    for seq, broken in verify_chain():
        if broken is not None:
            return ChainReport(events, head, 0, f"audit chain broken at seq {broken.seq}: {broken.reason}")
        events, head = events + 1, seq
    rows = PreflightRecord.objects.order_by("pk").values_list(
        "execution_id", "seq", "record", "record_digest"
    )
    records = 0
    for execution_id, seq, record, stored in rows.iterator(500):
        if record_body_digest(record) != stored or record.get("record_digest") != stored:
            return ChainReport(
                events,
                head,
                records,
                f"record {execution_id}#{seq} does not match its digest (the row was edited)",
            )
        records += 1
    return ChainReport(events, head, records, None)
