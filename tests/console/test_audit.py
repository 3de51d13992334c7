"""The audit chain: every action leaves a link; any edit, deletion or reordering is found and named."""

from __future__ import annotations

import threading
import uuid
from typing import Any

import pytest
from console_helpers import TRANSFER, Agent, Downstream, transfer_request
from django.core.management import CommandError, call_command
from django.db import DatabaseError, connection, connections, transaction

from console import models, tasks
from console.audit import GENESIS, audit_append, audit_batch
from console.services.measures import measure_create
from preflight.canonical import digest

pytestmark = pytest.mark.django_db


def some_history() -> None:
    for i in range(4):
        measure_create(name=f"m{i}", kind="python", actor="test")


def verify() -> str:
    from io import StringIO

    out = StringIO()
    call_command("verify_audit", stdout=out)
    return out.getvalue()


def test_an_intact_chain_verifies() -> None:
    some_history()

    assert "audit chain ok: 4 events, head seq 4" in verify()
    first = models.AuditEvent.objects.get(seq=1)
    assert first.prev_hash == GENESIS
    assert models.AuditEvent.objects.get(seq=2).prev_hash == first.hash


def test_an_edited_row_is_named() -> None:
    some_history()
    models.AuditEvent.objects.filter(seq=3).update(body={"name": "m2", "kind": "http"})

    with pytest.raises(CommandError, match=r"broken at seq 3: .*edited"):
        verify()


def test_a_deleted_row_is_named() -> None:
    some_history()
    models.AuditEvent.objects.filter(seq=2).delete()

    with pytest.raises(CommandError, match=r"broken at seq 2: seq 2 is missing"):
        verify()


def test_reordered_rows_are_named() -> None:
    some_history()
    a, b = models.AuditEvent.objects.get(seq=2), models.AuditEvent.objects.get(seq=3)
    models.AuditEvent.objects.filter(pk=a.pk).update(seq=1000)
    models.AuditEvent.objects.filter(pk=b.pk).update(seq=2)
    models.AuditEvent.objects.filter(pk=a.pk).update(seq=3)

    with pytest.raises(CommandError, match=r"broken at seq 2"):
        verify()


def test_a_recomputed_hash_on_an_edited_row_breaks_the_next_link() -> None:
    from console.audit import link_hash

    some_history()
    row = models.AuditEvent.objects.get(seq=2)
    body = {"name": "forged"}
    forged = link_hash(
        seq=2, kind=row.kind, execution_id=None, body=body, created_at=row.created_at, prev_hash=row.prev_hash
    )
    models.AuditEvent.objects.filter(pk=row.pk).update(body=body, hash=forged)

    with pytest.raises(CommandError, match=r"broken at seq 3: prev_hash"):
        verify()


def test_an_edited_preflight_record_is_named(quick_bank: Downstream, quick_agent: Agent) -> None:
    record = quick_agent.post("/api/v1/executions", transfer_request()).json()
    stored = models.PreflightRecord.objects.get(execution_id=record["id"])
    models.PreflightRecord.objects.filter(pk=stored.pk).update(record={**stored.record, "verdict": "execute"})

    with pytest.raises(CommandError, match=rf"record {record['id']}#1 does not match its digest"):
        verify()


def test_history_rows_cannot_be_changed_through_the_orm() -> None:
    some_history()
    row = models.AuditEvent.objects.get(seq=1)
    row.body = {"changed": True}

    with pytest.raises(models.AppendOnlyError):
        row.save()
    with pytest.raises(models.AppendOnlyError):
        row.delete()


def test_every_step_of_an_execution_is_in_the_chain(bank: Downstream, agent: Agent) -> None:
    first = agent.post("/api/v1/executions", transfer_request(from_account=None)).json()
    agent.post(
        f"/api/v1/executions/{first['id']}/answers",
        {"answers": {"arg:from_account": "DE89370400440532013000"}, "remember": ["arg:from_account"]},
    )
    record = agent.get(f"/api/v1/executions/{first['id']}").json()
    agent.post(f"/api/v1/executions/{first['id']}/run", {"grant": record["grant"]})

    kinds = list(models.AuditEvent.objects.filter(execution_id=first["id"]).values_list("kind", flat=True))

    assert kinds == [
        "preflight",
        "gap_report",
        "answer",
        "preset",
        "preflight",
        "preflight",
        "grant",
        "run",
        "outcome",
    ]
    assert set(models.AuditEvent.objects.values_list("kind", flat=True)) >= {"catalog_import", "measure"}
    assert "audit chain ok" in verify()


def test_when_the_audit_write_fails_the_action_is_not_recorded(
    quick_operator: Agent, monkeypatch: pytest.MonkeyPatch
) -> None:
    from console import audit

    def broken(**kwargs: object) -> None:
        raise DatabaseError("disk full")

    monkeypatch.setattr("console.services.catalog.audit_append", broken)
    response = quick_operator.post("/api/v1/catalog/import", {"server": "bank", "tools": [TRANSFER]})

    assert response.status_code == 500
    assert response.json()["error"] == "internal_error"
    assert not models.Server.objects.exists()
    assert audit.AuditEvent.objects.count() == 1  # only the operator token's creation


