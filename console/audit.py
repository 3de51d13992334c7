"""The tamper-evident audit log: every event is a link whose hash covers its content and the previous hash.

An edited row no longer matches its own hash; a deleted or reordered row breaks the seq run or the
prev_hash link. Appends happen inside the caller's transaction, so an action whose audit write fails
rolls back with it: nothing is done unrecorded.
"""

from __future__ import annotations

import hashlib
import threading
import uuid
from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from console import queries
from console.models import AuditChain, AuditEvent, PreflightRecord
from console.storage import record_body_digest
from preflight.canonical import canonical_json

GENESIS = "sha256:" + "0" * 64


def link_hash(
    *,
    seq: int,
    kind: str,
    execution_id: uuid.UUID | str | None,
    body: Any,
    created_at: datetime,
    prev_hash: str,
) -> str:
    """`sha256:<hex>` over the canonical JSON (RFC 8785) of the link: {"body", "created_at", "execution_id",
    "kind", "prev_hash", "seq"}."""
    content = canonical_json(
        {
            "body": body,
            # UTC with microseconds: what PostgreSQL and SQLite both store and give back unchanged.
            "created_at": created_at.astimezone(UTC).isoformat(),
            "execution_id": execution_id,
            "kind": kind,
            "prev_hash": prev_hash,
            "seq": seq,
        }
    )
    return "sha256:" + hashlib.sha256(content).hexdigest()


def chain_of(execution_id: str | None) -> int:
    """The chain an event goes to: an execution's events all go to one (its id modulo
    PREFLIGHT_AUDIT_CHAINS), events of no execution to chain 0, which also anchors the others' heads."""
    chains = settings.PREFLIGHT_AUDIT_CHAINS
    if chains == 1 or execution_id is None:
        return 0
    return uuid.UUID(execution_id).int % chains


def _lock_heads(events: list[AuditEvent]) -> dict[int, tuple[int, str]]:
    """{chain: (seq, hash)} of the events' chains' heads before them, locked until commit, in chain order
    (two actions never wait on each other's in a cycle)."""
    counts = Counter(event.chain for event in events)
    heads = {}
    for chain in sorted(counts):
        head = queries.advance_head(chain, counts[chain])
        if head is None:  # the chain's first append; a concurrent first append makes the same row
            AuditChain.objects.bulk_create([AuditChain(chain=chain, hash=GENESIS)], ignore_conflicts=True)
            head = queries.advance_head(chain, counts[chain])
        assert head is not None
        heads[chain] = head
    return heads


def _write(events: list[AuditEvent]) -> None:
    """Link the events to their chains, in order, and insert them. The heads are locked only here, at the
    end of the action's transaction."""
    if not connection.in_atomic_block:
        raise RuntimeError("audit events are written inside the transaction of the action they record")
    heads = _lock_heads(events)
    for event in events:
        seq, prev_hash = heads[event.chain]
        event.created_at = timezone.now()
        event.seq, event.prev_hash = seq + 1, prev_hash
        event.hash = link_hash(
            seq=event.seq,
            kind=event.kind,
            execution_id=event.execution_id,
            body=event.body,
            created_at=event.created_at,
            prev_hash=event.prev_hash,
        )
        heads[event.chain] = (event.seq, event.hash)
    queries.append_links(events, heads)


_batches = threading.local()


