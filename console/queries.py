"""The few writes the ORM cannot say in one statement, each with why. Everything else writes through the ORM.

Each is built once per database vendor (`storage.per_vendor`); on a database without data-modifying CTEs
(SQLite, the embedded one, where a round trip costs nothing) the same write goes through the ORM instead.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from django.db import connection

from console import storage
from console.models import AuditChain, AuditEvent, Observation


def advance_head(chain: int, n: int) -> tuple[int, str] | None:
    """(seq, hash) of a chain's head before n appends, its row locked until commit and its seq moved on by n;
    None if the chain has no head row yet. Read in the statement that locks it, so after waiting for another
    append it is that append's head (PostgreSQL re-reads a row it waited for).

    An UPDATE ... RETURNING: the ORM's update returns no row, and its select_for_update read cost several
    times the CPU of this statement on every audited action."""
    if connection.vendor != "postgresql":  # no row locks: one writer at a time
        return AuditChain.objects.filter(chain=chain).values_list("seq", "hash").first()
    rows = storage.raw_rows(_advance_head_sql(), [n, chain, n])
    return (int(rows[0][0]), str(rows[0][1])) if rows else None


@storage.per_vendor
def _advance_head_sql() -> str:
    return f"UPDATE {storage.table(AuditChain)} SET seq = seq + %s WHERE chain = %s RETURNING seq - %s, hash"


def append_links(events: Sequence[AuditEvent], heads: Mapping[int, tuple[int, str]]) -> None:
    """Insert linked audit events and move their chains' heads (locked by `advance_head`) to their last links.

    One statement: the ORM says it in two (bulk_create, then an UPDATE per head), and every round trip
    between the head lock and COMMIT keeps every other append of that chain waiting."""
    if connection.vendor != "postgresql":
        AuditEvent.objects.bulk_create(events)
        for chain, (seq, hash_) in heads.items():
            AuditChain.objects.filter(chain=chain).update(seq=seq, hash=hash_)
        return
    params: list[list[Any]] = [
        [e.seq for e in events],
        [e.chain for e in events],
        [e.kind for e in events],
        [e.execution_id for e in events],
        [json.dumps(e.body) for e in events],  # as JSONField writes it
        [e.prev_hash for e in events],
        [e.hash for e in events],
        [e.created_at for e in events],
        list(heads),
        [seq for seq, _ in heads.values()],
        [hash_ for _, hash_ in heads.values()],
    ]
    with connection.cursor() as cursor:
        cursor.execute(_append_links_sql(), params)
    for event in events:
        event._state.adding = False
        event._state.db = connection.alias


@storage.per_vendor
def _append_links_sql() -> str:
    columns = ", ".join(connection.ops.quote_name(f) for f in _LINK_COLUMNS)
    return (
        f"WITH links AS (INSERT INTO {storage.table(AuditEvent)} ({columns})"
        " SELECT s, c, k, e, b::jsonb, p, h, t FROM unnest(%s::bigint[], %s::smallint[], %s::text[],"
        " %s::uuid[], %s::text[], %s::text[], %s::text[], %s::timestamptz[]) AS u(s, c, k, e, b, p, h, t))"
        f" UPDATE {storage.table(AuditChain)} AS head SET seq = v.seq, hash = v.hash"
        " FROM unnest(%s::smallint[], %s::bigint[], %s::text[]) AS v(chain, seq, hash)"
        " WHERE head.chain = v.chain"
    )


_LINK_COLUMNS = ("seq", "chain", "kind", "execution_id", "body", "prev_hash", "hash", "created_at")


def fill_read(results: Sequence[tuple[int, Any, str | None, datetime]]) -> storage.Read:
    """Lookups' results (observation id, value, error, observed at) recorded where still pending, as a read of
    the ids it recorded (PostgreSQL). The ORM says it as one CASE per row and column, for far more CPU."""
    value, observed_at = Observation._meta.get_field("value"), Observation._meta.get_field("observed_at")
    params = [
        [pk for pk, _, _, _ in results],
        [value.get_db_prep_save(v, connection) for _, v, _, _ in results],
        [error for _, _, error, _ in results],
        [observed_at.get_db_prep_save(at, connection) for _, _, _, at in results],
    ]
    return _fill_sql(), params


@storage.per_vendor
def _fill_sql() -> str:
    return (
        f"UPDATE {storage.table(Observation)} o"
        " SET value = r.value, error = r.error, observed_at = r.observed_at"
        " FROM unnest(%s::bigint[], %s::jsonb[], %s::text[], %s::timestamptz[])"
        " AS r(id, value, error, observed_at)"
        " WHERE o.id = r.id AND o.observed_at IS NULL RETURNING o.id"
    )