def test_every_link_hash_is_the_digest_of_the_links_canonical_json() -> None:
    execution_id = uuid.uuid4()
    with transaction.atomic(), audit_batch():
        audit_append(kind="first", execution_id=None, body={"n": 1.5, "text": 'Grüße \u2028 "quoted"'})
        # Spelled in capitals: the link covers the id as the column gives it back.
        audit_append(
            kind="second",
            execution_id=str(execution_id).upper(),
            body={"nested": {"b": [1, None], "a": True}},
        )
    measure_create(name="m", kind="python", actor="test")  # an action of its own

    rows = models.AuditEvent.objects.order_by("seq")
    assert [r.kind for r in rows] == ["first", "second", "measure"]
    prev = GENESIS
    for row in rows:
        link = {
            "seq": row.seq,
            "kind": row.kind,
            "execution_id": str(row.execution_id) if row.execution_id else None,
            "body": row.body,
            "created_at": row.created_at.isoformat(),
            "prev_hash": prev,
        }
        assert row.prev_hash == prev
        assert row.hash == digest(link)
        prev = row.hash


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL rejects the NUL character in JSON")
def test_an_audit_write_that_fails_at_commit_fails_its_action(transactional_db: None) -> None:
    with pytest.raises(DatabaseError), transaction.atomic(), audit_batch():
        models.Measure.objects.create(name="kept-only-if-recorded", kind="python")
        audit_append(kind="measure", execution_id=None, body={"name": "\x00"})

    assert not models.Measure.objects.exists()
    assert not models.AuditEvent.objects.exists()


@pytest.mark.skipif(connection.vendor != "postgresql", reason="concurrent writers: PostgreSQL's")
def test_appends_from_many_connections_at_once_make_one_unbroken_chain(transactional_db: None) -> None:
    errors: list[BaseException] = []
    start = threading.Barrier(6)

    def append(n: int) -> None:
        try:
            start.wait()
            for i in range(5):
                with transaction.atomic(), audit_batch():
                    audit_append(kind="a", execution_id=None, body={"n": n, "i": i})
                    audit_append(kind="b", execution_id=None, body={"n": n, "i": i})
        except BaseException as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=append, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert errors == []
    assert list(models.AuditEvent.objects.values_list("seq", flat=True)) == list(range(1, 61))
    events = list(models.AuditEvent.objects.order_by("seq").values_list("kind", "body"))
    # The two events of one action are adjacent: no other append came between them.
    assert all(a == ("a", b[1]) and b[0] == "b" for a, b in zip(events[::2], events[1::2], strict=True))
    assert "audit chain ok" in verify()


@pytest.mark.skipif(connection.vendor != "postgresql", reason="SQLite does not check a column's length")
def test_an_event_kind_longer_than_its_column_fails_its_action_rather_than_being_cut_short() -> None:
    with pytest.raises(DatabaseError), transaction.atomic(), audit_batch():
        audit_append(kind="k" * 41, execution_id=None, body={})

    assert not models.AuditEvent.objects.exists()


# ---- several chains (settings.PREFLIGHT_AUDIT_CHAINS) ------------------------------------------------


def _sharded_history(executions: int = 12) -> list[str]:
    """Appends for several executions and none, as concurrent actions would make them."""
    ids = [str(uuid.UUID(int=n * 7919 + 1)) for n in range(executions)]
    for i, execution_id in enumerate(ids):
        with transaction.atomic(), audit_batch():
            audit_append(kind="preflight", execution_id=execution_id, body={"i": i})
            audit_append(kind="grant", execution_id=execution_id, body={"i": i})
    measure_create(name="m", kind="python", actor="test")  # no execution: chain 0
    return ids


def test_with_several_chains_each_executions_events_stay_in_one_chain_and_all_verify(settings: Any) -> None:
    settings.PREFLIGHT_AUDIT_CHAINS = 4
    ids = _sharded_history()

    chains = {
        e: set(models.AuditEvent.objects.filter(execution_id=e).values_list("chain", flat=True)) for e in ids
    }
    assert all(len(c) == 1 for c in chains.values())
    assert {c for (c,) in chains.values()} == {0, 1, 2, 3}
    for chain in range(4):  # each chain numbers its own links from 1
        links = models.AuditEvent.objects.filter(chain=chain).order_by("seq")
        seqs = list(links.values_list("seq", flat=True))
        assert seqs == list(range(1, len(seqs) + 1))
    assert tasks.sweep()["anchored"] == 3
    assert "audit chain ok: 26 events" in verify()


def test_with_several_chains_the_first_broken_link_is_named_with_its_chain(settings: Any) -> None:
    settings.PREFLIGHT_AUDIT_CHAINS = 4
    _sharded_history()
    models.AuditEvent.objects.filter(chain=2, seq=3).update(body={"i": "edited"})

    with pytest.raises(CommandError, match=r"audit chain 2 broken at seq 3: .*edited"):
        verify()


def test_a_chain_cut_short_below_its_anchored_head_is_found(settings: Any) -> None:
    settings.PREFLIGHT_AUDIT_CHAINS = 4
    _sharded_history()
    tasks.sweep()  # anchors every chain's head in chain 0
    last = models.AuditEvent.objects.filter(chain=3).order_by("-seq").first()
    assert last is not None
    models.AuditEvent.objects.filter(pk=last.pk).delete()  # the tail of chain 3: its own links still agree

    with pytest.raises(CommandError, match=rf"audit chain 3 broken at seq {last.seq}: missing \(cut short\)"):
        verify()