@contextmanager
def audit_batch() -> Iterator[None]:
    """Appends inside this block are linked and written together when it ends, still inside the caller's
    transaction, in the order they were made (nested blocks join the outermost one). One action that
    appends several events (a preflight, its gap report, its grant) then takes the chain lock once, and
    only for the write at its end rather than from its first append until commit. If a block raises, its
    appends are dropped with the work they record; if the write fails, the action fails.

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
    # As the column gives it back (lowercase, hyphens), which is what `verify_chain` hashes.
    ex_id = str(uuid.UUID(str(execution_id))) if execution_id is not None else None
    event = AuditEvent(kind=kind, execution_id=ex_id, body=dict(body), chain=chain_of(ex_id))
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


def verify_chain(batch: int = 2000, *, chain: int = 0) -> Iterator[tuple[int, Break | None]]:
    """Walk a chain in seq order: (seq, None) per good link, then (seq, Break) at the first bad one."""
    for seq, _, broken in _walk(batch, chain):
        yield seq, broken


def _walk(batch: int, chain: int) -> Iterator[tuple[int, str, Break | None]]:
    """`verify_chain`, with each good link's hash."""
    expected_seq = 1
    prev_hash = GENESIS
    with transaction.atomic():
        rows = (
            AuditEvent.objects.filter(chain=chain)
            .order_by("seq")
            .values_list("seq", "kind", "execution_id", "body", "created_at", "prev_hash", "hash")
        )
        for seq, kind, execution_id, body, created_at, stored_prev, stored_hash in rows.iterator(batch):
            if seq != expected_seq:
                what = "missing (deleted)" if seq > expected_seq else "out of order"
                yield seq, "", Break(expected_seq, f"seq {expected_seq} is {what}; found seq {seq} next")
                return
            if stored_prev != prev_hash:
                yield seq, "", Break(seq, "prev_hash does not match the hash of the previous event")
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
                yield seq, "", Break(seq, "content does not match its hash (the row was edited)")
                return
            yield seq, stored_hash, None
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


def audit_anchor() -> int:
    """Append to chain 0 the heads of the other chains, so that none can be cut short or rewritten below an
    anchored head unseen (`verify_all`). The sweep runs it; returns how many heads it anchored."""
    heads = {}
    for chain in range(1, settings.PREFLIGHT_AUDIT_CHAINS):
        last = AuditEvent.objects.filter(chain=chain).order_by("-seq").values_list("seq", "hash").first()
        if last:  # an empty chain has no head to anchor
            heads[str(chain)] = [int(last[0]), str(last[1])]
    if heads:
        with transaction.atomic():
            audit_append(kind="anchor", execution_id=None, body={"heads": heads})
    return len(heads)


def _anchors() -> dict[int, dict[int, tuple[int, str]]]:
    """{chain: {seq: (anchored hash, seq of the anchor in chain 0)}} from chain 0's anchors."""
    anchored: dict[int, dict[int, tuple[int, str]]] = {}
    rows = AuditEvent.objects.filter(chain=0, kind="anchor").order_by("seq").values_list("seq", "body")
    for at, body in rows:
        for chain, (seq, head) in (body.get("heads") or {}).items():
            anchored.setdefault(int(chain), {})[int(seq)] = (at, str(head))
    return anchored


def verify_all() -> ChainReport:
    """Walk every audit chain (checking each against the heads chain 0 anchored for it), then check every
    stored preflight record against its own digest."""
    events = 0
    head = None
    chains = sorted({0, *AuditEvent.objects.values_list("chain", flat=True).distinct()})
    anchors = _anchors() if len(chains) > 1 or settings.PREFLIGHT_AUDIT_CHAINS > 1 else {}
    for chain in chains:
        name = "audit chain" if chains == [0] else f"audit chain {chain}"
        expected = anchors.get(chain, {})
        last = 0
        for seq, link, broken in _walk(2000, chain):
            if broken is not None:
                return ChainReport(events, head, 0, f"{name} broken at seq {broken.seq}: {broken.reason}")
            if seq in expected and expected[seq][1] != link:
                at = expected[seq][0]
                return ChainReport(
                    events, head, 0, f"{name} broken at seq {seq}: not the link chain 0 anchored at seq {at}"
                )
            events, last = events + 1, seq
            if chain == 0:
                head = seq
        cut = [(seq, at) for seq, (at, _) in expected.items() if seq > last]
        if cut:
            seq, at = min(cut)
            return ChainReport(
                events,
                head,
                0,
                f"{name} broken at seq {seq}: missing (cut short) below the head anchored at seq {at}",
            )
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
